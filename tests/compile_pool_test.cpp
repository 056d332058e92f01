#include "tuner/compile_pool.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "core/binary_image.h"
#include "core/embedded.h"
#include "core/error.h"
#include "core/space.h"

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


// ---- compile processes -------------------------------------------------------------

WorkerOptions compile_worker() {
  WorkerOptions options;
  options.executable = std::filesystem::path(MLATUNE_BINARY_DIR) / "mlatune-worker";
  return options;
}

// The compile processes this process started (children running mlatune-worker).
std::vector<pid_t> compile_children() {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...
    const std::size_t close = line.rfind(')');
    const std::size_t open = line.find('(');
    if (close == std::string::npos || open == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t parent = 0;
    rest >> state >> parent;
    if (parent == ::getpid() && line.substr(open + 1, close - open - 1) == "mlatune-worker")
      children.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return children;
}

// Each thread's NVRTC runs in a worker process of its own: the same
// binaries, resource reports and failures as in this process, byte for byte.
TEST(CompilePool, ProcessesCompileWhatThreadsCompile) {
  Compiler compiler;
  CompilePool threads(compiler, 2);
  CompilePool processes(compiler, 2, {}, CompileIn::processes, compile_worker());
  ASSERT_EQ(processes.where(), CompileIn::processes);
  EXPECT_EQ(threads.where(), CompileIn::threads);
  for (int scale : {2, 3, 5}) {
    const CompileResult& a = threads.submit(small_request(scale)).get();
    const CompileResult& b = processes.submit(small_request(scale)).get();
    ASSERT_TRUE(a.ok() && b.ok()) << b.log();
    EXPECT_EQ(a.key(), b.key());
    EXPECT_EQ(a.binary().cubin, b.binary().cubin);
    EXPECT_EQ(a.binary().usage, b.binary().usage);
    EXPECT_GT(b.binary().usage.registers, 0);
    EXPECT_EQ(a.options(), b.options());
    EXPECT_EQ(a.binary().entry, b.binary().entry);
    EXPECT_EQ(a.binary().arch, b.binary().arch);
    EXPECT_GT(b.compile_seconds(), 0.0);
    EXPECT_GT(b.cpu_seconds(), 0.0);
  }
  CompileRequest broken = small_request(1);
  broken.definitions.clear();
  broken.config = "SCALE=<missing>";
  const CompileResult& a = threads.submit(broken).get();
  const CompileResult& b = processes.submit(broken).get();
  ASSERT_FALSE(a.ok());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(a.failure().message, b.failure().message);
  EXPECT_NE(b.log().find("SCALE must be defined"), std::string::npos) << b.log();
  EXPECT_EQ(processes.stats().compiled, 4u);
  EXPECT_GT(processes.stats().nvrtc_cpu_seconds, 0.0);
  EXPECT_FALSE(compile_children().empty()) << "no compile process ran";
}

/// The nice value in a /proc stat file (the 19th field; the command, in
/// parentheses, may hold spaces); nullopt when it cannot be read.
std::optional<int> nice_in(const std::filesystem::path& stat_file) {
  std::ifstream stat(stat_file);
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
  // utime stime cutime cstime priority nice
  for (int i = 0; i < 16 && rest >> field; ++i) {
  }
  int nice = 0;
  if (!(rest >> nice)) return std::nullopt;
  return nice;
}

// Compilation runs below the thread that made the pool, so that the GPU
// worker's host thread and the sweep's get a core first: each compile
// thread, and each compile process (which inherits its thread's priority),
// at compile_niceness more; the thread that made the pool keeps its own.
TEST(CompilePool, CompileThreadsAndProcessesRunBelowTheThreadThatMadeThePool) {
  const std::optional<int> mine = nice_in("/proc/thread-self/stat");
  ASSERT_TRUE(mine);
  const int lowered = std::min(19, *mine + compile_niceness);
  ASSERT_NE(lowered, *mine) << "this test runs at the lowest priority already";
  Compiler compiler;
  {
    CompilePool threads(compiler, 2);
    ASSERT_TRUE(threads.submit(small_request(7)).get().ok());
    ASSERT_TRUE(threads.submit(small_request(8)).get().ok());
    int below = 0;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task"))
      below += nice_in(task.path() / "stat") == lowered;
    EXPECT_GE(below, 2) << "the pool's two threads do not run at nice " << lowered;
    EXPECT_EQ(nice_in("/proc/thread-self/stat"), mine);
  }
  CompilePool processes(compiler, 2, {}, CompileIn::processes, compile_worker());
  ASSERT_EQ(processes.where(), CompileIn::processes);
  ASSERT_TRUE(processes.submit(small_request(9)).get().ok());
  const std::vector<pid_t> children = compile_children();
  ASSERT_FALSE(children.empty()) << "no compile process ran";
  for (pid_t child : children)
    EXPECT_EQ(nice_in(std::filesystem::path("/proc") / std::to_string(child) / "stat"), lowered) << child;
  EXPECT_EQ(nice_in("/proc/thread-self/stat"), mine);
}

// A space whose prologue is compiled apart (tests/spaces/apart.yaml): the
// pool's compiler keeps the parts, so its compile processes compile a part
// shared by several configs once between them, where each process would
// compile it for itself; the binaries are those of compiling in threads.
TEST(CompilePool, ProcessesShareOneProloguePartThroughThePoolsCompiler) {
  const SearchSpace space = SearchSpace::load(std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "spaces" / "apart.yaml");
  const Shape shape = space.parse_shape("N=1000");
  std::vector<CompileRequest> requests;
  for (const char* text : {"EXPAND=true,THREADS=64,PROLOGUE_THREADS=128", "EXPAND=true,THREADS=256,PROLOGUE_THREADS=128"})
    requests.push_back(compile_request(space, space.parse_config(text), shape, "sm_90"));
  ASSERT_TRUE(requests[0].prologue_part && requests[0].prologue_part == requests[1].prologue_part);

  const Compiler in_threads;
  CompilePool threads(in_threads, 1);
  const Compiler in_processes;
  {
    CompilePool processes(in_processes, 2, {}, CompileIn::processes, compile_worker());
    ASSERT_EQ(processes.where(), CompileIn::processes);
    std::vector<std::shared_future<CompileResult>> pending;
    for (const CompileRequest& r : requests) pending.push_back(processes.submit(r));
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const CompileResult& a = threads.submit(requests[i]).get();
      const CompileResult& b = pending[i].get();
      ASSERT_TRUE(a.ok() && b.ok()) << b.log();
      EXPECT_EQ(a.key(), b.key());
      EXPECT_EQ(a.binary().cubin, b.binary().cubin);  // both parts, packed alike
      EXPECT_EQ(unpack_images(b.binary().cubin).size(), 2u);
      EXPECT_EQ(a.binary().usage, b.binary().usage);
    }
    EXPECT_FALSE(compile_children().empty()) << "no compile process ran";
  }
  EXPECT_EQ(in_processes.prologue_parts().compiled, 1u);
  EXPECT_EQ(in_processes.prologue_parts().reused, 1u);
}

// A compile process killed between requests is replaced: the next request
// still compiles.  One that dies on every request fails that request only,
// as a value naming the config.
TEST(CompilePool, ACompileProcessThatDiesIsReplacedOrFailsItsRequestOnly) {
  Compiler compiler;
  {
    CompilePool pool(compiler, 1, {}, CompileIn::processes, compile_worker());
    ASSERT_TRUE(pool.submit(small_request(2)).get().ok());
    const std::vector<pid_t> children = compile_children();
    ASSERT_EQ(children.size(), 1u);
    ASSERT_EQ(::kill(children[0], SIGKILL), 0);
    const CompileResult& after = pool.submit(small_request(3)).get();
    EXPECT_TRUE(after.ok()) << after.log();
    const std::vector<pid_t> now = compile_children();
    ASSERT_EQ(now.size(), 1u);
    EXPECT_NE(now[0], children[0]);
  }
  EXPECT_TRUE(compile_children().empty()) << "the pool left a compile process behind";

  WorkerOptions dies;
  dies.executable = "/bin/false";  // exits at once, reading nothing
  CompilePool pool(compiler, 1, {}, CompileIn::processes, dies);
  ASSERT_EQ(pool.where(), CompileIn::processes);
  const CompileRequest request = small_request(4);
  const CompileResult& failed = pool.submit(request).get();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.key(), compiler.key(request));
  EXPECT_EQ(failed.options(), compiler.options(request));
  EXPECT_NE(failed.failure().message.find("SCALE=4"), std::string::npos) << failed.failure().message;
  EXPECT_NE(failed.log().find("the compile process ended"), std::string::npos) << failed.log();
  // The pool goes on: another request gets its own answer.
  EXPECT_FALSE(pool.submit(small_request(5)).get().ok());
}

// Without the worker program there, the pool compiles in its threads.
TEST(CompilePool, WithoutTheWorkerProgramThePoolCompilesInThreads) {
  Compiler compiler;
  WorkerOptions missing;
  missing.executable = std::filesystem::path(MLATUNE_BINARY_DIR) / "no-such-mlatune-worker";
  CompilePool pool(compiler, 1, {}, CompileIn::processes, missing);
  EXPECT_EQ(pool.where(), CompileIn::threads);
  EXPECT_TRUE(pool.submit(small_request(6)).get().ok());
}

TEST(CompilePool, CompileInNames) {
  EXPECT_EQ(parse_compile_in("processes"), CompileIn::processes);
  EXPECT_EQ(parse_compile_in("threads"), CompileIn::threads);
  EXPECT_FALSE(parse_compile_in("fibers"));
  EXPECT_EQ(to_string(CompileIn::processes), "processes");
}

}  // namespace
}  // namespace mlatune
