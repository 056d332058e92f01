// Search strategies compared on replayed H200 measurements of the flagship
// space (tests/data/h200_sweeps.csv; S0 and S1 are exhaustive).
//
// Before the benchmarks, prints per strategy and shape: the median over 10
// seeds of the evaluations needed to come within 3 % of the optimum, and the
// best found (% above the optimum, median over the seeds) after 5 %, 10 % and
// 25 % of the space.  The benchmarks time one replay of a strategy over 5 %
// of the space and over all of it (a strategy's own cost: proposals, model
// fits).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tuner/replay.h"
#include "core/space.h"
#include "tuner/strategy.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

// Exact configs only: the recorded sweeps measured no shape-bucketed config.
const SearchSpace& flagship() {
  static const SearchSpace space = SearchSpace::load(fs::path(MLATUNE_TEST_DATA_DIR).parent_path() /
                                                     "search_spaces" / "fused_mla_attention.yaml")
                                       .restrict({"SHAPE_BUCKETS == exact && ALGORITHM <= tf32x3_2k"});
  return space;
}
const ReplayData& h200() {
  static const ReplayData data =
      ReplayData::load(fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv", flagship());
  return data;
}

const char* const kShapes[] = {"B=2,T=32,H=4,D=16,R=24", "B=4,T=256,H=8,D=32,R=64"};
const char* const kShapeNames[] = {"S0", "S1"};
constexpr int kSeeds = 10;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void print_table() {
  std::printf("Strategies on replayed H200 sweeps (median over %d seeds)\n", kSeeds);
  std::printf("%-6s %-12s %7s %14s %10s %10s %10s\n", "shape", "strategy", "space", "evals to 3%",
              "best@5%", "best@10%", "best@25%");
  for (std::size_t s = 0; s < std::size(kShapes); ++s) {
    const Shape shape = flagship().parse_shape(kShapes[s]);
    const std::size_t space = flagship().count(shape);
    const double optimum = h200().optimum(shape);
    for (StrategyKind kind : all_strategy_kinds()) {
      std::vector<double> to_3, at_5, at_10, at_25;
      for (int seed = 1; seed <= kSeeds; ++seed) {
        auto strategy = make_strategy(kind, flagship(), shape, static_cast<std::uint64_t>(seed));
        // A quarter of the space, then on only until within 3 %.
        auto trace = replay(*strategy, h200(), shape, space / 4);
        if (!trace.evaluations_to_within(optimum, 0.03)) {
          auto rest = replay(*strategy, h200(), shape, space, optimum * 1.03);
          for (double best : rest.best_after)
            trace.best_after.push_back(std::min(best, trace.best_after.back()));
        }
        auto n = trace.evaluations_to_within(optimum, 0.03);
        to_3.push_back(static_cast<double>(n ? *n : space));
        auto above = [&](double fraction) {
          auto evals = static_cast<std::size_t>(fraction * static_cast<double>(space));
          return 100.0 * (trace.best_after_evaluations(evals) / optimum - 1.0);
        };
        at_5.push_back(above(0.05));
        at_10.push_back(above(0.10));
        at_25.push_back(above(0.25));
      }
      std::printf("%-6s %-12s %7zu %14.1f %9.1f%% %9.1f%% %9.1f%%\n", kShapeNames[s],
                  std::string(to_string(kind)).c_str(), space, median(to_3), median(at_5),
                  median(at_10), median(at_25));
    }
  }
  std::fflush(stdout);
}

// One replay of `kind` over 1/`divisor` of the space at shape `s` per
// iteration: the strategy's own cost (proposals, model fits).
void replay_part(benchmark::State& state, StrategyKind kind, std::size_t s, std::size_t divisor) {
  const Shape shape = flagship().parse_shape(kShapes[s]);
  const std::size_t budget = flagship().count(shape) / divisor;
  std::uint64_t seed = 1;
  for (auto _ : state) {
    auto strategy = make_strategy(kind, flagship(), shape, seed++);
    auto trace = replay(*strategy, h200(), shape, budget);
    benchmark::DoNotOptimize(trace.best_after.back());
  }
  state.SetLabel(std::string(to_string(kind)) + " " + kShapeNames[s]);
}

// Every registered strategy at every shape, over 5 % of the space and over
// all of it (for the model, every refit up to the last config).
void register_benchmarks() {
  for (StrategyKind kind : all_strategy_kinds())
    for (std::size_t s = 0; s < std::size(kShapes); ++s) {
      const std::string suffix = std::string(to_string(kind)) + "/" + kShapeNames[s];
      benchmark::RegisterBenchmark(("BM_ReplayFivePercent/" + suffix).c_str(), replay_part, kind, s, std::size_t{20})
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("BM_ReplayWholeSpace/" + suffix).c_str(), replay_part, kind, s, std::size_t{1})
          ->Unit(benchmark::kMillisecond);
    }
}

}  // namespace
}  // namespace mlatune

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  mlatune::print_table();
  mlatune::register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
