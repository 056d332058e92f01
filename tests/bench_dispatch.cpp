// Host time per launch on a dispatcher cache hit, against a raw
// cudaLaunchKernel of the same cubin, config, geometry, arguments and stream.
//
// Method (written here so the numbers can be read honestly):
//   - The shape is S0 of the fused MLA space with the space's default config,
//     tuned into a fresh database together with its compiled binary, as a
//     sweep leaves it.  The dispatchers load that binary (the setup checks
//     that they compiled nothing); the raw baseline loads the same bytes and
//     calls cudaLaunchKernel directly on its cudaKernel_t.
//   - Each benchmark compares one entry point X with raw.  One iteration is
//     one round: a batch of 256 raw launches and a batch of 256 launches
//     through X, back to back on one stream, in alternating order from round
//     to round (raw first, then X first) so that neither side always runs
//     second.  Before every batch the stream is drained, outside the timed
//     region, so the queue never fills and a batch measures what the host
//     spends to enqueue 256 launches (steady_clock around the batch).
//   - Per round: the per-launch time of each batch and their difference
//     X - raw.  Reported: the medians over the rounds (raw_ns, X_ns), the
//     median of the per-round differences (diff_ns), its interquartile range
//     (diff_iqr_ns) and the half-width of an approximate 95% confidence
//     interval of that median, 1.57 * IQR / sqrt(rounds) (diff_ci95_ns).
//     Pairing within a round cancels slow drift of the machine (the host's
//     launch rate wanders by far more than the difference being measured).
//   - raw_control compares raw with raw: its diff_ns shows what the method
//     itself reports when there is no difference.
//   - The Time column (manual time) is X's mean host time per launch.
// Without a GPU every benchmark skips with the reason.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "cache/dispatcher.h"
#include "cache/mla.h"
#include "cache/mla_c_api.h"
#include "cache/store.h"
#include "tests/tuned_entry.h"
#include "core/compiler.h"
#include "core/cuda.h"
#include "core/space.h"
#include "tuner/workload.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

constexpr int launches_per_batch = 256;
constexpr int rounds = 400;         // iterations of every benchmark (pass --benchmark_repetitions for more runs)
constexpr int warmup_batches = 16;  // per entry point, before the timed rounds

/// The entry points compared with the raw launch.
enum class EntryPoint { raw_control, dispatcher, typed, c_abi };

/// Everything the benchmarks share, made once.
struct Setup {
  std::string skip;  // non-empty: why the benchmarks cannot run
  std::unique_ptr<SearchSpace> space;
  Shape shape;
  int sizes[5] = {};  // B, T, H, D, R
  fs::path dir;
  std::unique_ptr<Dispatcher> dispatcher;
  std::unique_ptr<MlaAttention> mla;
  mlatune_dispatcher* c_handle = nullptr;
  std::unique_ptr<Workload> workload;
  LoadedKernel raw;
  dim3 grid, block;
  std::size_t shared_bytes = 0;

  Setup() {
    GpuProbe probe = probe_gpu();
    if (!probe.usable) {
      skip = "no GPU: " + probe.reason;
      return;
    }
    try {
      make(probe);
    } catch (const std::exception& e) {
      skip = std::string("setup failed: ") + e.what();
    }
  }

  void make(const GpuProbe& probe) {
    const fs::path space_file =
        fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" / "fused_mla_attention.yaml";
    space = std::make_unique<SearchSpace>(SearchSpace::load(space_file));
    shape = space->parse_shape("B=2,T=32,H=4,D=16,R=24");  // S0: a short kernel keeps the queue short
    for (int i = 0; i < 5; ++i) sizes[i] = static_cast<int>(shape.values[static_cast<std::size_t>(i)]);
    const Config config = space->default_config();
    dir = fs::temp_directory_path() / ("mlatune_bench_dispatch_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path db = dir / "bench.db";

    CompileResult compiled = Compiler().compile(compile_request(*space, config, shape, probe.device.arch()));
    if (!compiled.ok()) {
      skip = "the default config does not compile: " + compiled.failure().message;
      return;
    }
    // What a sweep leaves behind: the best entry at the shape ...
    record_tuned_entry(db, *space, space_file, probe.device.info(), space->shape_string(shape),
                       space->config_string(config), "bench", Timing{1, 1, 1, 1, 0, "bench (not timed)"});
    dispatcher = Dispatcher::open(db, space_file);
    const Choice choice = dispatcher->describe(shape).choice;
    if (choice.reason != ChoiceReason::hit || !(choice.binary == compiled.key())) {
      skip = "setup: expected a hit on the stored binary, got " + dispatcher->describe(shape).text;
      return;
    }
    {  // ... and its binary.
      Store store = Store::open(db);
      store.put_binary(dispatcher->index().binary_record(compiled.binary()));
    }
    mla = std::make_unique<MlaAttention>(*dispatcher);
    if (mlatune_open(db.c_str(), space_file.c_str(), &c_handle) != MLATUNE_OK) {
      skip = std::string("mlatune_open: ") + mlatune_last_error(nullptr);
      return;
    }

    WorkloadOptions options;
    options.seed = 1;
    options.cache = CacheMode::hot;
    options.validation_sets = 1;
    workload = std::make_unique<Workload>(*space, shape, options);

    raw = LoadedKernel(compiled.binary().cubin, space->kernel().entry);
    const LaunchGeometry geometry = space->geometry(config, shape);
    grid = dim3(static_cast<unsigned>(geometry.grid[0]), static_cast<unsigned>(geometry.grid[1]),
                static_cast<unsigned>(geometry.grid[2]));
    block = dim3(static_cast<unsigned>(geometry.block[0]), static_cast<unsigned>(geometry.block[1]),
                 static_cast<unsigned>(geometry.block[2]));
    shared_bytes = static_cast<std::size_t>(geometry.shared_bytes);
    if (geometry.shared_bytes > 48 * 1024) MLATUNE_CUDA(raw.set_max_dynamic_shared(geometry.shared_bytes));

    // First uses: every entry point prepares the shape now (loading the
    // stored binary), so the rounds see only hits.
    launch_raw(1);
    for (EntryPoint e : {EntryPoint::dispatcher, EntryPoint::typed, EntryPoint::c_abi}) launch(e, 1);
    workload->stream().synchronize();
    unsigned long long c_compiles = 0;
    mlatune_compile_count(c_handle, &c_compiles);
    if (dispatcher->stats().compiles != 0 || c_compiles != 0 || dispatcher->stats().binaries_from_store != 1)
      skip = fmt::format("setup: the dispatchers compiled ({} + {}) instead of loading the stored binary",
                         dispatcher->stats().compiles, c_compiles);
  }

  ~Setup() {
    mlatune_close(c_handle);
    mla.reset();
    dispatcher.reset();
    workload.reset();
    if (!dir.empty()) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  }

  float* buffer(int i) const { return *static_cast<float**>(workload->arguments(0)[i]); }

  void launch_raw(int count) {
    void** args = workload->arguments(0);
    const void* kernel = raw.handle();
    auto stream = static_cast<cudaStream_t>(workload->stream().get());
    for (int i = 0; i < count; ++i)
      MLATUNE_CUDA(cudaLaunchKernel(kernel, grid, block, args, shared_bytes, stream));
  }

  void launch(EntryPoint entry, int count) {
    void** args = workload->arguments(0);
    void* stream = workload->stream().get();
    const auto [B, T, H, D, R] = sizes;
    switch (entry) {
      case EntryPoint::raw_control:
        launch_raw(count);
        break;
      case EntryPoint::dispatcher:
        for (int i = 0; i < count; ++i) dispatcher->launch(shape, args, stream);
        break;
      case EntryPoint::typed: {
        float *q = buffer(0), *kv = buffer(1), *wk = buffer(2), *wv = buffer(3), *out = buffer(4);
        for (int i = 0; i < count; ++i) (*mla)(q, kv, wk, wv, out, B, T, H, D, R, stream);
        break;
      }
      case EntryPoint::c_abi: {
        float *q = buffer(0), *kv = buffer(1), *wk = buffer(2), *wv = buffer(3), *out = buffer(4);
        for (int i = 0; i < count; ++i)
          if (mlatune_fused_mla_attention(c_handle, q, kv, wk, wv, out, B, T, H, D, R, stream) != MLATUNE_OK)
            throw EnvironmentError(std::string("mlatune_fused_mla_attention: ") + mlatune_last_error(c_handle));
        break;
      }
    }
  }

  /// Host nanoseconds per launch for one batch, the stream drained first.
  double batch_ns(EntryPoint entry, bool raw_side) {
    workload->stream().synchronize();
    const auto start = std::chrono::steady_clock::now();
    if (raw_side)
      launch_raw(launches_per_batch);
    else
      launch(entry, launches_per_batch);
    const auto stop = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(stop - start).count() / launches_per_batch;
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

// Linear interpolation between order statistics; `v` is sorted.
double quantile(const std::vector<double>& v, double q) {
  const double position = q * static_cast<double>(v.size() - 1);
  const auto below = static_cast<std::size_t>(position);
  const std::size_t above = std::min(below + 1, v.size() - 1);
  return v[below] + (position - static_cast<double>(below)) * (v[above] - v[below]);
}

void BM_HitOverhead(benchmark::State& state, EntryPoint entry) {
  Setup& s = setup();
  if (!s.skip.empty()) {
    state.SkipWithError(s.skip.c_str());
    return;
  }
  std::vector<double> raw_ns, entry_ns, diff_ns;
  try {
    for (int i = 0; i < warmup_batches; ++i) {
      s.batch_ns(entry, true);
      s.batch_ns(entry, false);
    }
    bool raw_first = true;
    for (auto _ : state) {
      double r = 0, x = 0;
      if (raw_first) {
        r = s.batch_ns(entry, true);
        x = s.batch_ns(entry, false);
      } else {
        x = s.batch_ns(entry, false);
        r = s.batch_ns(entry, true);
      }
      raw_first = !raw_first;
      raw_ns.push_back(r);
      entry_ns.push_back(x);
      diff_ns.push_back(x - r);
      state.SetIterationTime(x * 1e-9);
    }
    s.workload->stream().synchronize();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  if (diff_ns.empty()) return;
  std::sort(raw_ns.begin(), raw_ns.end());
  std::sort(entry_ns.begin(), entry_ns.end());
  std::sort(diff_ns.begin(), diff_ns.end());
  const double iqr = quantile(diff_ns, 0.75) - quantile(diff_ns, 0.25);
  const double ci95 = 1.57 * iqr / std::sqrt(static_cast<double>(diff_ns.size()));
  const double diff = quantile(diff_ns, 0.5);
  state.counters["raw_ns"] = quantile(raw_ns, 0.5);
  state.counters["entry_ns"] = quantile(entry_ns, 0.5);
  state.counters["diff_ns"] = diff;
  state.counters["diff_iqr_ns"] = iqr;
  state.counters["diff_ci95_ns"] = ci95;
  state.SetLabel(fmt::format("minus raw: {:+.0f} ns +-{:.0f} (95%), IQR {:.0f} ns, {} rounds of {}+{} launches",
                             diff, ci95, iqr, diff_ns.size(), launches_per_batch, launches_per_batch));
}

BENCHMARK_CAPTURE(BM_HitOverhead, raw_control, EntryPoint::raw_control)->Iterations(rounds)->UseManualTime();
BENCHMARK_CAPTURE(BM_HitOverhead, dispatcher, EntryPoint::dispatcher)->Iterations(rounds)->UseManualTime();
BENCHMARK_CAPTURE(BM_HitOverhead, typed_mla, EntryPoint::typed)->Iterations(rounds)->UseManualTime();
BENCHMARK_CAPTURE(BM_HitOverhead, c_abi, EntryPoint::c_abi)->Iterations(rounds)->UseManualTime();

}  // namespace
}  // namespace mlatune

// NVRTC's compute cache must be off before NVRTC loads (core/compiler.h):
// the setup compiles the kernel with its resource report.
int main(int argc, char** argv) {
  mlatune::ensure_compute_cache_disabled(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
