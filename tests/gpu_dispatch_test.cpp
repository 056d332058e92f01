// The dispatcher on a real GPU, through the C ABI: random shapes (tuned,
// untuned, T = 1, T*H > 10^4, R % 4 != 0, D not a power of two) dispatched on
// Workload buffers and validated against the float64 reference; and the first
// use of a stored shape in a fresh process (no NVRTC).  Every test skips
// without a GPU.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "cache/dispatcher.h"
#include "cache/mla.h"
#include "cache/mla_c_api.h"
#include "cache/store.h"
#include "tests/space_parameter.h"
#include "tests/tuned_entry.h"
#include "core/compiler.h"
#include "core/cuda.h"
#include "core/launch_plan.h"
#include "core/space.h"
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
    record_tuned_entry(db, *space_, space_file, device_, space_->shape_string(s),
                       space_->config_string(config), "gpu_dispatch_test",
                       Timing{10, 10, 10, 1, 0, "gpu_dispatch_test (not timed)"});
  }

  // Fresh random inputs for one validation set, hot cache.
  static WorkloadOptions checked_inputs(std::uint64_t seed) {
    WorkloadOptions options;
    options.seed = seed;
    options.cache = CacheMode::hot;
    options.validation_sets = 1;
    return options;
  }

  // Dispatches at `d` through the C ABI on fresh random inputs and returns the
  // relative L2 error against the float64 reference.
  double dispatch_and_validate(mlatune_dispatcher* handle, const Dims& d, std::uint64_t seed) {
    Workload workload(*space_, shape(d), checked_inputs(seed));
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

  // One launch at `d` through `dispatcher` on poisoned outputs, checked against
  // float64 (synchronizes).
  void launch_checked(Dispatcher& dispatcher, Workload& workload, const Dims& d, const char* what) {
    workload.poison_outputs();
    dispatcher.launch(shape(d), workload.arguments(0), workload.stream().get());
    ValidationStats stats = workload.compare(0);
    EXPECT_EQ(stats.nonfinite, 0u) << what;
    EXPECT_LE(stats.relative_l2, space_->tolerance().relative_l2) << what << ": " << dispatcher.describe(shape(d)).text;
  }

  // Checked launches at `d` until its race settles (at most 100); how many.
  int launch_until_settled(Dispatcher& dispatcher, Workload& workload, const Dims& d) {
    int launches = 0;
    while (!dispatcher.describe(shape(d)).race->settled && launches < 100) {
      launch_checked(dispatcher, workload, d, "raced launch");
      ++launches;
    }
    return launches;
  }

  // Options for tests that count loads and compiles: races at untuned
  // shapes (on by default, and where MLATUNE_RACE says) would load and
  // compile more.
  static DispatcherOptions without_races(DispatcherOptions options = {}) {
    options.race.candidates = 0;
    options.race_from_environment = false;
    return options;
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

  std::printf("dispatched %zu shapes: hit %d, nearest %d, repaired %d, fallback %d, default %d, first_valid %d\n",
              shapes.size(), reasons["hit"], reasons["nearest"], reasons["repaired"], reasons["fallback"],
              reasons["default"], reasons["first_valid"]);
  std::printf("  T=1: %d, T*H>10^4: %d, R%%4!=0: %d, D not a power of two: %d\n", t1, large_th, r_not4,
              d_not_pow2);
  std::printf("  worst relative L2 %.3g at %s; NVRTC compiles %llu (tuned db) + %llu (empty db)\n", worst,
              worst_shape.c_str(), compiles_tuned, compiles_empty);
  EXPECT_GT(reasons["hit"], 0);
  EXPECT_GT(reasons["nearest"] + reasons["repaired"], 0);
  EXPECT_GT(reasons["fallback"] + reasons["default"] + reasons["first_valid"], 0);
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
  // Six shapes, more than a thread's memo holds, so lookups also go through
  // the shared table while other threads insert into it.  The last two share
  // (H, D, R) and so binaries with earlier ones.
  const std::vector<Dims> dims = {{2, 32, 4, 16, 24}, {1, 1, 8, 24, 22},   {1, 1500, 8, 32, 64},
                                  {3, 100, 4, 48, 50}, {1, 7, 4, 16, 24}, {2, 333, 8, 32, 64}};
  std::mt19937_64 rng(3);
  if (std::optional<Config> c = space_->sample(shape(dims[0]), rng)) tune(db, shape(dims[0]), *c);
  // Two dispatchers on one database, used by every thread in turn: each must
  // prepare every shape itself (a thread's memo never answers for the other).
  // Blocking compiles: each shape loads exactly its chosen binary (no stand-ins).
  DispatcherOptions blocking = without_races();
  blocking.compile = CompileMode::blocking;
  std::unique_ptr<Dispatcher> dispatchers[2] = {Dispatcher::open(db, space_file, blocking),
                                                Dispatcher::open(db, space_file, blocking)};
  const MlaAttention mla[2] = {MlaAttention(*dispatchers[0]), MlaAttention(*dispatchers[1])};
  std::vector<std::unique_ptr<Workload>> workloads;
  std::set<std::string> binaries;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    WorkloadOptions options;
    options.seed = 100 + i;
    options.validation_sets = 1;
    workloads.push_back(std::make_unique<Workload>(*space_, shape(dims[i]), options));
    workloads.back()->poison_outputs();
    workloads.back()->stream().synchronize();
    binaries.insert(dispatchers[0]->describe(shape(dims[i])).choice.binary.hash);
  }
  // Every thread starts on a different shape, so first uses race each other.
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 60; ++k) {
        std::size_t i = static_cast<std::size_t>(t + k) % dims.size();
        const Dims& d = dims[i];
        void** args = workloads[i]->arguments(0);
        auto ptr = [&](int a) { return *static_cast<float**>(args[a]); };
        try {
          const MlaAttention& entry = mla[(static_cast<std::size_t>(k) / dims.size() + static_cast<std::size_t>(t)) % 2];
          entry(ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), d.B, d.T, d.H, d.D, d.R, workloads[i]->stream().get());
        } catch (const Error& e) {
          ++failures;
          std::fprintf(stderr, "thread %d: %s\n", t, e.what());
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    ValidationStats stats = workloads[i]->compare(0);
    EXPECT_EQ(stats.nonfinite, 0u) << space_->shape_string(shape(dims[i]));
    EXPECT_LE(stats.relative_l2, space_->tolerance().relative_l2) << space_->shape_string(shape(dims[i]));
  }
  for (const auto& dispatcher : dispatchers) {
    DispatcherStats stats = dispatcher->stats();
    EXPECT_EQ(stats.shapes, dims.size());
    // Each binary is loaded once per dispatcher despite the races; it comes
    // from NVRTC or from the store (where the other dispatcher may have put it).
    EXPECT_EQ(stats.binaries_loaded, binaries.size());
    EXPECT_EQ(stats.compiles + stats.binaries_from_store, binaries.size());
    EXPECT_EQ(dispatcher->describe(shape(dims[0])).choice.reason, ChoiceReason::hit);
  }
}

// A record stored under the key of this GPU's binary but labelled for another
// architecture, NVRTC or template version is never loaded: the dispatcher
// compiles instead.  Its bytes are a real cubin of another architecture, which
// this GPU could not run.
TEST_F(GpuDispatchTest, BinariesOfAnotherArchitectureToolchainOrTemplateAreNeverLoaded) {
  const Dims d{2, 48, 4, 16, 24};
  const Config& config = space_->default_config();
  // The newest architecture older than this GPU's: its cubin cannot run here.
  auto number = [](const std::string& arch) { return std::stoi(arch.substr(3)); };  // "sm_90" -> 90
  std::string other_arch;
  for (const std::string& arch : supported_architectures())
    if (number(arch) < number(device_.arch) && (other_arch.empty() || number(arch) > number(other_arch)))
      other_arch = arch;
  if (other_arch.empty()) GTEST_SKIP() << "this NVRTC has no architecture older than " << device_.arch;
  CompileResult foreign = Compiler().compile(compile_request(*space_, config, shape(d), other_arch));
  ASSERT_TRUE(foreign.ok()) << foreign.failure().message;

  struct Mislabel {
    const char* what;
    void (*apply)(BinaryRecord&, const std::string&);
  };
  const Mislabel mislabels[] = {
      {"another architecture", [](BinaryRecord& r, const std::string& other) { r.arch = other; }},
      {"another NVRTC", [](BinaryRecord& r, const std::string&) { r.nvrtc_version = "0.0"; }},
      {"another template version",
       [](BinaryRecord& r, const std::string&) { r.template_hash = "0123456789abcdef0123456789abcdef"; }},
  };
  for (const Mislabel& mislabel : mislabels) {
    SCOPED_TRACE(mislabel.what);
    const fs::path db = dir_ / (std::string("foreign_") + std::to_string(&mislabel - mislabels) + ".db");
    tune(db, shape(d), config);
    DispatcherOptions read_only;
    read_only.read_only = true;  // the planted record stays as it is
    std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db, space_file, read_only);
    const Choice choice = dispatcher->describe(shape(d)).choice;
    ASSERT_EQ(choice.reason, ChoiceReason::hit);
    BinaryRecord planted;
    planted.key = choice.binary.hash;  // where this GPU's binary would be
    planted.kernel_name = space_->kernel_name();
    planted.template_hash = space_->template_hash();
    planted.nvrtc_version = ToolchainInfo::current().nvrtc_version;
    planted.arch = device_.arch;
    planted.cubin.assign(foreign.binary().cubin.begin(), foreign.binary().cubin.end());
    mislabel.apply(planted, other_arch);
    Store::open(db).put_binary(planted);

    WorkloadOptions options;
    options.seed = 21;
    options.validation_sets = 1;
    Workload workload(*space_, shape(d), options);
    workload.poison_outputs();
    const MlaAttention mla(*dispatcher);
    void** args = workload.arguments(0);
    auto ptr = [&](int i) { return *static_cast<float**>(args[i]); };
    ASSERT_NO_THROW(mla(ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), d.B, d.T, d.H, d.D, d.R, workload.stream().get()));
    ValidationStats stats = workload.compare(0);
    EXPECT_EQ(stats.nonfinite, 0u);
    EXPECT_LE(stats.relative_l2, space_->tolerance().relative_l2);
    DispatcherStats counts = dispatcher->stats();
    EXPECT_EQ(counts.binaries_from_store, 0u) << "the planted record was loaded";
    EXPECT_EQ(counts.compiles, 1u);
    EXPECT_EQ(counts.binaries_loaded, 1u);
    Store store = Store::open(db, StoreMode::read_only);
    std::optional<BinaryRecord> kept = store.get_binary(choice.binary.hash);
    ASSERT_TRUE(kept);
    EXPECT_EQ(kept->cubin, planted.cubin) << "a read-only dispatcher stores nothing";
  }
}

// The child half of FirstUseOfAStoredShapeInANewProcess: runs only when the
// parent sets MLATUNE_FIRST_USE_DB.  Prints (and records as test properties)
// the host time of Dispatcher::open, of the first dispatch of the stored
// shape (index lookup, cubin read from the database and loaded, geometry),
// and of the second (a hit).
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
  using clock = std::chrono::steady_clock;

  const auto t0 = clock::now();
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db, space_file);
  const auto t1 = clock::now();
  const MlaAttention mla(*dispatcher);
  mla(ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), d.B, d.T, d.H, d.D, d.R, workload.stream().get());
  const auto t2 = clock::now();
  workload.stream().synchronize();
  const auto t3 = clock::now();
  mla(ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), d.B, d.T, d.H, d.D, d.R, workload.stream().get());
  const auto t4 = clock::now();
  workload.stream().synchronize();

  const DispatcherStats stats = dispatcher->stats();
  EXPECT_EQ(stats.compiles, 0u) << "a stored shape must load its binary, not compile it";
  EXPECT_EQ(stats.binaries_from_store, 1u);
  EXPECT_EQ(stats.binaries_loaded, 1u);
  EXPECT_EQ(dispatcher->describe(shape(d)).choice.reason, ChoiceReason::hit);
  ValidationStats validation = workload.compare(0);
  EXPECT_EQ(validation.nonfinite, 0u);
  EXPECT_LE(validation.relative_l2, space_->tolerance().relative_l2);

  auto us = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  RecordProperty("open_us", static_cast<int>(us(t0, t1)));
  RecordProperty("first_dispatch_host_us", static_cast<int>(us(t1, t2)));
  RecordProperty("second_dispatch_host_us", static_cast<int>(us(t3, t4)));
  RecordProperty("compiles", static_cast<int>(stats.compiles));
  std::printf("first use of a stored shape in a new process (%s), host time:\n"
              "  Dispatcher::open          %10.1f us  (GPU probe, space, database, index)\n"
              "  first dispatch            %10.1f us  (choice, cubin from the database, load, launch; "
              "%llu NVRTC compiles)\n"
              "  first kernel completed    %10.1f us  after the first dispatch began\n"
              "  second dispatch (a hit)   %10.1f us\n",
              space_->shape_string(shape(d)).c_str(), us(t0, t1), us(t1, t2),
              static_cast<unsigned long long>(stats.compiles), us(t1, t3), us(t3, t4));
  std::fflush(stdout);
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

// ---- stand-ins: an untuned shape never waits for NVRTC --------------------------

// Issue 13's first shape, untuned (R odd), in an empty database: the choice is
// the space's first fallback, whose binary nobody compiled; the default
// config's binary for the same compiled H, D, R is stored (as a warm-up or an
// earlier process would leave it), so it stands in.
class GpuStandInTest : public GpuDispatchTest {
 protected:
  const Dims x{4, 300, 16, 64, 131};

  void SetUp() override {
    GpuDispatchTest::SetUp();
    if (IsSkipped()) return;
    db_ = dir_ / "stand_in.db";
    Store::open(db_);
    // These tests count compiles and switches of the stand-in rule alone; the
    // C ABI's dispatchers read racing from the environment.
    setenv("MLATUNE_RACE", "0", 1);
  }
  void TearDown() override {
    unsetenv("MLATUNE_RACE");
    GpuDispatchTest::TearDown();
  }

  // Stores the binary of `config` at `d`'s compiled shape, labelled as
  // `dispatcher`'s index would.
  void store_binary(const Dispatcher& dispatcher, const Config& config, const Dims& d) {
    CompileResult compiled = Compiler().compile(compile_request(*space_, config, shape(d), device_.arch));
    ASSERT_TRUE(compiled.ok()) << compiled.failure().message;
    Store::open(db_).put_binary(dispatcher.index().binary_record(compiled.binary()));
  }

  // Launches at `d` on fresh inputs (seed) and returns the relative L2 error;
  // *host_ms is the host time of the launch call.
  // Fresh random inputs of seed `seed` at `d` (one validation set), outputs
  // poisoned with NaN and the poisoning done.
  std::unique_ptr<Workload> poisoned_workload(const Dims& d, std::uint64_t seed) {
    WorkloadOptions options;
    options.seed = seed;
    options.validation_sets = 1;
    auto workload = std::make_unique<Workload>(*space_, shape(d), options);
    workload->poison_outputs();
    workload->stream().synchronize();
    return workload;
  }

  double launch_and_validate(Dispatcher& dispatcher, const Dims& d, std::uint64_t seed, double* host_ms) {
    std::unique_ptr<Workload> poisoned = poisoned_workload(d, seed);
    Workload& workload = *poisoned;
    const auto t0 = std::chrono::steady_clock::now();
    dispatcher.launch(shape(d), workload.arguments(0), workload.stream().get());
    const auto t1 = std::chrono::steady_clock::now();
    if (host_ms) *host_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    ValidationStats stats = workload.compare(0);
    EXPECT_EQ(stats.nonfinite, 0u);
    return stats.relative_l2;
  }

  // Sets `name` to `value` and checks that open refuses it with an
  // InputError that quotes both.
  void expect_open_refuses(const DispatcherOptions& options, const char* name, const char* value) {
    ASSERT_EQ(setenv(name, value, 1), 0);
    const std::string quoted = std::string(name) + "='" + value + "'";
    try {
      Dispatcher::open(db_, space_file, options);
      ADD_FAILURE() << quoted << " opened";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(quoted), std::string::npos) << e.what();
    }
  }

  fs::path db_;
};

/// Unsets an environment variable however the scope is left (an ASSERT
/// returns): later tests open dispatchers too.
struct UnsetOnExit {
  const char* name;
  ~UnsetOnExit() { unsetenv(name); }
};

TEST_F(GpuStandInTest, AnUntunedShapeRunsAStoredStandInWhileItsChoiceCompiles) {
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db_, space_file, without_races());
  const Choice choice = dispatcher->describe(shape(x)).choice;
  ASSERT_EQ(choice.reason, ChoiceReason::fallback) << choice.explanation;
  ASSERT_NE(choice.config, space_->default_config());
  store_binary(*dispatcher, space_->default_config(), x);

  double first_ms = 0, after_ms = 0;
  const double before = launch_and_validate(*dispatcher, x, 31, &first_ms);
  DispatcherStats stats = dispatcher->stats();
  DispatchDescription running = dispatcher->describe(shape(x));
  EXPECT_EQ(stats.blocking_compiles, 0u) << "the caller's thread compiled";
  EXPECT_EQ(stats.stand_in_shapes, 1u);
  ASSERT_TRUE(running.stand_in) << running.text;
  EXPECT_EQ(running.stand_in->config, space_->default_config());
  EXPECT_EQ(running.choice.config, choice.config);
  EXPECT_NE(running.text.find("running stand-in default"), std::string::npos) << running.text;
  EXPECT_LE(before, space_->tolerance().relative_l2) << "stand-in";

  dispatcher->wait_compiles();
  stats = dispatcher->stats();
  DispatchDescription switched = dispatcher->describe(shape(x));
  EXPECT_FALSE(switched.stand_in) << switched.text;
  EXPECT_EQ(stats.background_compiles, 1u) << stats.last_background_error;
  EXPECT_EQ(stats.background_failures, 0u) << stats.last_background_error;
  EXPECT_EQ(stats.switches, 1u);
  EXPECT_EQ(stats.binaries_stored, 1u) << "the compiled choice is kept for the next process";
  const double after = launch_and_validate(*dispatcher, x, 32, &after_ms);
  EXPECT_LE(after, space_->tolerance().relative_l2) << "the choice, after the switch";
  EXPECT_EQ(dispatcher->stats().blocking_compiles, 0u);

  std::printf("untuned %s: first launch %.3f ms host on stand-in %s (rel-L2 %.3g); after the background "
              "compile of %s: %.3f ms host (rel-L2 %.3g)\n",
              space_->shape_string(shape(x)).c_str(), first_ms, running.stand_in->config_text.c_str(), before,
              choice.config_text.c_str(), after_ms, after);
  RecordProperty("first_launch_host_us", static_cast<int>(first_ms * 1000));
  // NVRTC takes 0.1-2 s for this template: a first launch far below that did not compile.
  EXPECT_LT(first_ms, 100.0);

  // Through the C ABI, a new dispatcher finds the compiled choice stored:
  // another shape with the same choice (the space's fallbacks depend on T:
  // stay above 256) and the same compiled values runs it at once.
  mlatune_dispatcher* handle = nullptr;
  ASSERT_EQ(mlatune_open(db_.c_str(), space_file.c_str(), &handle), MLATUNE_OK) << mlatune_last_error(nullptr);
  const Dims y{2, 777, 16, 64, 131};
  unsigned long long phases_before[MLATUNE_PHASE_COUNT], after_first[MLATUNE_PHASE_COUNT], after_second[MLATUNE_PHASE_COUNT];
  ASSERT_EQ(mlatune_first_use_ns(handle, phases_before), MLATUNE_OK) << mlatune_last_error(handle);
  double y_error = dispatch_and_validate(handle, y, 33);
  EXPECT_LE(y_error, space_->tolerance().relative_l2);
  ASSERT_EQ(mlatune_first_use_ns(handle, after_first), MLATUNE_OK);
  // The first use read a stored cubin, loaded it and launched; a second call
  // at the same shape is no first use and adds to no phase.
  EXPECT_GT(after_first[MLATUNE_PHASE_STORE_READ], phases_before[MLATUNE_PHASE_STORE_READ]);
  EXPECT_GT(after_first[MLATUNE_PHASE_LOAD], phases_before[MLATUNE_PHASE_LOAD]);
  EXPECT_GT(after_first[MLATUNE_PHASE_FIRST_LAUNCH], phases_before[MLATUNE_PHASE_FIRST_LAUNCH]);
  EXPECT_LE(after_first[MLATUNE_PHASE_WORKSPACE], after_first[MLATUNE_PHASE_FIRST_LAUNCH]);
  dispatch_and_validate(handle, y, 34);
  ASSERT_EQ(mlatune_first_use_ns(handle, after_second), MLATUNE_OK);
  for (int phase = 0; phase < MLATUNE_PHASE_COUNT; ++phase) EXPECT_EQ(after_second[phase], after_first[phase]) << phase;
  const std::int64_t values[5] = {y.B, y.T, y.H, y.D, y.R};
  int stand_in = -1;
  ASSERT_EQ(mlatune_runs_stand_in(handle, values, 5, &stand_in), MLATUNE_OK) << mlatune_last_error(handle);
  EXPECT_EQ(stand_in, 0);
  ASSERT_EQ(mlatune_wait_compiles(handle), MLATUNE_OK);
  unsigned long long compiles = 99;
  mlatune_compile_count(handle, &compiles);
  EXPECT_EQ(compiles, 0u);
  mlatune_close(handle);
}

TEST_F(GpuStandInTest, BlockingModeCompilesTheChoiceOnTheCallersThread) {
  DispatcherOptions blocking = without_races();
  blocking.compile = CompileMode::blocking;
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db_, space_file, blocking);
  store_binary(*dispatcher, space_->default_config(), x);
  double host_ms = 0;
  EXPECT_LE(launch_and_validate(*dispatcher, x, 41, &host_ms), space_->tolerance().relative_l2);
  DispatcherStats stats = dispatcher->stats();
  EXPECT_EQ(stats.blocking_compiles, 1u);
  EXPECT_EQ(stats.stand_in_shapes, 0u);
  EXPECT_FALSE(dispatcher->describe(shape(x)).stand_in);
  std::printf("blocking mode, %s: first launch %.1f ms host (NVRTC on the caller's thread)\n",
              space_->shape_string(shape(x)).c_str(), host_ms);
}

TEST_F(GpuStandInTest, WithNothingReadyTheCallerCompilesOnce) {
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db_, space_file, without_races());
  EXPECT_LE(launch_and_validate(*dispatcher, x, 51, nullptr), space_->tolerance().relative_l2);
  dispatcher->wait_compiles();
  DispatcherStats stats = dispatcher->stats();
  EXPECT_EQ(stats.blocking_compiles, 1u);
  EXPECT_EQ(stats.background_compiles, 0u);
  EXPECT_EQ(stats.stand_in_shapes, 0u);
  // A second shape with the same choice (T above 256, as x) and the same
  // compiled values shares the binary.
  EXPECT_LE(launch_and_validate(*dispatcher, Dims{1, 450, 16, 64, 131}, 52, nullptr), space_->tolerance().relative_l2);
  EXPECT_EQ(dispatcher->stats().compiles, 1u);
}

// Nonblocking mode with nothing ready: the first launch throws NotReadyError
// at once and launches nothing (the poisoned output stays NaN), later
// launches keep throwing it until the background compile is done, then the
// shape runs its choice with no NVRTC on the caller's thread.
TEST_F(GpuStandInTest, NonblockingModeSaysNotReadyAndLaunchesNothingUntilTheChoiceIsCompiled) {
  DispatcherOptions options = without_races();
  options.compile = CompileMode::nonblocking;
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db_, space_file, options);
  std::unique_ptr<Workload> poisoned = poisoned_workload(x, 61);
  Workload& workload = *poisoned;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(dispatcher->launch(shape(x), workload.arguments(0), workload.stream().get()), NotReadyError);
  const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_THROW(dispatcher->launch(shape(x), workload.arguments(0), workload.stream().get()), NotReadyError);
  const ValidationStats untouched = workload.compare(0);
  EXPECT_EQ(untouched.nonfinite, untouched.elements) << "a launch that said not ready wrote the output";
  EXPECT_TRUE(dispatcher->describe(shape(x)).not_ready || dispatcher->stats().background_compiles == 1u);
  dispatcher->wait_compiles();
  EXPECT_FALSE(dispatcher->describe(shape(x)).not_ready);
  EXPECT_LE(launch_and_validate(*dispatcher, x, 62, nullptr), space_->tolerance().relative_l2);
  const DispatcherStats stats = dispatcher->stats();
  EXPECT_EQ(stats.blocking_compiles, 0u) << "the caller's thread compiled";
  EXPECT_EQ(stats.background_compiles, 1u);
  EXPECT_EQ(stats.not_ready_shapes, 1u);
  EXPECT_EQ(stats.not_ready_launches, 2u);
  EXPECT_EQ(stats.stand_in_shapes, 0u);
  // NVRTC takes 0.1-2 s for this kernel; the not-ready answer took the choice and the ranking only.
  EXPECT_LT(host_ms, 50.0);
  std::printf("nonblocking mode, %s: not-ready answer in %.3f ms host\n", space_->shape_string(shape(x)).c_str(),
              host_ms);
}

// The same through the C ABI with races on (the default): MLATUNE_NOT_READY,
// then, once the race's candidates are ready, right results.
TEST_F(GpuStandInTest, TheCAbiSaysNotReadyInNonblockingModeAndRacesOnceReady) {
  mlatune_dispatcher* handle = nullptr;
  ASSERT_EQ(mlatune_open(db_.c_str(), space_file.c_str(), &handle), MLATUNE_OK) << mlatune_last_error(nullptr);
  EXPECT_EQ(mlatune_set_compile_mode(handle, 7), MLATUNE_INVALID_ARGUMENT);
  ASSERT_EQ(mlatune_set_compile_mode(handle, MLATUNE_COMPILE_NONBLOCKING), MLATUNE_OK);
  std::unique_ptr<Workload> poisoned = poisoned_workload(x, 63);
  Workload& workload = *poisoned;
  void** args = workload.arguments(0);
  auto ptr = [&](int i) { return *static_cast<float**>(args[i]); };
  auto call = [&] {
    return mlatune_fused_mla_attention(handle, ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), x.B, x.T, x.H, x.D, x.R,
                                       workload.stream().get());
  };
  ASSERT_EQ(call(), MLATUNE_NOT_READY) << mlatune_last_error(handle);
  EXPECT_NE(std::string(mlatune_last_error(handle)).find("not ready"), std::string::npos) << mlatune_last_error(handle);
  const ValidationStats untouched = workload.compare(0);
  EXPECT_EQ(untouched.nonfinite, untouched.elements);
  ASSERT_EQ(mlatune_wait_compiles(handle), MLATUNE_OK);
  for (int i = 0; i < 20; ++i) {  // through the race and past it
    workload.poison_outputs();
    ASSERT_EQ(call(), MLATUNE_OK) << mlatune_last_error(handle);
    const ValidationStats ran = workload.compare(0);
    EXPECT_EQ(ran.nonfinite, 0u) << "launch " << i;
    EXPECT_LE(ran.relative_l2, space_->tolerance().relative_l2) << "launch " << i;
  }
  mlatune_close(handle);
}

TEST_F(GpuStandInTest, UntunedShapesAreCountedInTheBackgroundAndNoneIsLostAtClose) {
  // Three first uses at untuned shapes (compiled on the caller's thread), then the
  // dispatcher destroyed at once: whether its background thread wrote them
  // or its destructor did, each is counted once.
  const Dims untuned[] = {x, Dims{1, 450, 16, 64, 131}, Dims{2, 333, 16, 64, 131}};
  DispatcherOptions blocking = without_races();
  blocking.compile = CompileMode::blocking;
  {
    std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db_, space_file, blocking);
    for (std::size_t i = 0; i < std::size(untuned); ++i)
      EXPECT_LE(launch_and_validate(*dispatcher, untuned[i], 71 + i, nullptr), space_->tolerance().relative_l2);
  }
  auto counts = [&] {
    std::map<std::string, std::int64_t> by_shape;
    for (const auto& miss : Store::open(db_, StoreMode::read_only).misses()) by_shape[miss.shape] = miss.count;
    return by_shape;
  };
  std::map<std::string, std::int64_t> after_close = counts();
  ASSERT_EQ(after_close.size(), std::size(untuned));
  for (const Dims& d : untuned) EXPECT_EQ(after_close[space_->shape_string(shape(d))], 1) << space_->shape_string(shape(d));
  // wait_compiles() waits for the count too.
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db_, space_file, blocking);
  EXPECT_LE(launch_and_validate(*dispatcher, x, 75, nullptr), space_->tolerance().relative_l2);
  dispatcher->wait_compiles();
  EXPECT_EQ(dispatcher->stats().misses_recorded, 1u);
  EXPECT_EQ(counts()[space_->shape_string(shape(x))], 2);
}
TEST_F(GpuStandInTest, AShapesFirstLaunchRaisesWhatTheWorkspacePoolKeeps) {
  // An empty database: x runs the space's first fallback, whose prologue
  // materializes K and V (MBs at x) in a workspace larger than the 1 MiB
  // the pool is opened to keep.  Its first launch raises what is kept to
  // that size; a dispatcher that keeps nothing stays so.
  DispatcherOptions options = without_races();
  options.compile = CompileMode::blocking;
  options.workspace_keep_bytes = std::uint64_t{1} << 20;
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db_, space_file, options);
  EXPECT_EQ(dispatcher->stats().workspace_kept_bytes, options.workspace_keep_bytes);
  EXPECT_LE(launch_and_validate(*dispatcher, x, 81, nullptr), space_->tolerance().relative_l2);
  const LaunchPlan plan = plan_launch(*space_, dispatcher->describe(shape(x)).choice.config, shape(x));
  ASSERT_TRUE(plan.steps.prologue) << "the fallback at x should run a prologue";
  std::uint64_t needed = 0;
  for (std::int64_t bytes : plan.steps.workspace_bytes) needed += static_cast<std::uint64_t>(bytes);
  ASSERT_GT(needed, options.workspace_keep_bytes);
  EXPECT_EQ(dispatcher->stats().workspace_kept_bytes, needed);
  EXPECT_LE(launch_and_validate(*dispatcher, x, 82, nullptr), space_->tolerance().relative_l2);
  EXPECT_EQ(dispatcher->stats().workspace_kept_bytes, needed) << "a later launch changes nothing";
  dispatcher.reset();
  options.workspace_keep_bytes = 0;
  std::unique_ptr<Dispatcher> keeps_nothing = Dispatcher::open(db_, space_file, options);
  EXPECT_LE(launch_and_validate(*keeps_nothing, x, 83, nullptr), space_->tolerance().relative_l2);
  EXPECT_EQ(keeps_nothing->stats().workspace_kept_bytes, 0u);
}

TEST_F(GpuStandInTest, AWorkspaceReservedAtOpenIsMappedBeforeAnyLaunch) {
  // x's fallback materializes MBs of K and V; a reserve of 64 MiB is mapped
  // by open, so x's first launch maps nothing more.  Without the reserve
  // open maps less and the first launch maps the workspace (the control
  // that shows the count moves).  MLATUNE_WORKSPACE_RESERVE replaces the
  // option; a value that is no byte count fails open and names it.
  DispatcherOptions options = without_races();
  options.compile = CompileMode::blocking;
  const std::uint64_t reserve = std::uint64_t{64} << 20;
  std::uint64_t needed = 0;
  {
    std::unique_ptr<Dispatcher> plain = Dispatcher::open(db_, space_file, options);
    const std::uint64_t at_open = plain->stats().workspace_mapped_bytes;
    EXPECT_LT(at_open, reserve);
    EXPECT_LE(launch_and_validate(*plain, x, 91, nullptr), space_->tolerance().relative_l2);
    const LaunchPlan plan = plan_launch(*space_, plain->describe(shape(x)).choice.config, shape(x));
    ASSERT_TRUE(plan.steps.prologue) << "the fallback at x should run a prologue";
    for (std::int64_t bytes : plan.steps.workspace_bytes) needed += static_cast<std::uint64_t>(bytes);
    ASSERT_LT(needed, reserve);
    EXPECT_GE(plain->stats().workspace_mapped_bytes, needed) << "the first launch maps its workspace";
  }
  options.workspace_reserve_bytes = reserve;
  {
    std::unique_ptr<Dispatcher> reserved = Dispatcher::open(db_, space_file, options);
    const DispatcherStats at_open = reserved->stats();
    EXPECT_GE(at_open.workspace_mapped_bytes, reserve);
    EXPECT_GE(at_open.workspace_kept_bytes, reserve);
    EXPECT_LE(launch_and_validate(*reserved, x, 92, nullptr), space_->tolerance().relative_l2);
    EXPECT_EQ(reserved->stats().workspace_mapped_bytes, at_open.workspace_mapped_bytes)
        << "a launch inside the reserve maps nothing";
  }
  options.workspace_reserve_bytes = 0;
  const UnsetOnExit unset{"MLATUNE_WORKSPACE_RESERVE"};
  ASSERT_EQ(setenv("MLATUNE_WORKSPACE_RESERVE", "96M", 1), 0);
  std::unique_ptr<Dispatcher> from_environment = Dispatcher::open(db_, space_file, options);
  EXPECT_GE(from_environment->stats().workspace_mapped_bytes, std::uint64_t{96} << 20);
  from_environment.reset();
  expect_open_refuses(options, "MLATUNE_WORKSPACE_RESERVE", "96MB");
}

TEST_F(GpuStandInTest, APreloadLoadsStoredBinariesSoAFirstUseReadsNone) {
  // Two binaries stored for this device and NVRTC (x's choice and the
  // default at x) and one labelled with another NVRTC: the preload loads the
  // two on its own thread, so that x's first use reads and loads nothing.
  // The control without the preload reads x's binary from the store.
  DispatcherOptions options = without_races();
  options.compile = CompileMode::blocking;  // a binary it failed to find would compile, and count
  Choice choice;
  {
    std::unique_ptr<Dispatcher> labeller = Dispatcher::open(db_, space_file, options);
    choice = labeller->describe(shape(x)).choice;
    ASSERT_TRUE(choice.ok()) << choice.explanation;
    store_binary(*labeller, choice.config, x);
    store_binary(*labeller, space_->default_config(), x);
    CompileResult other = Compiler().compile(compile_request(*space_, space_->default_config(), shape(Dims{1, 8, 4, 32, 64}), device_.arch));
    ASSERT_TRUE(other.ok()) << other.failure().message;
    BinaryRecord foreign = labeller->index().binary_record(other.binary());
    foreign.nvrtc_version = "9.9";
    Store::open(db_).put_binary(foreign);
  }
  {
    options.preload_stored = true;
    std::unique_ptr<Dispatcher> preloaded = Dispatcher::open(db_, space_file, options);
    preloaded->wait_compiles();
    const DispatcherStats at_open = preloaded->stats();
    EXPECT_EQ(at_open.binaries_preloaded, 2u);
    EXPECT_EQ(at_open.preload_failures, 0u);
    EXPECT_EQ(at_open.binaries_loaded, 2u);
    EXPECT_LE(launch_and_validate(*preloaded, x, 101, nullptr), space_->tolerance().relative_l2);
    const DispatcherStats after = preloaded->stats();
    EXPECT_EQ(after.binaries_from_store, 0u);
    EXPECT_EQ(after.store_read_ns, 0u);
    EXPECT_EQ(after.load_ns, 0u);
    EXPECT_EQ(after.compiles, 0u);
    EXPECT_EQ(after.binaries_loaded, 2u);
    EXPECT_EQ(preloaded->describe(shape(x)).choice.config_text, choice.config_text);
  }
  {
    options.preload_stored = false;
    std::unique_ptr<Dispatcher> plain = Dispatcher::open(db_, space_file, options);
    EXPECT_LE(launch_and_validate(*plain, x, 102, nullptr), space_->tolerance().relative_l2);
    plain->wait_compiles();
    const DispatcherStats stats = plain->stats();
    EXPECT_EQ(stats.binaries_preloaded, 0u);
    EXPECT_EQ(stats.binaries_from_store, 1u);
    EXPECT_GT(stats.store_read_ns, 0u);
    EXPECT_EQ(stats.compiles, 0u);
  }
  // Closed at once, while the preload may still run: it stops between binaries.
  options.preload_stored = true;
  Dispatcher::open(db_, space_file, options).reset();
  options.preload_stored = false;
  const UnsetOnExit unset{"MLATUNE_PRELOAD"};
  ASSERT_EQ(setenv("MLATUNE_PRELOAD", "1", 1), 0);
  {
    std::unique_ptr<Dispatcher> from_environment = Dispatcher::open(db_, space_file, options);
    from_environment->wait_compiles();
    EXPECT_EQ(from_environment->stats().binaries_preloaded, 2u);
  }
  expect_open_refuses(options, "MLATUNE_PRELOAD", "yes");
}

// ---- races: an untuned shape times its candidates and keeps the fastest ---------

// Three tuned shapes around an untuned one, each with another config: the
// race at the untuned shape readies up to four candidates in the background,
// times each three times over the next launches (every output checked), and
// settles on the lowest median.  A launch while the stream captures a graph
// is not timed and the graph runs right.
TEST_F(GpuDispatchTest, AnUntunedShapeRacesItsCandidatesAndSettlesOnTheFastest) {
  const fs::path db = dir_ / "race.db";
  const Dims x{2, 300, 8, 64, 128};
  std::mt19937_64 rng(17);
  std::set<std::string> tuned_configs;
  for (const Dims& near : {Dims{2, 256, 8, 64, 128}, Dims{2, 384, 8, 64, 128}, Dims{1, 300, 8, 64, 128}}) {
    for (int attempt = 0; attempt < 20; ++attempt) {
      std::optional<Config> c = space_->sample(shape(x), rng);  // valid at x, so no repair is needed
      if (!c || !space_->check(*c, shape(near)) || tuned_configs.count(space_->config_string(*c))) continue;
      tune(db, shape(near), *c);
      tuned_configs.insert(space_->config_string(*c));
      break;
    }
  }
  ASSERT_GE(tuned_configs.size(), 2u);
  DispatcherOptions race_options;
  race_options.race = RaceOptions{};  // four candidates, three times each
  race_options.race_from_environment = false;
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db, space_file, race_options);
  Workload workload(*space_, shape(x), checked_inputs(61));
  auto launch_checked = [&](const char* what) { this->launch_checked(*dispatcher, workload, x, what); };
  launch_checked("first launch");
  dispatcher->wait_compiles();
  DispatchDescription racing = dispatcher->describe(shape(x));
  ASSERT_TRUE(racing.race) << racing.text;
  EXPECT_FALSE(racing.race->settled);
  const std::size_t runners = racing.race->runners.size();
  EXPECT_GE(runners, 2u) << racing.text;
  EXPECT_LE(runners, 4u + race_options.race.filling);
  for (std::size_t i = 0; i < runners; ++i)
    if (racing.race->runners[i].choice.reason == ChoiceReason::filled) {
      EXPECT_EQ(racing.race->runners[i].choice.changes.size(), 1u);
    } else {
      EXPECT_LT(i, 4u) << "the selector's candidates race first";
    }
  EXPECT_EQ(racing.race->runners.front().choice.config, racing.choice.config) << "the choice races first";
  EXPECT_NE(racing.text.find("racing"), std::string::npos) << racing.text;

  // A launch captured into a graph is not timed; the graph computes right.
  {
    const std::uint64_t timed_before = dispatcher->stats().race_launches;
    cudaStream_t capture = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&capture, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    workload.poison_outputs();
    workload.stream().synchronize();
    ASSERT_EQ(cudaStreamBeginCapture(capture, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    dispatcher->launch(shape(x), workload.arguments(0), capture);
    ASSERT_EQ(cudaStreamEndCapture(capture, &graph), cudaSuccess);
    EXPECT_EQ(dispatcher->stats().race_launches, timed_before) << "a captured launch was timed";
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, capture), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(capture), cudaSuccess);
    ValidationStats stats = workload.compare(0);
    EXPECT_EQ(stats.nonfinite, 0u);
    EXPECT_LE(stats.relative_l2, space_->tolerance().relative_l2) << "graph";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(capture);
  }

  const int launches = launch_until_settled(*dispatcher, workload, x);
  const DispatchDescription settled = dispatcher->describe(shape(x));
  ASSERT_TRUE(settled.race && settled.race->settled) << settled.text;
  // Each launch was synchronized, so no time was pending: one extra launch
  // reads the last time and settles.
  EXPECT_EQ(launches, static_cast<int>(runners * settled.race->samples) + 1) << settled.text;
  const DispatcherStats stats = dispatcher->stats();
  EXPECT_EQ(stats.races, 1u);
  EXPECT_EQ(stats.races_settled, 1u);
  EXPECT_EQ(stats.race_launches, runners * settled.race->samples);
  double fastest = 1e300;
  for (const RaceReport::Runner& r : settled.race->runners) {
    EXPECT_EQ(r.times_us.size(), settled.race->samples);
    for (double t : r.times_us) EXPECT_GT(t, 0.0);
    fastest = std::min(fastest, r.median_us);
  }
  EXPECT_DOUBLE_EQ(settled.race->runners[settled.race->leader].median_us, fastest);
  EXPECT_NE(settled.text.find("race settled"), std::string::npos) << settled.text;
  // From now on a plain hit of the winner: no more timing.
  launch_checked("after the race");
  EXPECT_EQ(dispatcher->stats().race_launches, stats.race_launches);
  std::printf("%s\n", settled.text.c_str());

  // Through the C ABI, the state of the race.
  mlatune_dispatcher* handle = nullptr;
  ASSERT_EQ(mlatune_open(db.c_str(), space_file.c_str(), &handle), MLATUNE_OK) << mlatune_last_error(nullptr);
  const std::int64_t values[5] = {x.B, x.T, x.H, x.D, x.R};
  int state = -1;
  ASSERT_EQ(mlatune_race_state(handle, values, 5, &state), MLATUNE_OK);
  EXPECT_EQ(state, MLATUNE_NO_RACE) << "not launched yet in this dispatcher";
  mlatune_close(handle);
  // Racing is on by default; MLATUNE_RACE=0 turns it off.
  {
    std::unique_ptr<Dispatcher> fresh = Dispatcher::open(db, space_file);
    fresh->launch(shape(x), workload.arguments(0), workload.stream().get());
    fresh->wait_compiles();
    EXPECT_TRUE(fresh->describe(shape(x)).race) << fresh->describe(shape(x)).text;
  }
  setenv("MLATUNE_RACE", "0", 1);
  std::unique_ptr<Dispatcher> plain = Dispatcher::open(db, space_file);
  unsetenv("MLATUNE_RACE");
  plain->launch(shape(x), workload.arguments(0), workload.stream().get());
  plain->wait_compiles();
  EXPECT_FALSE(plain->describe(shape(x)).race) << plain->describe(shape(x)).text;
  // MLATUNE_RACE=N sets the number of candidates, through the C ABI too.
  setenv("MLATUNE_RACE", "3", 1);
  ASSERT_EQ(mlatune_open(db.c_str(), space_file.c_str(), &handle), MLATUNE_OK) << mlatune_last_error(nullptr);
  unsetenv("MLATUNE_RACE");
  EXPECT_LE(dispatch_and_validate(handle, x, 62), space_->tolerance().relative_l2);
  ASSERT_EQ(mlatune_wait_compiles(handle), MLATUNE_OK);
  ASSERT_EQ(mlatune_race_state(handle, values, 5, &state), MLATUNE_OK);
  EXPECT_EQ(state, MLATUNE_RACING);
  mlatune_close(handle);
}

// A config tuned at a long sequence, dispatched at a short one: its 64-query
// tiles give 32 blocks at 1,200,8 on a GPU of far more SMs, so the race also
// times the same config with 16- and 32-query tiles (104 and 56 blocks), and
// every raced output is right.
TEST_F(GpuDispatchTest, AChoiceThatLeavesSmsIdleRacesConfigsThatLaunchMoreBlocks) {
  const fs::path db = dir_ / "fill.db";
  const Config tuned = space_->parse_config(
      "ALGORITHM=tf32x3_kvgemm,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=64,HEADS_PER_BLOCK=1,STAGE_LATENT=true,"
      "KEY_TILE=32,FLOAT4=false,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1");
  tune(db, shape(Dims{1, 2048, 8, 64, 128}), tuned);
  const Dims x{1, 200, 8, 64, 128};
  if (device_.sm_count <= 32) GTEST_SKIP() << "32 blocks fill this GPU's " << device_.sm_count << " SMs";
  DispatcherOptions race_options;
  race_options.race_from_environment = false;
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db, space_file, race_options);
  Workload workload(*space_, shape(x), checked_inputs(67));
  auto launch_checked = [&](const char* what) { this->launch_checked(*dispatcher, workload, x, what); };
  launch_checked("first launch");
  dispatcher->wait_compiles();
  const DispatchDescription racing = dispatcher->describe(shape(x));
  ASSERT_TRUE(racing.race) << racing.text;
  ASSERT_EQ(racing.race->runners.front().choice.config, tuned) << racing.text;
  std::vector<std::string> filled;
  const std::size_t qpb = parameter_index(*space_, "QUERIES_PER_BLOCK");
  for (const RaceReport::Runner& r : racing.race->runners) {
    if (r.choice.reason != ChoiceReason::filled) continue;
    ASSERT_EQ(r.choice.changes.size(), 1u) << r.choice.explanation;
    EXPECT_EQ(r.choice.changes[0].parameter, qpb) << r.choice.explanation;
    filled.push_back(space_->parameters()[qpb].text[r.choice.config.choice[qpb]]);
  }
  EXPECT_EQ(filled, (std::vector<std::string>{"16", "32"})) << racing.text;
  launch_until_settled(*dispatcher, workload, x);
  const DispatchDescription settled = dispatcher->describe(shape(x));
  ASSERT_TRUE(settled.race && settled.race->settled) << settled.text;
  for (const RaceReport::Runner& r : settled.race->runners) EXPECT_EQ(r.times_us.size(), settled.race->samples);
  std::printf("%s\n", settled.text.c_str());
}

}  // namespace
}  // namespace mlatune
