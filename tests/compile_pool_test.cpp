#include "tuner/compile_pool.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "core/embedded.h"
#include "core/error.h"

namespace mlatune {
namespace {

CompileRequest small_request(int scale) {
  CompileRequest request;
  request.source =
      load_text_file(std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "templates" / "small.cu").text;
  request.source_name = "small.cu";
  request.entry = "scale_vector";
  request.arch = "sm_90";
  request.definitions = {{"SCALE", std::to_string(scale)}};
  request.config = "SCALE=" + std::to_string(scale);
  return request;
}

TEST(CompilePool, CompilesDistinctRequestsEachOnce) {
  Compiler compiler;
  CompilePool pool(compiler, 2);
  EXPECT_EQ(pool.threads(), 2u);
  constexpr int n = 6;
  std::vector<std::shared_future<CompileResult>> futures;
  for (int i = 1; i <= n; ++i) futures.push_back(pool.submit(small_request(i)));
  std::set<std::string> keys;
  for (int i = 0; i < n; ++i) {
    const CompileResult& result = futures[i].get();
    ASSERT_TRUE(result.ok()) << result.failure().message;
    EXPECT_NE(std::find(result.options().begin(), result.options().end(),
                        "-DSCALE=" + std::to_string(i + 1)),
              result.options().end());
    keys.insert(result.key().hash);
  }
  EXPECT_EQ(keys.size(), static_cast<std::size_t>(n));
  CompilePoolStats stats = pool.stats();
  EXPECT_EQ(stats.submitted, static_cast<std::uint64_t>(n));
  EXPECT_EQ(stats.compiled, static_cast<std::uint64_t>(n));
  EXPECT_EQ(stats.memory_hits, 0u);
  // The sums are the compilations' own times.
  double wall = 0, cpu = 0;
  for (auto& future : futures) {
    wall += future.get().compile_seconds();
    cpu += future.get().cpu_seconds();
  }
  EXPECT_GT(stats.nvrtc_cpu_seconds, 0.0);
  EXPECT_DOUBLE_EQ(stats.nvrtc_seconds, wall);
  EXPECT_DOUBLE_EQ(stats.nvrtc_cpu_seconds, cpu);
  EXPECT_EQ(stats.cache_seconds, 0.0);  // no hooks
}

TEST(CompilePool, TimeInTheCacheHooksIsCounted) {
  Compiler compiler;
  constexpr auto pause = std::chrono::milliseconds(30);
  BinaryCacheHooks hooks;
  hooks.lookup = [&](const BinaryKey&) -> std::optional<CompiledBinary> {
    std::this_thread::sleep_for(pause);
    return std::nullopt;
  };
  hooks.store = [&](const CompiledBinary&) { std::this_thread::sleep_for(pause); };
  CompilePool pool(compiler, 1, hooks);
  ASSERT_TRUE(pool.submit(small_request(1)).get().ok());
  // One lookup and one store, each at least `pause`; NVRTC's time is apart.
  CompilePoolStats stats = pool.stats();
  EXPECT_GE(stats.cache_seconds, 2 * 0.030);
  EXPECT_GT(stats.nvrtc_seconds, 0.0);
}

TEST(CompilePool, IdenticalConcurrentRequestsCompileOnce) {
  Compiler compiler;
  CompilePool pool(compiler, 2);
  constexpr int submitters = 4, per_submitter = 3;
  std::vector<std::shared_future<CompileResult>> futures(submitters * per_submitter);
  std::vector<std::thread> threads;
  for (int t = 0; t < submitters; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < per_submitter; ++i)
        futures[t * per_submitter + i] = pool.submit(small_request(7));
    });
  for (std::thread& t : threads) t.join();
  const CompileResult& first = futures[0].get();
  ASSERT_TRUE(first.ok());
  for (auto& future : futures) {
    ASSERT_TRUE(future.get().ok());
    EXPECT_EQ(future.get().binary().cubin, first.binary().cubin);
  }
  CompilePoolStats stats = pool.stats();
  EXPECT_EQ(stats.compiled, 1u);
  EXPECT_EQ(stats.memory_hits, static_cast<std::uint64_t>(submitters * per_submitter - 1));
  // Option order is not part of the identity: reordered definitions are a hit.
  CompileRequest reordered = small_request(7);
  reordered.definitions = {{"ZZ_UNUSED", "1"}, {"SCALE", "7"}};
  CompileRequest sorted = small_request(7);
  sorted.definitions = {{"SCALE", "7"}, {"ZZ_UNUSED", "1"}};
  pool.submit(reordered).wait();
  pool.submit(sorted).wait();
  EXPECT_EQ(pool.stats().compiled, 2u);
}

TEST(CompilePool, FailuresComeBackAsValues) {
  Compiler compiler;
  CompilePool pool(compiler, 1);
  CompileRequest request = small_request(1);
  request.definitions.clear();
  request.config = "SCALE=<missing>";
  const CompileResult& result = pool.submit(request).get();
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.failure().message.find("SCALE=<missing>"), std::string::npos);
  EXPECT_NE(result.log().find("SCALE must be defined"), std::string::npos);
}

TEST(CompilePool, ExternalCacheIsConsultedAndFilled) {
  Compiler compiler;
  std::mutex mutex;
  std::map<BinaryKey, CompiledBinary> store;
  std::atomic<int> lookups = 0;
  BinaryCacheHooks hooks;
  hooks.lookup = [&](const BinaryKey& key) -> std::optional<CompiledBinary> {
    ++lookups;
    std::lock_guard lock(mutex);
    auto it = store.find(key);
    if (it == store.end()) return std::nullopt;
    return it->second;
  };
  hooks.store = [&](const CompiledBinary& binary) {
    std::lock_guard lock(mutex);
    store.emplace(binary.key, binary);
  };
  {
    CompilePool pool(compiler, 2, hooks);
    ASSERT_TRUE(pool.submit(small_request(1)).get().ok());
    ASSERT_TRUE(pool.submit(small_request(2)).get().ok());
    EXPECT_EQ(pool.stats().compiled, 2u);
  }
  EXPECT_EQ(store.size(), 2u);
  // A new pool (a new process, later) finds both in the external cache.
  CompilePool pool(compiler, 2, hooks);
  const CompileResult& again = pool.submit(small_request(2)).get();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.key(), compiler.key(small_request(2)));
  EXPECT_EQ(pool.stats().compiled, 0u);
  EXPECT_EQ(pool.stats().external_hits, 1u);
  EXPECT_EQ(lookups.load(), 3);
}

TEST(CompilePool, ShutdownAnswersEveryFuture) {
  Compiler compiler;
  std::vector<std::shared_future<CompileResult>> futures;
  {
    CompilePool pool(compiler, 1);
    for (int i = 1; i <= 4; ++i) futures.push_back(pool.submit(small_request(100 + i)));
  }
  // Each future is ready: a result, or an EnvironmentError for work that was
  // still queued at shutdown (never a broken promise).
  for (auto& future : futures) {
    ASSERT_EQ(future.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    try {
      EXPECT_TRUE(future.get().ok());
    } catch (const EnvironmentError& e) {
      EXPECT_NE(std::string(e.what()).find("shut down"), std::string::npos);
    }
  }
}

TEST(CompilePool, DefaultsToOneThreadPerCore) {
  Compiler compiler;
  CompilePool pool(compiler);
  EXPECT_EQ(pool.threads(), std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace
}  // namespace mlatune
