// Host time per launch: a raw cudaLaunchKernel of a loaded kernel
// (LoadedKernel::launch) against a Dispatcher cache hit of the same kernel,
// config and shape.  Launches are enqueued back to back on one stream with a
// synchronize every 256 (outside the timed region), so the queue never fills
// and the time is the host's cost of one launch.  Without a GPU every
// benchmark skips with the reason.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>

#include "cache/dispatcher.h"
#include "cache/mla.h"
#include "cache/store.h"
#include "tuner/compiler.h"
#include "tuner/cuda.h"
#include "tuner/space.h"
#include "tuner/workload.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

constexpr int sync_every = 256;

/// Everything both benchmarks share, made once.
struct Setup {
  std::string skip;  // non-empty: why the benchmarks cannot run
  std::unique_ptr<SearchSpace> space;
  Shape shape;
  fs::path dir;
  std::unique_ptr<Dispatcher> dispatcher;
  std::unique_ptr<Workload> workload;
  LoadedKernel raw;
  LaunchGeometry geometry;

  Setup() {
    GpuProbe probe = probe_gpu();
    if (!probe.usable) {
      skip = "no GPU: " + probe.reason;
      return;
    }
    try {
      const fs::path space_file =
          fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" / "fused_mla_attention.yaml";
      space = std::make_unique<SearchSpace>(SearchSpace::load(space_file));
      shape = space->parse_shape("B=2,T=32,H=4,D=16,R=24");  // S0: short kernels keep the queue short
      const Config config = space->default_config();
      dir = fs::temp_directory_path() / ("mlatune_bench_dispatch_" + std::to_string(getpid()));
      fs::create_directories(dir);
      const fs::path db = dir / "bench.db";
      {
        Store store = Store::open(db);
        std::int64_t kernel = store.ensure_kernel(
            KernelInfo{space->kernel_name(), space->template_hash(), space->definition_hash()});
        std::int64_t device = store.ensure_device(probe.device.info());
        std::int64_t toolchain = store.ensure_toolchain(ToolchainInfo::current());
        std::int64_t run =
            store.begin_run(RunInfo{kernel, device, toolchain, space_file.string(), space->text(), "bench", "{}"});
        Measurement m;
        m.run_id = run;
        m.shape = space->shape_string(shape);
        m.config = space->config_string(config);
        m.timing = Timing{1, 1, 1, 1, 0, "bench (not timed)"};
        m.error = ErrorFigures{0, 0};
        store.record(m);
        store.finish_run(run, RunStatus::finished);
      }
      dispatcher = Dispatcher::open(db, space_file);
      WorkloadOptions options;
      options.seed = 1;
      options.cache = CacheMode::hot;
      options.validation_sets = 1;
      workload = std::make_unique<Workload>(*space, shape, options);
      CompileResult compiled =
          Compiler().compile(compile_request(*space, config, shape, probe.device.arch()));
      if (!compiled.ok()) {
        skip = "the default config does not compile: " + compiled.failure().message;
        return;
      }
      raw = LoadedKernel(compiled.binary().cubin, space->kernel().entry);
      geometry = space->geometry(config, shape);
      if (geometry.shared_bytes > 48 * 1024) raw.set_max_dynamic_shared(geometry.shared_bytes);
      // First dispatch: prepares the shape (a hit; its binary compiled once
      // and stored), so the benchmark sees only the hit path.
      dispatcher->launch(shape, workload->arguments(0), workload->stream().get());
      workload->stream().synchronize();
      if (dispatcher->describe(shape).choice.reason != ChoiceReason::hit) skip = "expected a cache hit";
    } catch (const std::exception& e) {
      skip = std::string("setup failed: ") + e.what();
    }
  }
  ~Setup() {
    dispatcher.reset();
    if (!dir.empty()) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

void BM_RawLaunch(benchmark::State& state) {
  Setup& s = setup();
  if (!s.skip.empty()) {
    state.SkipWithError(s.skip.c_str());
    return;
  }
  void** args = s.workload->arguments(0);
  const Stream& stream = s.workload->stream();
  int n = 0;
  for (auto _ : state) {
    if (s.raw.launch(s.geometry.grid, s.geometry.block, s.geometry.shared_bytes, args, stream) != 0) {
      state.SkipWithError("raw launch failed");
      break;
    }
    if (++n % sync_every == 0) {
      state.PauseTiming();  // the wait for the GPU is not host launch time
      stream.synchronize();
      state.ResumeTiming();
    }
  }
  stream.synchronize();
}
BENCHMARK(BM_RawLaunch)->UseRealTime();

void BM_DispatchHit(benchmark::State& state) {
  Setup& s = setup();
  if (!s.skip.empty()) {
    state.SkipWithError(s.skip.c_str());
    return;
  }
  void** args = s.workload->arguments(0);
  const Stream& stream = s.workload->stream();
  int n = 0;
  for (auto _ : state) {
    s.dispatcher->launch(s.shape, args, stream.get());
    if (++n % sync_every == 0) {
      state.PauseTiming();  // the wait for the GPU is not host launch time
      stream.synchronize();
      state.ResumeTiming();
    }
  }
  stream.synchronize();
}
BENCHMARK(BM_DispatchHit)->UseRealTime();

void BM_TypedMlaHit(benchmark::State& state) {
  Setup& s = setup();
  if (!s.skip.empty()) {
    state.SkipWithError(s.skip.c_str());
    return;
  }
  void** args = s.workload->arguments(0);
  auto ptr = [&](int i) { return *static_cast<float**>(args[i]); };
  const MlaAttention mla(*s.dispatcher);
  const Stream& stream = s.workload->stream();
  const auto& v = s.shape.values;
  int n = 0;
  for (auto _ : state) {
    mla(ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), static_cast<int>(v[0]), static_cast<int>(v[1]),
        static_cast<int>(v[2]), static_cast<int>(v[3]), static_cast<int>(v[4]), stream.get());
    if (++n % sync_every == 0) {
      state.PauseTiming();  // the wait for the GPU is not host launch time
      stream.synchronize();
      state.ResumeTiming();
    }
  }
  stream.synchronize();
}
BENCHMARK(BM_TypedMlaHit)->UseRealTime();

}  // namespace
}  // namespace mlatune

// NVRTC's compute cache must be off before NVRTC loads (tuner/compiler.h):
// the setup compiles the kernel with its resource report.
int main(int argc, char** argv) {
  mlatune::ensure_compute_cache_disabled(argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
