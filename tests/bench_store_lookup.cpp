// Looking up the best config for a shape in a store that holds 100,000
// measurements (1,000 shapes x 100 configs, one kernel, device and toolchain),
// loaded through Store::record, one commit each, as a sweep writes them.
// BM_ReadBinary: reading back one real cubin (a flagship tensor-core config
// at S2, compiled by NVRTC for sm_90a at setup), as a first call reads its
// stand-in's: packed as the store packs it (zstd) and as databases written
// before it hold it (zlib).
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cache/store.h"
#include "core/compiler.h"
#include "core/space.h"
#include "tests/stored_blobs.h"

namespace {

namespace fs = std::filesystem;
using namespace mlatune;

constexpr int shape_count = 1000;
constexpr int configs_per_shape = 100;

const KernelInfo kernel{"mla", "template-hash", "definition-hash"};
const DeviceInfo device{"NVIDIA H200", "sm_90", 132, 150'000'000'000, "580.65"};
const ToolchainInfo toolchain{"13.0", "0.1.0"};

std::string shape_name(int i) {
  return "B=" + std::to_string(1 + i % 4) + ",T=" + std::to_string(32 * (1 + i / 4)) + ",H=8,D=64,R=128";
}

Measurement measurement(std::int64_t run, int shape, int config, std::mt19937_64& rng) {
  Measurement m;
  m.run_id = run;
  m.shape = shape_name(shape);
  m.config = "ALGORITHM=absorbed,BLOCK=" + std::to_string(config);
  if (config % 10 == 9) {
    m.outcome = Outcome::launch_error;
    m.message = "too many resources requested for launch";
    return m;
  }
  double median = std::uniform_real_distribution<double>(5.0, 500.0)(rng);
  m.outcome = Outcome::ok;
  m.timing = Timing{median, median * 0.97, median * 1.05, 200, 0.08, "cuda events, L2 flushed"};
  m.error = ErrorFigures{2e-7, 3e-6};
  m.resources = ResourceUsage{.registers = 72, .shared_bytes = 16384};
  return m;
}

/// A folder for this process's databases, removed at exit.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("mlatune_bench_store_" + std::to_string(getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

fs::path temp_dir() {
  static TempDir dir;
  return dir.path;
}

/// The loaded database, built once per process.
struct Loaded {
  fs::path path;
  double load_seconds = 0;
  Loaded() {
    path = temp_dir() / "lookup.db";
    fs::remove(path);
    Store store = Store::open(path);
    auto k = store.ensure_kernel(kernel);
    auto d = store.ensure_device(device);
    auto t = store.ensure_toolchain(toolchain);
    auto run = store.begin_run({k, d, t, "mla.yaml", "kernel: mla\n", "brute_force", "{}"});
    std::mt19937_64 rng(42);
    auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < configs_per_shape; ++c) {
      for (int s = 0; s < shape_count; ++s) store.record(measurement(run, s, c, rng));
    }
    load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "loaded %d measurements in %.2f s (%.1f us per committed measurement)\n",
                 shape_count * configs_per_shape, load_seconds,
                 load_seconds * 1e6 / (shape_count * configs_per_shape));
  }
};

Loaded& loaded() {
  static Loaded instance;
  return instance;
}

void BM_BestByIds(benchmark::State& state) {
  Store store = Store::open(loaded().path, StoreMode::read_only);
  auto k = *store.find_kernel(kernel);
  auto d = *store.find_device(device);
  auto t = *store.find_toolchain(toolchain);
  std::vector<std::string> shapes;
  for (int i = 0; i < shape_count; ++i) shapes.push_back(shape_name(i));
  std::size_t i = 0;
  for (auto _ : state) {
    auto best = store.best(k, d, t, shapes[i++ % shapes.size()]);
    benchmark::DoNotOptimize(best);
    if (!best) state.SkipWithError("a loaded shape has no best entry");
  }
  state.counters["measurements"] = static_cast<double>(store.measurement_count());
}
BENCHMARK(BM_BestByIds);

void BM_BestByIdentity(benchmark::State& state) {
  Store store = Store::open(loaded().path, StoreMode::read_only);
  std::vector<std::string> shapes;
  for (int i = 0; i < shape_count; ++i) shapes.push_back(shape_name(i));
  std::size_t i = 0;
  for (auto _ : state) {
    auto best = store.best(kernel, device, toolchain, shapes[i++ % shapes.size()]);
    benchmark::DoNotOptimize(best);
    if (!best) state.SkipWithError("a loaded shape has no best entry");
  }
}
BENCHMARK(BM_BestByIdentity);

void BM_BestMiss(benchmark::State& state) {
  Store store = Store::open(loaded().path, StoreMode::read_only);
  auto k = *store.find_kernel(kernel);
  auto d = *store.find_device(device);
  auto t = *store.find_toolchain(toolchain);
  for (auto _ : state) {
    auto best = store.best(k, d, t, "B=3,T=7,H=8,D=64,R=128");
    benchmark::DoNotOptimize(best);
  }
}
BENCHMARK(BM_BestMiss);

void BM_AllBest(benchmark::State& state) {
  Store store = Store::open(loaded().path, StoreMode::read_only);
  for (auto _ : state) {
    auto all = store.all_best();
    benchmark::DoNotOptimize(all);
    if (all.size() != shape_count) state.SkipWithError("wrong number of best entries");
  }
  state.counters["entries"] = shape_count;
}
BENCHMARK(BM_AllBest)->Unit(benchmark::kMicrosecond);

void BM_OpenReadOnly(benchmark::State& state) {
  const fs::path path = loaded().path;
  for (auto _ : state) {
    Store store = Store::open(path, StoreMode::read_only);
    benchmark::DoNotOptimize(store);
  }
}
BENCHMARK(BM_OpenReadOnly)->Unit(benchmark::kMicrosecond);

void BM_RecordCommitted(benchmark::State& state) {
  auto path = temp_dir() / "record.db";
  fs::remove(path);
  Store store = Store::open(path);
  auto run = store.begin_run({store.ensure_kernel(kernel), store.ensure_device(device),
                              store.ensure_toolchain(toolchain), "mla.yaml", "", "random", "{}"});
  std::mt19937_64 rng(7);
  int i = 0;
  for (auto _ : state) {
    store.record(measurement(run, i % shape_count, i / shape_count, rng));
    ++i;
  }
}
BENCHMARK(BM_RecordCommitted)->Unit(benchmark::kMicrosecond);

/// A store holding one real cubin twice: "zstd" (put_binary) and "zlib"
/// (the blob databases before zstd hold: "MLZ1", the size, a zlib stream).
struct CubinStore {
  fs::path path = temp_dir() / "cubins.db";
  std::size_t cubin_bytes = 0;
  CubinStore() {
    const SearchSpace space = SearchSpace::load(fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" /
                                                "fused_mla_attention.yaml");
    const Shape s2 = space.parse_shape("B=4,T=1024,H=16,D=64,R=128");
    const Config config = space.parse_config(
        "ALGORITHM=tf32x3_kvgemm,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=64,HEADS_PER_BLOCK=1,STAGE_LATENT=true,"
        "KEY_TILE=32,FLOAT4=false,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=wgmma_m128,KEY_SPLITS=1");
    const CompileResult compiled = Compiler().compile(compile_request(space, config, s2, "sm_90"));
    if (!compiled.ok()) throw std::runtime_error(compiled.failure().message);
    const std::vector<std::uint8_t> cubin(compiled.binary().cubin.begin(), compiled.binary().cubin.end());
    cubin_bytes = cubin.size();
    fs::remove(path);
    Store store = Store::open(path);
    store.put_binary(BinaryRecord{"zstd", "mla", "t", "13.0", "sm_90a", cubin, "{}"});
    test_support::insert_blob(path, "zlib", test_support::zlib_packed(cubin));
  }
};

const CubinStore& cubins() {
  static const CubinStore store;
  return store;
}

void BM_ReadBinary(benchmark::State& state) {
  const CubinStore& c = cubins();
  Store store = Store::open(c.path, StoreMode::read_only);
  const std::string key = state.range(0) == 0 ? "zstd" : "zlib";
  std::int64_t stored = 0;
  for (const auto& b : store.binaries_of("mla"))
    if (b.key == key) stored = b.stored_bytes;
  for (auto _ : state) {
    std::optional<BinaryRecord> record = store.get_binary(key);
    if (!record || record->cubin.size() != c.cubin_bytes) state.SkipWithError("the cubin did not come back whole");
    benchmark::DoNotOptimize(record);
  }
  state.SetLabel(key);
  state.counters["cubin_bytes"] = static_cast<double>(c.cubin_bytes);
  state.counters["stored_bytes"] = static_cast<double>(stored);
}
BENCHMARK(BM_ReadBinary)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
