// The dispatcher on a real GPU, through the C ABI: random shapes (tuned,
// untuned, T = 1, T*H > 10^4, R % 4 != 0, D not a power of two) dispatched on
// Workload buffers and validated against the float64 reference; and the first
// use of a stored shape in a fresh process (no NVRTC).  Every test skips
// without a GPU.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/dispatcher.h"
#include "cache/mla.h"
#include "cache/mla_c_api.h"
#include "cache/store.h"
#include "tuner/cuda.h"
#include "tuner/space.h"
#include "tuner/workload.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path space_file = fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" /
                            "fused_mla_attention.yaml";

struct Dims {
  int B, T, H, D, R;
};

class GpuDispatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GpuProbe probe = probe_gpu();
    if (!probe.usable) GTEST_SKIP() << "no GPU: " << probe.reason;
    device_ = probe.device.info();
    dir_ = fs::temp_directory_path() / ("mlatune_gpu_dispatch_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    space_ = std::make_unique<SearchSpace>(SearchSpace::load(space_file));
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Shape shape(const Dims& d) const { return Shape{{d.B, d.T, d.H, d.D, d.R}}; }

  // Makes `config` the best entry at `shape` for this GPU (what a sweep would do).
  void tune(const fs::path& db, const Shape& s, const Config& config) {
    Store store = Store::open(db);
    std::int64_t kernel = store.ensure_kernel(
        KernelInfo{space_->kernel_name(), space_->template_hash(), space_->definition_hash()});
    std::int64_t device = store.ensure_device(device_);
    std::int64_t toolchain = store.ensure_toolchain(ToolchainInfo::current());
    std::int64_t run = store.begin_run(RunInfo{kernel, device, toolchain, space_file.string(), space_->text(),
                                               "gpu_dispatch_test", "{}"});
    Measurement m;
    m.run_id = run;
    m.shape = space_->shape_string(s);
    m.config = space_->config_string(config);
    m.timing = Timing{10, 10, 10, 1, 0, "gpu_dispatch_test (not timed)"};
    m.error = ErrorFigures{0, 0};
    store.record(m);
    store.finish_run(run, RunStatus::finished);
  }

  // Dispatches at `d` through the C ABI on fresh random inputs and returns the
  // relative L2 error against the float64 reference.
  double dispatch_and_validate(mlatune_dispatcher* handle, const Dims& d, std::uint64_t seed) {
    WorkloadOptions options;
    options.seed = seed;
    options.cache = CacheMode::hot;
    options.validation_sets = 1;
    Workload workload(*space_, shape(d), options);
    workload.poison_outputs();
    void** args = workload.arguments(0);
    auto ptr = [&](int i) { return *static_cast<float**>(args[i]); };
    int status = mlatune_fused_mla_attention(handle, ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), d.B, d.T, d.H,
                                             d.D, d.R, workload.stream().get());
    EXPECT_EQ(status, MLATUNE_OK) << mlatune_last_error(handle);
    ValidationStats stats = workload.compare(0);
    EXPECT_EQ(stats.nonfinite, 0u);
    return stats.relative_l2;
  }

  DeviceInfo device_;
  fs::path dir_;
  std::unique_ptr<SearchSpace> space_;
};

std::vector<Dims> random_shapes(std::size_t count, std::uint64_t seed) {
  // A few (H, D, R) families so binaries are shared between shapes; they
  // include R % 4 != 0 and D not a power of two.
  const std::vector<std::array<int, 3>> families = {
      {4, 16, 24}, {8, 32, 64}, {16, 64, 128}, {8, 24, 22}, {4, 48, 50},
      {16, 40, 96}, {2, 20, 36}, {32, 64, 256}, {8, 128, 512}, {12, 16, 30}};
  constexpr std::int64_t max_elements = std::int64_t{1} << 22;
  std::mt19937_64 rng(seed);
  std::vector<Dims> shapes;
  for (std::size_t i = 0; i < count; ++i) {
    const auto& f = families[rng() % families.size()];
    Dims d{1 + static_cast<int>(rng() % 4), 0, f[0], f[1], f[2]};
    switch (i % 5) {
      case 0: d.T = 1; break;
      case 1: {  // T*H > 10^4
        d.B = 1;
        d.T = std::min(2048, 10'000 / d.H + 1 + static_cast<int>(rng() % 512));
        break;
      }
      default: d.T = 1 + static_cast<int>(rng() % 2048);
    }
    while (std::int64_t{d.B} * d.T * d.H * d.D > max_elements) {
      if (d.B > 1) --d.B; else d.T /= 2;
    }
    shapes.push_back(d);
  }
  return shapes;
}

TEST_F(GpuDispatchTest, RandomShapesThroughTheCApiMatchTheFloat64Reference) {
  std::size_t count = 200;
  if (const char* n = std::getenv("MLATUNE_DISPATCH_SHAPES"); n && *n) count = std::stoul(n);
  std::vector<Dims> shapes = random_shapes(count, 20261129);

  // The tuned database: every tenth shape is tuned (with a random valid
  // config, as a sweep's winner would be), so it is a hit and its
  // neighbours are nearest; every seventh shape goes to an empty database
  // (default config).
  const fs::path tuned = dir_ / "tuned.db";
  const fs::path empty = dir_ / "empty.db";
  Store::open(empty);
  Store::open(tuned);
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i < shapes.size(); i += 10)
    if (std::optional<Config> c = space_->sample(shape(shapes[i]), rng)) tune(tuned, shape(shapes[i]), *c);

  mlatune_dispatcher* with_tuning = nullptr;
  mlatune_dispatcher* without = nullptr;
  ASSERT_EQ(mlatune_open(tuned.c_str(), space_file.c_str(), &with_tuning), MLATUNE_OK) << mlatune_last_error(nullptr);
  ASSERT_EQ(mlatune_open(empty.c_str(), space_file.c_str(), &without), MLATUNE_OK) << mlatune_last_error(nullptr);

  std::map<std::string, int> reasons;
  double worst = 0;
  std::string worst_shape;
  int t1 = 0, large_th = 0, r_not4 = 0, d_not_pow2 = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const Dims& d = shapes[i];
    mlatune_dispatcher* handle = (i % 7 == 3) ? without : with_tuning;
    char choice[1024];
    ASSERT_EQ(mlatune_choice(handle, d.B, d.T, d.H, d.D, d.R, choice, sizeof choice), MLATUNE_OK)
        << mlatune_last_error(handle);
    std::string reason(choice, std::string(choice).find(' '));
    ++reasons[reason];
    double error = dispatch_and_validate(handle, d, 1000 + i);
    const std::string text = space_->shape_string(shape(d));
    EXPECT_LE(error, space_->tolerance().relative_l2) << text << ": " << choice;
    if (error > worst) worst = error, worst_shape = text;
    t1 += d.T == 1;
    large_th += std::int64_t{d.T} * d.H > 10'000;
    r_not4 += d.R % 4 != 0;
    d_not_pow2 += (d.D & (d.D - 1)) != 0;
  }
  unsigned long long compiles_tuned = 0, compiles_empty = 0;
  mlatune_compile_count(with_tuning, &compiles_tuned);
  mlatune_compile_count(without, &compiles_empty);
  mlatune_close(with_tuning);
  mlatune_close(without);

  std::printf("dispatched %zu shapes: hit %d, nearest %d, default %d, first_valid %d\n", shapes.size(),
              reasons["hit"], reasons["nearest"], reasons["default"], reasons["first_valid"]);
  std::printf("  T=1: %d, T*H>10^4: %d, R%%4!=0: %d, D not a power of two: %d\n", t1, large_th, r_not4,
              d_not_pow2);
  std::printf("  worst relative L2 %.3g at %s; NVRTC compiles %llu (tuned db) + %llu (empty db)\n", worst,
              worst_shape.c_str(), compiles_tuned, compiles_empty);
  EXPECT_GT(reasons["hit"], 0);
  EXPECT_GT(reasons["nearest"], 0);
  EXPECT_GT(reasons["default"] + reasons["first_valid"], 0);
  EXPECT_EQ(reasons["none"], 0);
  EXPECT_GT(t1, 0);
  EXPECT_GT(large_th, 0);
  EXPECT_GT(r_not4, 0);
  EXPECT_GT(d_not_pow2, 0);

  // Untuned shapes were counted for `mlatune tune --misses`.
  Store store = Store::open(tuned, StoreMode::read_only);
  EXPECT_GE(store.misses().size(), 1u);
}

TEST_F(GpuDispatchTest, ManyThreadsDispatchAtOnce) {
  const fs::path db = dir_ / "threads.db";
  const std::vector<Dims> dims = {{2, 32, 4, 16, 24}, {1, 1, 8, 24, 22}, {1, 1500, 8, 32, 64}, {3, 100, 4, 48, 50}};
  std::mt19937_64 rng(3);
  if (std::optional<Config> c = space_->sample(shape(dims[0]), rng)) tune(db, shape(dims[0]), *c);
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db, space_file);
  const MlaAttention mla(*dispatcher);
  std::vector<std::unique_ptr<Workload>> workloads;
  std::set<std::string> binaries;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    WorkloadOptions options;
    options.seed = 100 + i;
    options.validation_sets = 1;
    workloads.push_back(std::make_unique<Workload>(*space_, shape(dims[i]), options));
    workloads.back()->poison_outputs();
    workloads.back()->stream().synchronize();
    binaries.insert(dispatcher->describe(shape(dims[i])).choice.binary.hash);
  }
  // Every thread starts on a different shape, so first uses race each other.
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 50; ++k) {
        std::size_t i = static_cast<std::size_t>(t + k) % dims.size();
        const Dims& d = dims[i];
        void** args = workloads[i]->arguments(0);
        auto ptr = [&](int a) { return *static_cast<float**>(args[a]); };
        try {
          mla(ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), d.B, d.T, d.H, d.D, d.R, workloads[i]->stream().get());
        } catch (const Error&) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    ValidationStats stats = workloads[i]->compare(0);
    EXPECT_LE(stats.relative_l2, space_->tolerance().relative_l2) << space_->shape_string(shape(dims[i]));
  }
  DispatcherStats stats = dispatcher->stats();
  EXPECT_EQ(stats.shapes, dims.size());
  EXPECT_EQ(stats.compiles, binaries.size()) << "each binary compiled once despite the races";
  EXPECT_EQ(stats.binaries_loaded, binaries.size());
}

// The child half of FirstUseOfAStoredShapeInANewProcess: runs only when the
// parent sets MLATUNE_FIRST_USE_DB.
TEST_F(GpuDispatchTest, FirstUseChild) {
  const char* db = std::getenv("MLATUNE_FIRST_USE_DB");
  if (!db) GTEST_SKIP() << "runs only as the child of FirstUseOfAStoredShapeInANewProcess";
  const Dims d{2, 512, 16, 64, 128};
  WorkloadOptions options;
  options.seed = 5;
  options.validation_sets = 1;
  Workload workload(*space_, shape(d), options);  // the CUDA context exists before timing starts
  workload.poison_outputs();
  workload.stream().synchronize();
  void** args = workload.arguments(0);
  auto ptr = [&](int i) { return *static_cast<float**>(args[i]); };

  auto t0 = std::chrono::steady_clock::now();
  mlatune_dispatcher* handle = nullptr;
  ASSERT_EQ(mlatune_open(db, space_file.c_str(), &handle), MLATUNE_OK) << mlatune_last_error(nullptr);
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_EQ(mlatune_fused_mla_attention(handle, ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), d.B, d.T, d.H, d.D, d.R,
                                        workload.stream().get()),
            MLATUNE_OK)
      << mlatune_last_error(handle);
  auto t2 = std::chrono::steady_clock::now();
  workload.stream().synchronize();
  auto t3 = std::chrono::steady_clock::now();
  auto t4 = t3;
  ASSERT_EQ(mlatune_fused_mla_attention(handle, ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), d.B, d.T, d.H, d.D, d.R,
                                        workload.stream().get()),
            MLATUNE_OK);
  auto t5 = std::chrono::steady_clock::now();
  unsigned long long compiles = 99;
  ASSERT_EQ(mlatune_compile_count(handle, &compiles), MLATUNE_OK);
  EXPECT_EQ(compiles, 0u) << "a stored shape must load its binary, not compile it";
  char choice[1024];
  ASSERT_EQ(mlatune_choice(handle, d.B, d.T, d.H, d.D, d.R, choice, sizeof choice), MLATUNE_OK);
  EXPECT_EQ(std::string(choice).rfind("hit ", 0), 0u) << choice;
  ValidationStats stats = workload.compare(0);
  EXPECT_LE(stats.relative_l2, space_->tolerance().relative_l2);
  mlatune_close(handle);
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  std::printf("first use in a new process: open %.2f ms (probe, index), first launch %.3f ms host "
              "(binary loaded from the database, no NVRTC), %.3f ms to completion; second launch %.4f ms host\n",
              ms(t0, t1), ms(t1, t2), ms(t1, t3), ms(t4, t5));
}

TEST_F(GpuDispatchTest, FirstUseOfAStoredShapeInANewProcess) {
  if (std::getenv("MLATUNE_FIRST_USE_DB")) GTEST_SKIP() << "this is the child";
  const fs::path db = dir_ / "stored.db";
  const Dims d{2, 512, 16, 64, 128};
  std::mt19937_64 rng(11);
  std::optional<Config> config = space_->sample(shape(d), rng);
  ASSERT_TRUE(config);
  tune(db, shape(d), *config);
  {
    // What a sweep leaves behind: the binary of the best config in the store.
    std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db, space_file);
    WorkloadOptions options;
    options.validation_sets = 1;
    Workload workload(*space_, shape(d), options);
    dispatcher->launch(shape(d), workload.arguments(0), workload.stream().get());
    workload.stream().synchronize();
    ASSERT_EQ(dispatcher->stats().binaries_stored, 1u);
  }
  pid_t pid = fork();
  if (pid == 0) {
    setenv("MLATUNE_FIRST_USE_DB", db.c_str(), 1);
    std::string filter = "--gtest_filter=GpuDispatchTest.FirstUseChild";
    std::string program = "/proc/self/exe";
    char* argv[] = {program.data(), filter.data(), nullptr};
    execv(program.c_str(), argv);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's output above says why";
}

}  // namespace
}  // namespace mlatune
