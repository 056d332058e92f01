// Compile throughput, all for sm_90 and needing no GPU:
//   CompileOneThread, CompilePool, CachedRequest: a small realistic kernel
//     (absorbed attention, tests/templates/absorbed_attention.cu, S1's H=8,
//     D=32, R=64), alone and through the pool;
//   Flagship/<shape>/<algorithm>/<buckets>: one representative config of
//     fused_mla_attention per algorithm at S0, S2, S4: wall and CPU time per
//     config, split into ptxas and the rest (front end and NVVM);
//   FlagshipOption/<option>: what an NVRTC option does to the time of one
//     tf32x3 config at S2, and whether the cubin stays the same;
//   FlagshipPool/<shape>/threads:<n>: configs/s of a fixed random sample of
//     the shape's valid configs through the pool (the tuner's path);
//   ProgramPerConfig / ConfigsPerProgram: n configs of a templated kernel as n
//     programs or as one program (what sharing the front end would buy).
// Each compilation is fresh: the CUDA compute cache is off (main), and pool
// requests get a salt definition so that the pool's own cache misses.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include "tuner/compile_pool.h"
#include "core/compiler.h"
#include "core/embedded.h"
#include "core/space.h"
#include "tests/flagship_apart.h"

namespace mlatune {
namespace {

std::atomic<long> salt{0};

// The configs one iteration compiles.  Fewer than four threads per query
// makes each thread hold R=64 accumulators fully unrolled: 255 registers and
// 10-25 s in ptxas, which a sweep meets but a smoke test cannot afford.
std::vector<CompileRequest> configs() {
  static const std::string source =
      load_text_file(std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "templates" /
                     "absorbed_attention.cu")
          .text;
  std::vector<CompileRequest> requests;
  for (int tpq : {4, 8, 16, 32})
    for (int qpb : {8}) {
      CompileRequest r;
      r.source = source;
      r.source_name = "absorbed_attention.cu";
      r.entry = "absorbed_attention";
      r.arch = "sm_90";
      r.definitions = {{"QUERIES_PER_BLOCK", std::to_string(qpb)},
                       {"SHAPE_D", "32"},
                       {"SHAPE_H", "8"},
                       {"SHAPE_R", "64"},
                       {"THREADS_PER_QUERY", std::to_string(tpq)},
                       {"MLATUNE_BENCH_SALT", std::to_string(salt++)}};
      r.config = "THREADS_PER_QUERY=" + std::to_string(tpq) + ",QUERIES_PER_BLOCK=" + std::to_string(qpb);
      requests.push_back(std::move(r));
    }
  return requests;
}

void BM_CompileOneThread(benchmark::State& state) {
  Compiler compiler;
  std::int64_t compiled = 0;
  for (auto _ : state) {
    for (const CompileRequest& request : configs()) {
      CompileResult result = compiler.compile(request);
      if (!result.ok()) {
        state.SkipWithError(result.failure().message.c_str());
        return;
      }
      benchmark::DoNotOptimize(result.binary().cubin.data());
      ++compiled;
    }
  }
  state.SetItemsProcessed(compiled);
  state.counters["configs/s"] = benchmark::Counter(static_cast<double>(compiled), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CompileOneThread)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_CompilePool(benchmark::State& state) {
  Compiler compiler;
  CompilePool pool(compiler, static_cast<unsigned>(state.range(0)));
  std::int64_t compiled = 0;
  for (auto _ : state) {
    std::vector<std::shared_future<CompileResult>> futures;
    for (CompileRequest& request : configs()) futures.push_back(pool.submit(std::move(request)));
    for (auto& future : futures) {
      if (!future.get().ok()) {
        state.SkipWithError(future.get().failure().message.c_str());
        return;
      }
      ++compiled;
    }
  }
  state.SetItemsProcessed(compiled);
  state.counters["configs/s"] = benchmark::Counter(static_cast<double>(compiled), benchmark::Counter::kIsRate);
  state.counters["threads"] = static_cast<double>(pool.threads());
}
BENCHMARK(BM_CompilePool)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The price of an identical request once its binary is cached: a key hash
// and a map lookup, no NVRTC.
void BM_CachedRequest(benchmark::State& state) {
  Compiler compiler;
  CompilePool pool(compiler, 1);
  CompileRequest request = configs().front();
  if (!pool.submit(request).get().ok()) {
    state.SkipWithError("the benchmark kernel does not compile");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(pool.submit(request).get().key());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CachedRequest);

// ---- the flagship -----------------------------------------------------------

const SearchSpace& flagship() {
  static const SearchSpace space = SearchSpace::load(std::filesystem::path(MLATUNE_TEST_DATA_DIR) /
                                                     ".." / "search_spaces" / "fused_mla_attention.yaml");
  return space;
}

struct TargetShape {
  const char* name;
  const char* text;
  int sequence;  // T
};
constexpr TargetShape target_shapes[] = {{"S0", "B=2,T=32,H=4,D=16,R=24", 32},
                                         {"S2", "B=4,T=1024,H=16,D=64,R=128", 1024},
                                         {"S4", "B=1,T=4096,H=16,D=128,R=512", 4096}};

// A typical member of each algorithm's family, valid at S0, S2 and S4 (the
// two-kernel form only where T > 256); tensor-core tiles of 16 queries at
// T = 32, else 64.
std::string representative(std::string_view algorithm, std::string_view buckets, int sequence) {
  if (algorithm == "absorbed")
    return "ALGORITHM=absorbed,THREADS_PER_QUERY=16,QUERIES_PER_BLOCK=8,HEADS_PER_BLOCK=1,"
           "STAGE_LATENT=true,KEY_TILE=16,FLOAT4=false,UNROLL=2,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1";
  if (algorithm == "expanded")
    return "ALGORITHM=expanded,THREADS_PER_QUERY=4,QUERIES_PER_BLOCK=16,HEADS_PER_BLOCK=1,"
           "STAGE_LATENT=true,KEY_TILE=16,FLOAT4=true,UNROLL=2,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1";
  return fmt::format("ALGORITHM={},THREADS_PER_QUERY=2,QUERIES_PER_BLOCK={},HEADS_PER_BLOCK=1,"
                     "STAGE_LATENT=true,KEY_TILE=32,FLOAT4=false,UNROLL=1,STAGE_WEIGHTS=false,"
                     "SHAPE_BUCKETS={},EXPAND_GEMM=mma_sync,KEY_SPLITS=1",
                     algorithm, sequence <= 32 ? 16 : 64, buckets);
}

std::optional<CompileRequest> flagship_request(const TargetShape& target, const std::string& config_text) {
  const SearchSpace& space = flagship();
  const Shape shape = space.parse_shape(target.text);
  const Config config = space.parse_config(config_text);
  if (!space.check(config, shape)) return std::nullopt;
  return compile_request(space, config, shape, "sm_90");
}

// Wall time per config is the benchmark's time; the counters are per config:
// cpu_s the compiling thread's CPU time, ptxas_s ptxas's own (wall) time.
void flagship_config(benchmark::State& state, const CompileRequest& request,
                     const std::string& same_as_cubin) {
  Compiler compiler;
  double wall = 0, cpu = 0, ptxas = 0;
  std::string cubin;
  std::int64_t compiled = 0;
  for (auto _ : state) {
    CompileResult result = compiler.compile(request);
    if (!result.ok()) {
      state.SkipWithError(result.failure().message.c_str());
      return;
    }
    wall += result.binary().compile_seconds;
    cpu += result.binary().cpu_seconds;
    ptxas += result.binary().ptxas_seconds;
    cubin = result.binary().cubin;
    ++compiled;
  }
  const double n = static_cast<double>(compiled);
  state.counters["cpu_s"] = cpu / n;
  state.counters["ptxas_s"] = ptxas / n;
  // ptxas reports wall time, so the rest of the wall time is the front end's
  // and NVVM's (on a busy machine both include waiting for a core).
  state.counters["front_nvvm_s"] = (wall - ptxas) / n;
  state.counters["cubin_kB"] = static_cast<double>(cubin.size()) / 1024.0;
  if (!same_as_cubin.empty()) state.counters["same_code"] = cubin == same_as_cubin ? 1 : 0;
}

void register_flagship_configs() {
  const std::pair<const char*, const char*> kinds[] = {
      {"absorbed", "exact"}, {"expanded", "exact"},    {"tf32x3", "exact"},
      {"tf32x3", "bucketed"}, {"tf32x3_2k", "exact"}, {"tf32x3_2k", "bucketed"}};
  for (const TargetShape& target : target_shapes)
    for (const auto& [algorithm, buckets] : kinds) {
      std::optional<CompileRequest> request =
          flagship_request(target, representative(algorithm, buckets, target.sequence));
      if (!request) continue;  // tf32x3_2k at S0 (T <= 256)
      benchmark::RegisterBenchmark(
          fmt::format("Flagship/{}/{}/{}", target.name, algorithm, buckets).c_str(),
          [request = *request](benchmark::State& state) { flagship_config(state, request, ""); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
}

// Options that might cut NVRTC's time, on tf32x3 at S2.  same_code says
// whether the cubin is byte-identical to the one without the option: an
// option that changes it changes the kernel, which needs the GPU's
// validation and timing before anyone may use it.
void register_flagship_options() {
  std::optional<CompileRequest> base =
      flagship_request(target_shapes[1], representative("tf32x3", "exact", target_shapes[1].sequence));
  if (!base) throw std::logic_error("the tf32x3 representative is not valid at S2");
  const std::vector<std::string> options = {"-minimal",
                                            "--extra-device-vectorization",
                                            "-Ofc=min",
                                            "--ptxas-options=-O2",
                                            "--ptxas-options=-O1"};
  benchmark::RegisterBenchmark("FlagshipOption/none", [request = *base](benchmark::State& state) {
    flagship_config(state, request, "");
  })->Unit(benchmark::kMillisecond)->UseRealTime();
  for (const std::string& option : options) {
    benchmark::RegisterBenchmark(
        fmt::format("FlagshipOption/{}", option).c_str(),
        [base = *base, option](benchmark::State& state) {
          CompileResult plain = Compiler().compile(base);
          if (!plain.ok()) {
            state.SkipWithError(plain.failure().message.c_str());
            return;
          }
          CompileRequest request = base;
          request.extra_options.push_back(option);
          flagship_config(state, request, plain.binary().cubin);
        })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
}

// A fixed random sample of the shape's valid configs: the first n of one
// shuffle, so that a smaller sample is a prefix of a larger one.
std::vector<Config> sample_configs(const TargetShape& target, std::size_t n) {
  const SearchSpace& space = flagship();
  std::vector<Config> all;
  space.for_each_valid(space.parse_shape(target.text), [&](const Config& c) {
    all.push_back(c);
    return true;
  });
  std::mt19937_64 rng(16);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::min(all.size(), n));
  return all;
}

// The tuner's path: a pool of `threads` compiling 2 x threads sampled configs
// (at least 4).  configs/s is the pool's throughput on that batch (its last
// config ends it, as in a sweep's final batch); cpu_s and wall_s are per
// config: wall above CPU means threads waited for cores.
void flagship_pool(benchmark::State& state, const TargetShape& target) {
  const auto threads = static_cast<unsigned>(state.range(0));
  const SearchSpace& space = flagship();
  const Shape shape = space.parse_shape(target.text);
  const std::vector<Config> sample = sample_configs(target, std::max(4u, 2 * threads));
  Compiler compiler;
  CompilePoolStats total;
  for (auto _ : state) {
    CompilePool pool(compiler, threads);
    std::vector<std::shared_future<CompileResult>> futures;
    for (const Config& config : sample) {
      CompileRequest request = compile_request(space, config, shape, "sm_90");
      request.definitions.emplace_back("MLATUNE_BENCH_SALT", std::to_string(salt++));
      futures.push_back(pool.submit(std::move(request)));
    }
    for (auto& future : futures) future.wait();  // a failed config costs its compile too
    CompilePoolStats stats = pool.stats();
    total.compiled += stats.compiled;
    total.nvrtc_seconds += stats.nvrtc_seconds;
    total.nvrtc_cpu_seconds += stats.nvrtc_cpu_seconds;
  }
  const double n = static_cast<double>(total.compiled);
  state.SetItemsProcessed(static_cast<std::int64_t>(total.compiled));
  state.counters["configs/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["cpu_s"] = total.nvrtc_cpu_seconds / n;
  state.counters["wall_s"] = total.nvrtc_seconds / n;
}

void register_flagship_pools() {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (const TargetShape& target : target_shapes) {
    auto* bench = benchmark::RegisterBenchmark(
        fmt::format("FlagshipPool/{}", target.name).c_str(),
        [&target](benchmark::State& state) { flagship_pool(state, target); });
    for (unsigned threads = 1; threads < cores; threads *= 2) bench->Arg(threads);
    bench->Arg(cores)->ArgName("threads")->Unit(benchmark::kMillisecond)->UseRealTime();
  }
}

// ---- several configs per NVRTC program -------------------------------------

// Six (THREADS_PER_QUERY, QUERIES_PER_BLOCK) configs of the templated small
// kernel, as instantiations (fewer than 8 lanes per query take seconds in
// ptxas, see configs() above).
std::vector<std::string> templated_configs() {
  std::vector<std::string> names;
  for (int tpq : {8, 16, 32})
    for (int qpb : {8, 16}) names.push_back(fmt::format("absorbed_attention<{}, {}>", tpq, qpb));
  return names;
}

// Compiles one NVRTC program holding `names`; an empty string, or the error.
std::string compile_program(const std::vector<std::string>& names) {
  static const std::string source =
      load_text_file(std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "templates" /
                     "absorbed_attention_templated.cu")
          .text;
  nvrtcProgram program = nullptr;
  if (nvrtcCreateProgram(&program, source.c_str(), "absorbed_attention_templated.cu", 0, nullptr,
                         nullptr) != NVRTC_SUCCESS)
    return "nvrtcCreateProgram failed";
  std::string error;
  for (const std::string& name : names)
    if (nvrtcAddNameExpression(program, name.c_str()) != NVRTC_SUCCESS) error = "nvrtcAddNameExpression failed";
  const char* options[] = {"--gpu-architecture=sm_90", "--std=c++17", "--ptxas-options=-v",
                           "-DSHAPE_H=8", "-DSHAPE_D=32", "-DSHAPE_R=64"};
  if (error.empty() && nvrtcCompileProgram(program, 6, options) != NVRTC_SUCCESS) {
    std::size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    error.assign(size, '\0');
    nvrtcGetProgramLog(program, error.data());
  }
  nvrtcDestroyProgram(&program);
  return error;
}

void BM_ProgramPerConfig(benchmark::State& state) {
  for (auto _ : state)
    for (const std::string& name : templated_configs())
      if (std::string error = compile_program({name}); !error.empty()) {
        state.SkipWithError(error.c_str());
        return;
      }
  state.counters["configs/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * templated_configs().size()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ProgramPerConfig)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ConfigsPerProgram(benchmark::State& state) {
  for (auto _ : state)
    if (std::string error = compile_program(templated_configs()); !error.empty()) {
      state.SkipWithError(error.c_str());
      return;
    }
  state.counters["configs/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * templated_configs().size()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ConfigsPerProgram)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- the prologue compiled apart -----------------------------------------------

// What a sweep at one shape pays in NVRTC per tensor-core config, with the
// prologue compiled with each config (whole) and apart (one compiler, as a
// compile thread or process of a sweep has: each prologue part compiled once
// per iteration, its first config paying for it).  The configs: the first
// `count` drawn at random (fixed seed) among those the flagship compiles
// apart at the shape (tf32x3_kvgemm and tf32x3_wgmma_ws): 8 (the CI smoke
// run) or 48 (closer to a sweep, where more configs share a part).
void flagship_apart(benchmark::State& state, const TargetShape& target, bool apart) {
  static const SearchSpace space = test_support::flagship_with_prologue_apart();
  const auto count = static_cast<std::size_t>(state.range(0));
  const Shape shape = space.parse_shape(target.text);
  std::vector<CompileRequest> requests;
  std::mt19937_64 rng(16);
  for (int tries = 0; requests.size() < count && tries < 100000; ++tries) {
    const std::optional<Config> c = space.sample(shape, rng);
    if (!c || !space.prologue_apart_config(*c, shape)) continue;
    CompileRequest request = compile_request(space, *c, shape, "sm_90");
    if (!apart) request.prologue_part.reset();
    requests.push_back(std::move(request));
  }
  double cpu = 0;
  std::uint64_t parts = 0;
  for (auto _ : state) {
    const Compiler compiler;  // an empty part cache each iteration
    for (const CompileRequest& request : requests) {
      const CompileResult result = compiler.compile(request);
      if (!result.ok()) {
        state.SkipWithError(result.failure().message.c_str());
        return;
      }
      cpu += result.cpu_seconds();
    }
    parts += compiler.prologue_parts().compiled;
  }
  const double n = static_cast<double>(state.iterations() * requests.size());
  state.counters["configs/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["cpu_s"] = cpu / n;
  state.counters["prologue_parts"] = static_cast<double>(parts) / static_cast<double>(state.iterations());
}

void register_flagship_apart() {
  for (const TargetShape& target : target_shapes) {
    if (std::string_view(target.name) == "S0") continue;
    for (bool apart : {false, true})
      benchmark::RegisterBenchmark(fmt::format("FlagshipApart/{}/{}", target.name, apart ? "apart" : "whole").c_str(),
                                   [&target, apart](benchmark::State& state) { flagship_apart(state, target, apart); })
          ->Arg(8)
          ->Arg(48)
          ->ArgName("configs")
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  }
}

}  // namespace
}  // namespace mlatune

int main(int argc, char** argv) {
  // A compile the CUDA compute cache answered would measure a file read.
  mlatune::ensure_compute_cache_disabled(argv);
  mlatune::register_flagship_configs();
  mlatune::register_flagship_options();
  mlatune::register_flagship_pools();
  mlatune::register_flagship_apart();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

