// mlatune tune: the command's options, and their parsing into typed
// settings (cli/tune_settings.h).  What it does with them: cli/tune_run.cpp;
// what it prints: cli/tune_report.cpp.
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "cli/tune_settings.h"
#include "core/compiler.h"
#include "core/error.h"
#include "tuner/shard.h"
#include "tuner/strategies/registry.h"
#include "tuner/strategy.h"
#include "tuner/sweep.h"
#include "tuner/time_budget.h"
#include "tuner/timing.h"

namespace mlatune::cli {
namespace {

/// The options as CLI11 fills them in, before parsing.
struct TuneOptions {
  std::string space_file;
  std::vector<std::string> shapes;
  std::vector<std::string> shapes_files;
  std::vector<std::string> grids;
  std::string configs_file;
  bool compile_only = false;
  std::string arch;
  bool json = false;
  bool quiet = false;
  unsigned jobs = 0;
  std::string compile_in{to_string(CompileIn::processes)};
  std::string db;
  std::optional<std::uint64_t> max_evals;
  std::string time_budget;  // empty: none
  bool no_warm_start = false;
  std::optional<std::uint64_t> seed;
  std::string cache = "cold";
  std::string strategy{to_string(StrategyKind{})};
  bool strategy_given = false;  // set by the callback: --strategy on the command line
  bool misses = false;
  std::string replay;
  double budget_ms = TimingOptions{}.budget_ms;
  double cutoff = SweepOptions{}.cutoff_factor;
  int cut_after = TimingOptions{}.cut_min_samples;
  bool validate_first = false;
  double first_launch_cut = TimingOptions{}.first_launch_cut;
  std::vector<std::string> where;  // extra constraints on the candidates
  std::string errors_by;
  std::string shard;               // "I/N"; empty: from Slurm, else none
  std::string gpus;                // "all" or "0,2"; empty: one GPU
};

/// --shard I/N, else the task of a Slurm job array, else none.
std::optional<ShardChoice> shard_choice(const std::string& shard) {
  if (!shard.empty()) return ShardChoice{parse_shard(shard), "--shard"};
  return shard_from_slurm([](const char* name) { return std::getenv(name); });
}

/// Parse at the edge: names become enums, the architecture its canonical
/// form, the database its path.
TuneSettings settings_from(const TuneOptions& options) {
  TuneSettings s;
  s.space_file = options.space_file;
  s.database = database_path(options.db);
  s.shapes = options.shapes;
  s.shapes_files.assign(options.shapes_files.begin(), options.shapes_files.end());
  s.grids = options.grids;
  s.configs_file = options.configs_file;
  s.misses = options.misses;
  s.compile_only = options.compile_only;
  if (!options.arch.empty()) s.arch = parse_architecture(options.arch);
  s.json = options.json;
  s.quiet = options.quiet;
  s.replay = options.replay;
  s.where = options.where;
  s.errors_by = options.errors_by;
  s.jobs = options.jobs;
  s.compile_in = parse_compile_in(options.compile_in).value_or(CompileIn::processes);  // checked by its validator
  s.max_evals = options.max_evals;
  if (!options.time_budget.empty()) {
    try {
      s.time_budget = parse_time_budget(options.time_budget);
    } catch (const InputError& error) {
      throw InputError("--time-budget " + error.message());
    }
  }
  s.warm_start = !options.no_warm_start;
  s.seed = options.seed;
  s.strategy = parse_strategy_kind(options.strategy);  // checked by its validator already
  s.strategy_given = options.strategy_given;
  s.timing.cache = parse_cache_mode(options.cache).value_or(CacheMode::cold);
  s.timing.budget_ms = options.budget_ms;
  s.timing.cut_min_samples = options.cut_after;
  s.timing.validate_first = options.validate_first;
  s.timing.first_launch_cut = options.first_launch_cut;
  s.cutoff = options.cutoff;
  s.shard = shard_choice(options.shard);
  if (!options.gpus.empty()) s.gpus = parse_gpu_selection(options.gpus);
  return s;
}

/// A factor option's check: 0 (off), or a finite number above 1 (at least 1
/// with `one_allowed`); else `message`.
CLI::Validator zero_or_factor(bool one_allowed, std::string message) {
  return CLI::Validator(
      [one_allowed, message](std::string& text) -> std::string {
        try {
          std::size_t used = 0;
          double factor = std::stod(text, &used);
          if (used == text.size() && std::isfinite(factor) &&
              (factor == 0 || factor > 1 || (one_allowed && factor == 1)))
            return {};
        } catch (const std::exception&) {
          // Not a number: the message below.
        }
        return message;
      },
      one_allowed ? "0 or at least 1" : "0 or above 1");
}

/// --strategy's check, so that a bad name fails when given, used or not.
CLI::Validator strategy_name() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          parse_strategy_kind(text);
        } catch (const InputError& error) {
          return error.what();
        }
        return {};
      },
      "NAME");
}

}  // namespace

void add_tune_commands(CLI::App& app) {
  auto options = std::make_shared<TuneOptions>();
  CLI::App* tune = app.add_subcommand(
      "tune", "Compile (and, with a GPU, time) every valid config of a space for given shapes");
  tune->add_option("space", options->space_file, "search-space YAML file")->required();
  tune->add_option("--shape", options->shapes,
                   "a shape, e.g. B=2,T=32,H=4,D=16,R=24 (repeatable; default: the space's "
                   "default shapes)");
  tune->add_option("--shapes-file", options->shapes_files,
                   "a file of shapes, one per line as for --shape ('#' comments; repeatable)");
  tune->add_option("--grid", options->grids,
                   "every combination of values per shape variable, e.g. \"B=2;T=64..4096:x2;H=16;D=32|64|128;"
                   "R=128\" (a value, a list a|b, a range a..b:xK or a..b:+K; repeatable)");
  tune->add_option("--configs-file", options->configs_file,
                   "evaluate exactly the configs of this file (one per line as `mlatune space list` prints "
                   "them) at every shape, instead of searching; lines that are not configs of the space, and "
                   "configs invalid at a shape, are reported and skipped");
  tune->add_flag("--compile-only", options->compile_only,
                 "compile every valid config and report resources; time nothing");
  tune->add_option("--arch", options->arch,
                   "GPU architecture to compile for, e.g. sm_90 (default: the GPU's, else sm_90)");
  tune->add_flag("--json", options->json, "print the report as JSON");
  tune->add_flag("--quiet,-q", options->quiet, "no progress lines");
  tune->add_option("--db", options->db,
                   "database file (default: $MLATUNE_DB, else ./mlatune.db)");
  tune->add_option("--max-evals", options->max_evals,
                   "per shape: evaluate at most this many configs, those the strategy proposes first (with "
                   "--compile-only: a uniform random subset)")
      ->check(whole_number(1, UINT64_MAX));
  tune->add_option("--time-budget", options->time_budget,
                   "per shape: propose no more configs once this much wall time has passed at the shape (those "
                   "already compiling are still measured), e.g. 90s, 10m, 1h30m; with or without --max-evals")
      ->type_name("DURATION");
  tune->add_flag("--no-warm-start", options->no_warm_start,
                 "do not start the search (bayes, and auto where it chooses bayes) from the best configs the "
                 "database holds for other shapes of the kernel on this GPU");
  tune->add_option("--seed", options->seed, "seed for inputs and sampling (default: fresh)")
      ->check(whole_number(0, UINT64_MAX));
  tune->add_option("--where", options->where,
                   "only configs that also satisfy this constraint, e.g. \"ALGORITHM == tf32x3\" "
                   "(repeatable); results are stored under the space itself");
  tune->add_option("--errors-by", options->errors_by,
                   "in the summary, the worst error per validation input kind for each value of this "
                   "parameter, e.g. ALGORITHM (default: over all ok configs of a shape)")
      ->type_name("PARAMETER");
  tune->add_flag("--misses", options->misses,
                 "tune the shapes the runtime dispatcher was asked for but had no tuned entry for "
                 "(recorded in the database)");
  CLI::Option* strategy =
      tune->add_option("--strategy", options->strategy,
                       fmt::format("search strategy (default {}): {}", options->strategy, describe_strategies()))
          ->check(strategy_name());
  tune->add_option("--replay", options->replay,
                   "serve measurements from a recorded sweep instead of a GPU: a run id of the "
                   "database, or a CSV of shape,config,outcome,median_us (`mlatune cache export "
                   "--format csv`; .csv.gz: gzip-compressed), whose '# where: EXPR' lines before the header "
                   "restrict the candidates to what it recorded");
  tune->add_option("--cache", options->cache, "timing method: cold (L2 flushed), rotate, hot")
      ->check(CLI::IsMember({"cold", "rotate", "hot"}));
  tune->add_option("--budget-ms", options->budget_ms,
                   fmt::format("timing budget per candidate, ms (default {:g}; a settled median stops sooner)",
                               TimingOptions{}.budget_ms))
      ->check(finite_positive_number());
  tune->add_option("--cutoff", options->cutoff,
                   fmt::format("stop timing a candidate once its median passes FACTOR x the best so far at "
                               "its shape (from --cut-after launches on; recorded as a cut measurement); 0: never "
                               "(default {:g})",
                               SweepOptions{}.cutoff_factor))
      ->type_name("FACTOR")
      ->check(zero_or_factor(false, "must be 0 (no early cut) or a finite number above 1, so that a candidate "
                                    "faster than the best is never cut"));
  // Three at least: with fewer, one wild launch could decide the cut.
  tune->add_option("--cut-after", options->cut_after,
                   fmt::format("launches timed before a candidate may be cut (default {})",
                               TimingOptions{}.cut_min_samples))
      ->check(CLI::Range(3, 1000));
  tune->add_flag("--validate-first", options->validate_first,
                 "validate every candidate in full (all input sets, two runs each) before timing it; default: "
                 "with an early cut, time a candidate after its first validation launch and finish validating "
                 "it only if it is not cut (a cut candidate is recorded as validated on one launch)");
  tune->add_option("--first-launch-cut", options->first_launch_cut,
                   fmt::format("with the early cut (and without --validate-first), cut a candidate whose first "
                               "validation launch took {:g} ms or more and over FACTOR x the cutoff's limit, with "
                               "no timed launch (recorded as a cut measurement of that one launch); 0: never "
                               "(default {:g})",
                               first_launch_floor_us / 1000.0, TimingOptions{}.first_launch_cut))
      ->type_name("FACTOR")
      ->check(zero_or_factor(true, "must be 0 (never) or a finite number of at least 1: a first launch is "
                                   "judged only past the cutoff's limit"));
  tune->add_option("--shard", options->shard,
                   "tune only shard I of N (0-based: 0/4 .. 3/4) of the sweep, into this shard's own "
                   "database, for `mlatune cache merge` later; default: SLURM_ARRAY_TASK_ID of "
                   "SLURM_ARRAY_TASK_COUNT when set. Brute force and random split each shape's "
                   "candidates, annealing and model whole shapes")
      ->type_name("I/N");
  tune->add_option("--gpus", options->gpus,
                   "time on these GPUs, one worker process each, fed from one queue and one compile pool: "
                   "`all` or ordinals such as 0,2 (all of one model; default: the first GPU only)")
      ->type_name("all|I,J,...");
  tune->add_option("--jobs,-j", options->jobs, "compile threads (default: one per core)")
      ->check(whole_number(0, 1024));
  tune->add_option("--compile-in", options->compile_in,
                   "where NVRTC runs: processes (default: each compile thread hands its configs to a "
                   "compile-only mlatune-worker of its own; NVRTC runs in one process wait for one another, and a "
                   "crashing compiler fails its config only) or threads (in this process)")
      ->check(CLI::IsMember({"processes", "threads"}));
  tune->callback([options, strategy] {
    options->strategy_given = strategy->count() > 0;
    run_tune(settings_from(*options));
  });
}

}  // namespace mlatune::cli
