// Search strategies compared on replayed H200 measurements of the flagship
// space: every recorded shape of the fixture files (tests/replay_fixtures.h;
// default: every tests/data/*.csv and *.csv.gz, or those given with
// --fixture FILE, repeatable).  The CTest smoke run (tests/Tests.cmake)
// replays one small fixture with one seed: the judgment against the
// issue's target is strategy_test's; the full table is for people.
//
// Before the benchmarks, prints per shape and strategy, as medians over 10
// seeds (--seeds N): the evaluations needed to come within 3 % of the shape's optimum,
// and the best found (% above the optimum) after 5 %, 10 % and 25 % of the
// shape's configs.  `auto` is told a budget of 25 % of them (so it chooses
// bayes), cold and warm-started from the other fixture shapes (their best
// configs, and the algorithms they found slow left out of the first spread,
// as a sweep does with those shapes in its database: tuner/strategies/
// warm_start.h), and cold and warm with 32 proposals made ahead of the
// results (what a GPU sweep with 16 compile threads does:
// MeasurementSource::lookahead).  Then, per
// shape, whether the default strategy meets the target: within 3 %
// with at most 10 % of the evaluations, and better than random search at
// every budget (never worse at 5, 10 and 25 %, and fewer evaluations to 3 %).
// With --check the program exits with 1 when it does not, at any shape.
//
// The benchmarks time one replay of a strategy over 5 % of a shape's configs
// and over all of them (the strategy's own cost: proposals, model fits).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "core/space.h"
#include "tests/replay_fixtures.h"
#include "tuner/replay.h"
#include "tuner/strategy.h"

namespace mlatune {
namespace {

using test_support::Fixture;
using test_support::FixtureSet;
using test_support::median;

/// Seeds per median: 10, or --seeds N (the CTest smoke run uses 1).
int g_seeds = 10;

/// A row of the table: a strategy, and what it is told.
struct Contender {
  std::string label;
  StrategyKind kind;
  bool budget = false;  // told --max-evals = 25 % of the shape's configs
  bool warm = false;    // warm-started from the other fixture shapes
  std::size_t lookahead = 1;  // proposals ahead of the results (a GPU sweep's: 2 per compile thread)
};

std::vector<Contender> contenders() {
  return {{"random", parse_strategy_kind("random")},
          {"annealing", parse_strategy_kind("annealing")},
          {"model", parse_strategy_kind("model")},
          {"bayes", parse_strategy_kind("bayes")},
          {"auto", StrategyKind{}, true},
          {"auto, warm", StrategyKind{}, true, true},
          {"auto, ahead 32", StrategyKind{}, true, false, 32},
          {"auto, warm, 32", StrategyKind{}, true, true, 32}};
}

/// Medians over the seeds.
struct Row {
  double to_3 = 0;
  double above[3] = {0, 0, 0};
};

Row measure(const FixtureSet& set, const Fixture& f, const Contender& c) {
  StrategyContext context = c.warm ? set.warm_context(f) : StrategyContext{};
  if (c.budget) context.max_evals = f.searchable() / 4;
  std::vector<double> to_3, above[3];
  for (int seed = 1; seed <= g_seeds; ++seed) {
    const test_support::SearchRecord r =
        test_support::judge(c.kind, f, static_cast<std::uint64_t>(seed), context, c.lookahead);
    to_3.push_back(static_cast<double>(r.evaluations_to_3_percent));
    for (int b = 0; b < 3; ++b) above[b].push_back(r.above_at[b]);
  }
  Row row;
  row.to_3 = median(to_3);
  for (int b = 0; b < 3; ++b) row.above[b] = median(above[b]);
  return row;
}

/// Prints the table and the verdicts; false when the default strategy misses
/// the target at some shape.
bool print_table(const FixtureSet& set) {
  std::printf("Strategies on replayed H200 sweeps (median over %d seeds; %% above the optimum)\n", g_seeds);
  std::printf("%-5s %-18s %-14s %7s %9s %11s %9s %9s %9s\n", "shape", "file", "strategy", "configs", "recorded",
              "evals to 3%", "best@5%", "best@10%", "best@25%");
  bool all_met = true;
  std::vector<std::string> verdicts;
  for (const Fixture& f : set.fixtures()) {
    std::vector<std::pair<Contender, Row>> rows;
    for (const Contender& c : contenders()) {
      rows.emplace_back(c, measure(set, f, c));
      const Row& r = rows.back().second;
      std::printf("%-5s %-18s %-14s %7zu %9zu %11.1f %8.1f%% %8.1f%% %8.1f%%\n", f.name.c_str(), f.file.c_str(),
                  c.label.c_str(), f.valid, f.recorded, r.to_3, r.above[0], r.above[1], r.above[2]);
    }
    const Row& random = rows.front().second;
    for (const auto& [c, r] : rows) {
      if (c.kind != StrategyKind{}) continue;
      const double tenth = 0.10 * static_cast<double>(f.searchable());
      const bool fast = r.to_3 <= tenth;
      bool beats = r.to_3 < random.to_3;
      for (int b = 0; b < 3; ++b) beats = beats && r.above[b] <= random.above[b];
      all_met = all_met && fast && beats;
      char line[512];
      std::snprintf(line, sizeof line,
                    "%s (%s): %s within 3%% with %.0f evaluations (%.1f%% of %zu%s; target <= 10%%); %s random at "
                    "every budget",
                    f.name.c_str(), c.label.c_str(), fast ? "MET:" : "MISSED:", r.to_3,
                    100.0 * r.to_3 / static_cast<double>(f.searchable()), f.searchable(),
                    f.exhaustive() ? "" : " recorded", beats ? "beats" : "does NOT beat");
      verdicts.emplace_back(line);
    }
  }
  std::printf("\nThe default strategy (auto) against the issue's target:\n");
  for (const std::string& v : verdicts) std::printf("  %s\n", v.c_str());
  std::fflush(stdout);
  return all_met;
}

// One replay of `kind` over 1/`divisor` of a fixture's configs per
// iteration: the strategy's own cost (proposals, model fits).
void replay_part(benchmark::State& state, const Fixture* f, StrategyKind kind, std::size_t divisor) {
  const std::size_t budget = std::max<std::size_t>(1, f->searchable() / divisor);
  std::uint64_t seed = 1;
  for (auto _ : state) {
    auto strategy = make_strategy(kind, *f->space, f->shape, seed++);
    auto trace = replay(*strategy, *f->data, f->shape, budget, std::nullopt, f->unrecorded());
    benchmark::DoNotOptimize(trace.best_after.back());
  }
  state.SetLabel(std::string(to_string(kind)) + " " + f->name);
}

// Every registered strategy at every fixture, over 5 % of its configs and
// over all of them (for the models, every refit up to the last config).
void register_benchmarks(const FixtureSet& set) {
  for (StrategyKind kind : all_strategy_kinds())
    for (const Fixture& f : set.fixtures()) {
      const std::string suffix = std::string(to_string(kind)) + "/" + f.name;
      benchmark::RegisterBenchmark(("BM_ReplayFivePercent/" + suffix).c_str(), replay_part, &f, kind,
                                   std::size_t{20})
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("BM_ReplayWholeSpace/" + suffix).c_str(), replay_part, &f, kind, std::size_t{1})
          ->Unit(benchmark::kMillisecond);
    }
}

}  // namespace
}  // namespace mlatune

int main(int argc, char** argv) {
  // Our options first, so that Google Benchmark sees only its own.
  std::vector<std::filesystem::path> files;
  bool check = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--fixture") == 0) {
      if (i + 1 == argc) {
        std::fprintf(stderr, "bench_strategies: --fixture needs a file\n");
        return 2;
      }
      files.emplace_back(argv[++i]);
    } else if (std::strcmp(argv[i], "--seeds") == 0) {
      char* end = nullptr;
      const long n = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
      if (n < 1 || n > 1000 || *end != '\0') {
        std::fprintf(stderr, "bench_strategies: --seeds needs a count from 1 to 1000\n");
        return 2;
      }
      mlatune::g_seeds = static_cast<int>(n);
      ++i;
    } else if (std::strcmp(argv[i], "--check") == 0) {
      check = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    if (files.empty()) files = mlatune::test_support::default_fixture_files();
    const mlatune::test_support::FixtureSet set(files);
    const bool met = mlatune::print_table(set);
    mlatune::register_benchmarks(set);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    if (check && !met) {
      std::fprintf(stderr, "bench_strategies: the default strategy misses the target at some shape\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_strategies: %s\n", e.what());
    return 2;
  }
  return 0;
}
