// Compile throughput: how many configs of a realistic kernel (absorbed MLA
// attention, tests/templates/absorbed_attention.cu, shape S1: H=8, D=32, R=64)
// NVRTC compiles per second for sm_90, alone and through the pool.  Each
// compilation gets a fresh salt definition so that no cache answers it.
#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "tuner/compile_pool.h"
#include "core/compiler.h"
#include "core/embedded.h"

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

}  // namespace
}  // namespace mlatune

BENCHMARK_MAIN();
