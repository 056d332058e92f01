// mlatune tune, once its options are parsed (cli/tune_settings.h): which
// shapes, whether a GPU is there, and then one sweep (tuner/sweep.h) whose
// measurements come from the GPU worker, a recorded sweep (--replay), or
// compilation alone (--compile-only, or no GPU); then its summary
// (cli/tune_report.h).
#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cache/store.h"
#include "cli/option_checks.h"
#include "cli/tune_report.h"
#include "cli/tune_settings.h"
#include "core/compiler.h"
#include "core/device.h"
#include "core/error.h"
#include "core/shape_grid.h"
#include "core/space.h"
#include "tuner/given_configs.h"
#include "tuner/measurement_source.h"
#include "tuner/replay.h"
#include "tuner/strategies/registry.h"
#include "tuner/sweep.h"
#include "tuner/worker/client.h"
#include "tuner/worker/gpus.h"
#include "tuner/worker/pool.h"

namespace mlatune::cli {
namespace {

// ---- shapes and configs ----------------------------------------------------------

bool shapes_listed(const TuneSettings& settings) {
  return !settings.shapes.empty() || !settings.shapes_files.empty() || !settings.grids.empty();
}

/// The shapes the dispatcher was asked for and had no tuned entry for.
std::vector<Shape> missed_shapes(const SearchSpace& space, const TuneSettings& settings) {
  if (shapes_listed(settings))
    throw InputError("give either --misses or shapes (--shape, --shapes-file, --grid), not both");
  std::vector<Shape> shapes;
  std::set<std::string> seen;
  Store store = Store::open(settings.database, StoreMode::read_only);
  for (const MissRecord& miss : store.misses())
    if (miss.kernel_name == space.kernel_name() && seen.insert(miss.shape).second)
      shapes.push_back(space.parse_shape(miss.shape));
  return shapes;
}

/// --shape, --shapes-file and --grid together, in that order, each shape once.
std::vector<Shape> listed_shapes(const SearchSpace& space, const TuneSettings& settings) {
  std::vector<Shape> shapes;
  std::set<Shape> seen;
  auto add = [&](Shape shape) {
    if (seen.insert(shape).second) shapes.push_back(std::move(shape));
  };
  for (const std::string& text : settings.shapes) add(shape_option(space, "--shape", text));
  for (const std::filesystem::path& file : settings.shapes_files)
    for (Shape& shape : read_shapes_file(space, file)) add(std::move(shape));
  for (const std::string& grid : settings.grids) {
    try {
      for (Shape& shape : grid_shapes(space, grid)) add(std::move(shape));
    } catch (const InputError& error) {
      throw InputError("--" + error.message());
    }
  }
  return shapes;
}

/// The shapes to tune; nullopt when --misses found none (and said so).
std::optional<std::vector<Shape>> shapes_to_tune(const SearchSpace& space, const TuneSettings& settings) {
  std::vector<Shape> shapes;
  if (settings.misses) {
    shapes = missed_shapes(space, settings);
    if (shapes.empty()) {
      fmt::print("no untuned shapes of {} were asked for at run time (no misses in {})\n", space.kernel_name(),
                 settings.database.string());
      return std::nullopt;
    }
  } else if (!shapes_listed(settings)) {
    shapes = space.default_shapes();
  } else {
    shapes = listed_shapes(space, settings);
  }
  if (shapes.empty())
    throw InputError(SourceLocation{space.file_name()}, "the space has no default shapes; give one with --shape");
  return shapes;
}

/// The configs of --configs-file, or nothing (search).  Lines that are not
/// configs of this space are reported on stderr and skipped.
std::optional<GivenConfigs> given_configs(const SearchSpace& space, const TuneSettings& settings) {
  if (settings.configs_file.empty()) return std::nullopt;
  ConfigsFile file = read_configs_file(space, settings.configs_file);
  for (const std::string& rejected : file.rejected) fmt::print(stderr, "mlatune: skipped {}\n", rejected);
  if (file.configs.empty())
    throw InputError(SourceLocation{settings.configs_file.string()},
                     fmt::format("no config of {} in the file (one per line, e.g. {})", space.kernel_name(),
                                 space.config_string(space.default_config())));
  return GivenConfigs{std::move(file.configs), {}};
}

/// What a tune evaluates: its shapes and, unless it searches, its configs.
struct TunePlan {
  std::vector<Shape> shapes;
  std::optional<GivenConfigs> given;
};

// ---- replay ---------------------------------------------------------------------

bool is_run_id(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::string replay_name(const std::string& replay, const std::filesystem::path& database) {
  if (is_run_id(replay)) return fmt::format("run {} of {}", replay, database.filename().string());
  return std::filesystem::path(replay).filename().string();
}

std::string csv_quoted(const std::string& field) {
  std::string out = "\"";
  for (char c : field) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

/// Replay data from a CSV file, or (an integer) from a run in the database:
/// the run's measurements go through the same reader as a CSV export.
ReplayData load_replay(const std::string& replay, const std::filesystem::path& database,
                       const SearchSpace& space) {
  if (!is_run_id(replay)) return ReplayData::load(replay, space);
  Store store = Store::open(database, StoreMode::read_only);
  std::string uuid;
  for (const RunRecord& run : store.runs())
    if (std::to_string(run.id) == replay) uuid = run.uuid;
  if (uuid.empty())
    throw InputError(fmt::format("--replay {}: no run {} in {} (see `mlatune cache show`)", replay, replay,
                                 database.string()));
  std::string csv = "shape,config,outcome,median_us\n";
  for (const MeasurementRecord& r : store.measurements({space.kernel_name(), ""})) {
    if (r.run_uuid != uuid) continue;
    const Measurement& m = r.measurement;
    csv += fmt::format("{},{},{},{}\n", csv_quoted(m.shape), csv_quoted(m.config), to_string(m.outcome),
                       m.timing ? fmt::format("{}", m.timing->median_us) : std::string());
  }
  return ReplayData::parse(csv, replay_name(replay, database), space);
}

// ---- one sweep ------------------------------------------------------------------

/// The space with `--where` constraints added, and those that replay data
/// states it measured only (`recorded`: tuner/replay.h), or nothing when
/// there are none.
std::optional<SearchSpace> restricted_space(const SearchSpace& space, const TuneSettings& settings,
                                            const std::vector<std::string>& recorded = {}) {
  if (settings.where.empty() && recorded.empty()) return std::nullopt;
  std::optional<SearchSpace> restricted;
  try {
    restricted = settings.where.empty() ? SearchSpace(space) : space.restrict(settings.where);
  } catch (const InputError& error) {
    throw InputError("--where " + error.message());
  }
  // Checked when the data was read; those the space (or --where) already
  // states are left out, since a space refuses a constraint twice (spaces
  // aside, as SearchSpace::restrict compares them).
  auto compact = [](std::string text) {
    text.erase(std::remove_if(text.begin(), text.end(), [](unsigned char c) { return std::isspace(c); }), text.end());
    return text;
  };
  std::vector<std::string> more;
  for (const std::string& where : recorded) {
    const auto& present = restricted->constraints();
    if (std::none_of(present.begin(), present.end(),
                     [&](const Expression& e) { return compact(e.text()) == compact(where); }))
      more.push_back(where);
  }
  return more.empty() ? std::move(restricted) : restricted->restrict(more);
}

/// Each --where on its own, before anything runs or is written.
void check_where(const SearchSpace& space, const TuneSettings& settings) {
  for (const std::string& where : settings.where) {
    try {
      space.check_constraint(where);
    } catch (const InputError& error) {
      throw InputError("--where " + error.message());
    }
  }
  if (settings.errors_by.empty()) return;
  std::vector<std::string> names;
  for (const Parameter& p : space.parameters()) {
    if (p.name == settings.errors_by) return;
    names.push_back(p.name);
  }
  throw InputError(fmt::format("--errors-by {}: not a parameter of {}; its parameters: {}", settings.errors_by,
                               settings.space_file.string(), fmt::join(names, ", ")));
}

// A strategy picks what to time next from what it has timed; compiling
// measures nothing, so it would be silently ignored there.
const char* const strategy_needs_timing =
    "a strategy chooses what to time next from the times so far, and compiling times nothing; "
    "use --max-evals N to compile a uniform random subset";

// ---- interrupts ------------------------------------------------------------------
// SIGINT (Ctrl-C) or SIGTERM during a tune stops it between candidates
// (SweepOptions::stop_requested): what was measured is committed, the report
// says where it stopped, and then the process dies of that signal, as a shell
// expects.  A second signal kills at once: the first resets the handler.

std::atomic<int> stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch a lock-free atomic");

void note_stop_signal(int signal) {
  stop_signal.store(signal);
  static constexpr char message[] =
      "\nmlatune: stopping after the candidate being measured; what was measured is kept "
      "(the same signal again stops at once)\n";
  const ssize_t written = ::write(STDERR_FILENO, message, sizeof message - 1);
  (void)written;
}

/// Installs the handlers for its lifetime, except where a signal is ignored
/// (a background job of a non-interactive shell ignores SIGINT).
class StopOnSignals {
 public:
  StopOnSignals() {
    stop_signal.store(0);
    struct sigaction action = {};
    action.sa_handler = note_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_RESETHAND;
    for (std::size_t i = 0; i < kSignals.size(); ++i) {
      struct sigaction now = {};
      if (::sigaction(kSignals[i], nullptr, &now) != 0 || now.sa_handler == SIG_IGN) continue;
      installed_[i] = ::sigaction(kSignals[i], &action, &previous_[i]) == 0;
    }
  }
  ~StopOnSignals() { restore(); }
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

  /// When a signal stopped the tune: dies of it now.
  void die_if_stopped() {
    const int signal = stop_signal.load();
    if (signal == 0) return;
    restore();
    std::fflush(nullptr);
    ::signal(signal, SIG_DFL);
    ::raise(signal);
  }

 private:
  void restore() {
    for (std::size_t i = 0; i < kSignals.size(); ++i)
      if (installed_[i]) ::sigaction(kSignals[i], &previous_[i], nullptr);
    installed_ = {};
  }

  static constexpr std::array<int, 2> kSignals = {SIGINT, SIGTERM};
  std::array<bool, 2> installed_ = {};
  std::array<struct sigaction, 2> previous_ = {};
};

SweepOptions sweep_options(const TuneSettings& settings, TunePlan plan, const std::string& arch) {
  SweepOptions sweep;
  sweep.stop_requested = [] { return stop_signal.load() != 0; };
  sweep.shapes = std::move(plan.shapes);
  sweep.given = std::move(plan.given);
  sweep.arch = arch;
  sweep.jobs = settings.jobs;
  sweep.compile_in = settings.compile_in;
  sweep.strategy = settings.strategy;
  sweep.max_evals = settings.max_evals;
  sweep.time_budget = settings.time_budget;
  sweep.warm_start = settings.warm_start;
  sweep.seed = settings.seed;
  sweep.timing = settings.timing;
  sweep.cutoff_factor = settings.cutoff;
  if (settings.shard) sweep.shard = settings.shard->shard;
  return sweep;
}

// ---- shards ---------------------------------------------------------------------

/// What a shard must share with the others to take a disjoint share of the
/// same sweep; checked before anything runs.
void check_shard(const TuneSettings& settings) {
  if (!settings.shard) return;
  const std::string shard = to_string(settings.shard->shard);
  if (settings.misses)
    throw InputError(fmt::format("shard {} ({}): --misses reads the shapes from each shard's own database, so "
                                 "shards could disagree on them; give the shapes with --shape",
                                 shard, settings.shard->source));
  // A compile-only sweep draws its subset with a fixed seed.
  if (!settings.compile_only && !settings.seed && shard_needs_seed(settings.strategy) &&
      shard_split(settings.strategy) == ShardSplit::configs)
    throw InputError(fmt::format("shard {} ({}): --strategy {} draws its candidates at random, so every shard "
                                 "needs the same --seed to draw the same sequence and split it",
                                 shard, settings.shard->source, to_string(settings.strategy)));
}

/// Up to a few of the shapes this shard takes whole among those at
/// `indices`, then how many more.
std::string shape_list(const SearchSpace& space, const std::vector<Shape>& shapes,
                       const std::vector<std::size_t>& indices, const Shard& shard) {
  std::vector<std::string> taken;
  for (std::size_t i : indices)
    if (shard_owns_shape(shard, i)) taken.push_back(space.shape_string(shapes[i]));
  if (taken.empty()) return fmt::format("no shape (the sweep has {} for {} shards)", indices.size(), shard.count);
  std::string text = fmt::format("{} of {} shapes: ", taken.size(), indices.size());
  for (std::size_t i = 0; i < std::min<std::size_t>(taken.size(), 4); ++i) text += (i ? "; " : "") + taken[i];
  if (taken.size() > 4) text += fmt::format("; and {} more", taken.size() - 4);
  return text;
}

/// One line saying which share this process takes and why.  A strategy that
/// chooses per shape (auto) splits each shape as its choice there does, as
/// the sweep does (every shard makes the same choices: they depend on the
/// shape's valid configs and the budget only).
std::string shard_note(const SearchSpace& candidates, const TuneSettings& settings, const std::vector<Shape>& shapes,
                       StrategyKind strategy, bool given) {
  const Shard& shard = settings.shard->shard;
  const std::string head = fmt::format("shard {} ({})", to_string(shard), settings.shard->source);
  const std::string merge = "merge the shards' databases with `mlatune cache merge`";
  if (given) return fmt::format("{}: one in {} of each shape's given configs; {}", head, shard.count, merge);
  StrategyContext context;
  context.max_evals = settings.max_evals;
  context.time_limited = settings.time_budget.has_value();
  std::vector<std::size_t> whole, split;  // shape indices, by how they are shared
  std::set<std::string> whole_by, split_by;  // the strategies chosen there
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const StrategyKind kind = resolve_strategy(strategy, candidates.count(shapes[i]), context);
    (shard_split(kind) == ShardSplit::shapes ? whole : split).push_back(i);
    (shard_split(kind) == ShardSplit::shapes ? whole_by : split_by).insert(std::string(to_string(kind)));
  }
  auto names = [](const std::set<std::string>& kinds) {
    std::string text;
    for (const std::string& k : kinds) text += (text.empty() ? "" : ", ") + k;
    return text;
  };
  const std::string chosen =
      strategy.entry().choose ? fmt::format(" (chosen by {})", to_string(strategy)) : std::string();
  if (split.empty())
    return fmt::format("{}: {}; {}{} adapts to its measurements, so shards split whole shapes", head,
                       shape_list(candidates, shapes, whole, shard), names(whole_by), chosen);
  if (whole.empty())
    return fmt::format("{}: one candidate in {} of each shape's sequence ({}{} proposes the same sequence in every "
                       "shard); {}",
                       head, shard.count, names(split_by), chosen, merge);
  return fmt::format("{}: {} chooses per shape: one candidate in {} of the sequence at the {} shapes where it chose "
                     "{}, and of the {} where it chose {} (which adapts), {}; {}",
                     head, to_string(strategy), shard.count, split.size(), names(split_by), whole.size(),
                     names(whole_by), shape_list(candidates, shapes, whole, shard), merge);
}

/// Runs a measuring sweep (on the GPU or replayed) and prints its summary.
void sweep_and_report(const SearchSpace& space, const TuneSettings& settings, SweepOptions sweep,
                      MeasurementSource& source, const DeviceInfo& device, bool replayed,
                      const std::vector<std::string>& recorded = {}) {
  const std::optional<SearchSpace> candidates = restricted_space(space, settings, recorded);
  if (candidates) sweep.candidates = &*candidates;
  std::optional<ProgressPrinter> printer;
  if (!settings.quiet && !settings.json) {
    printer.emplace(::isatty(STDERR_FILENO) == 1);
    sweep.progress = [&printer](const SweepProgress& p) { printer->update(p); };
  }
  fmt::print(stderr, "mlatune: tuning {} on {} ({}, {} SMs) into {}\n", space.kernel_name(), device.name,
             device.arch, device.sm_count, settings.database.string());
  if (settings.shard)
    fmt::print(stderr, "mlatune: {}\n",
               shard_note(candidates ? *candidates : space, settings, sweep.shapes, settings.strategy,
                          sweep.given.has_value()));
  SweepReport report = run_sweep(space, settings.space_file, settings.database, source, device, sweep);
  if (printer) printer->finish();
  const SweepSummary summary{space.kernel_name(),
                             device,
                             settings.database,
                             replayed,
                             settings.cutoff,
                             settings.timing.cut_min_samples,
                             settings.timing.budget_ms,
                             std::string(to_string(settings.strategy)),
                             settings.time_budget,
                             settings.errors_by};
  if (settings.json)
    print_sweep_json(report, summary);
  else
    print_sweep_text(report, summary);
}

/// Measurements from a recorded sweep: no GPU, no compilation.
void replay_sweep(const SearchSpace& space, const TuneSettings& settings, TunePlan plan) {
  const std::string arch = settings.arch.empty() ? "sm_90" : settings.arch;
  ReplayData data = load_replay(settings.replay, settings.database, space);
  const std::string name = replay_name(settings.replay, settings.database);
  DeviceInfo replayed;
  replayed.name = "replay of " + name;
  replayed.arch = arch;
  std::unique_ptr<MeasurementSource> source = replayed_measurements(data, name);
  for (const std::string& where : data.restriction())
    fmt::print(stderr, "mlatune: {} measured only configs with {} (its '# where:' line): the candidates are those\n",
               name, where);
  sweep_and_report(space, settings, sweep_options(settings, std::move(plan), arch), *source, replayed, true,
                   data.restriction());
}

/// Whether a GPU is there, as a worker process sees it: the tuner never
/// initializes CUDA itself (a crashing candidate can only take the worker down).
struct GpuCheck {
  std::unique_ptr<Worker> worker;
  std::unique_ptr<WorkerPool> workers;  // --gpus: one worker per GPU, in place of `worker`
  std::optional<DeviceInfo> device;
  std::string why_not;
};

/// One worker per GPU of --gpus, each probed; they must be of one model
/// (the sweep records one device).  The probing worker goes.
void start_gpu_workers(GpuCheck& gpu, const GpuSelection& selection, int device_count) {
  std::vector<PoolLane> lanes =
      gpu_lanes(selected_gpus(selection, device_count), WorkerOptions{}, std::getenv("CUDA_VISIBLE_DEVICES"));
  std::vector<std::string> labels;
  for (const PoolLane& lane : lanes) labels.push_back(lane.label);
  gpu.worker.reset();
  gpu.workers = std::make_unique<WorkerPool>(std::move(lanes));
  gpu.device = common_device(probe_lanes(*gpu.workers), labels);
}

GpuCheck check_gpu(const TuneSettings& settings) {
  GpuCheck gpu;
  // Compiling for a given architecture needs no GPU: do not even ask.
  if (settings.compile_only && !settings.arch.empty()) return gpu;
  gpu.worker = std::make_unique<Worker>();
  DeviceReport report = gpu.worker->probe_device();
  if (!report.usable) {
    gpu.why_not = report.reason;
    return gpu;
  }
  gpu.device = report.device.info();
  if (settings.gpus) start_gpu_workers(gpu, *settings.gpus, report.device_count);
  return gpu;
}

/// Compiles every candidate, prints resources; InputError when none compiled.
void compile_and_report(const SearchSpace& space, const TuneSettings& settings, TunePlan plan,
                        const std::string& arch, const GpuCheck& gpu, std::vector<std::string> notes) {
  // The compile sweep proposes in enumeration order, or a seeded random
  // subset with --max-evals: neither adapts.
  std::vector<Shape> shapes = plan.shapes;
  if (settings.shard)
    notes.push_back(shard_note(space, settings, shapes,
                               parse_strategy_kind(settings.max_evals ? "random" : "brute_force"), plan.given.has_value()));
  for (const std::string& note : notes) fmt::print(stderr, "mlatune: {}\n", note);
  const std::optional<SearchSpace> candidates = restricted_space(space, settings);
  SweepOptions sweep = sweep_options(settings, std::move(plan), arch);
  if (candidates) sweep.candidates = &*candidates;
  SweepReport report = run_compile_sweep(space, settings.database, sweep);
  CompileSummaryContext context{&space, std::move(shapes), arch,          nvrtc_version(),
                                gpu.device, gpu.why_not,   std::move(notes), settings.database};
  if (settings.json)
    print_compile_json(report, context);
  else
    print_compile_text(report, context);
  const CompileTotals totals = compile_totals(report);
  if (totals.configs > 0 && totals.compiled == 0)
    throw InputError(SourceLocation{space.kernel().path.string()},
                     "no config compiled; the first failure is shown above");
}

/// The architecture to compile for: --arch, else the GPU's, else sm_90 (said
/// in `notes` for a compile-only run).
std::string target_arch(const TuneSettings& settings, const GpuCheck& gpu, std::vector<std::string>& notes) {
  if (!settings.arch.empty()) return settings.arch;
  if (gpu.device) return parse_architecture(gpu.device->arch);
  if (settings.compile_only)
    notes.push_back(fmt::format("no GPU found ({}); compiling for sm_90 (choose with --arch)", gpu.why_not));
  return "sm_90";
}

/// Options that contradict each other, before anything is loaded or run.
void check_combination(const TuneSettings& settings) {
  if (settings.compile_only && settings.strategy_given && settings.replay.empty())
    throw InputError(fmt::format("--strategy {} cannot be used with --compile-only: {}",
                                 to_string(settings.strategy), strategy_needs_timing));
  check_shard(settings);
  if (settings.gpus && (settings.compile_only || !settings.replay.empty()))
    throw InputError(fmt::format("--gpus chooses the GPUs that time candidates, and {} times nothing on a GPU",
                                 settings.compile_only ? "--compile-only" : "--replay"));
  if (settings.strategy_given && !settings.configs_file.empty())
    throw InputError(fmt::format("--strategy {} cannot be used with --configs-file: the file says which configs "
                                 "to evaluate, so there is nothing to search",
                                 to_string(settings.strategy)));
}

/// Times the plan on the GPU the worker found.
void gpu_sweep(const SearchSpace& space, const TuneSettings& settings, TunePlan plan, const std::string& arch,
               GpuCheck& gpu) {
  if (gpu.device->arch != arch)
    throw InputError(fmt::format("--arch {} does not match the GPU ({}, {}); timing needs the GPU's "
                                 "architecture (use --compile-only to compile for another one)",
                                 arch, gpu.device->name, gpu.device->arch));
  const CompileSettings compile{settings.database, arch, settings.jobs, settings.compile_in};
  if (gpu.workers) {
    std::string labels;
    for (std::size_t i = 0; i < gpu.workers->size(); ++i) labels += (i ? ", " : "") + gpu.workers->label(i);
    fmt::print(stderr, "mlatune: timing on {} GPUs ({}), one worker each, fed from one queue\n", gpu.workers->size(),
               labels);
  }
  // Configs that need an architecture this GPU lacks (requires:) are invalid
  // here (every GPU of a --gpus run is of one model).
  const SearchSpace on_device = space.for_device(gpu.device->arch);
  std::unique_ptr<MeasurementSource> source =
      gpu.workers ? gpu_measurements(on_device, settings.space_file, compile, settings.timing, std::move(gpu.workers))
                  : gpu_measurements(on_device, settings.space_file, compile, settings.timing, *gpu.worker);
  sweep_and_report(on_device, settings, sweep_options(settings, std::move(plan), arch), *source, *gpu.device, false);
}

/// Without a GPU a tune only compiles; a strategy, which needs times, cannot run.
std::string no_gpu_note(const TuneSettings& settings, const GpuCheck& gpu, const std::string& arch) {
  if (settings.strategy_given)
    throw EnvironmentError(fmt::format("no GPU present ({}), so nothing can be timed: --strategy {} needs "
                                       "timing ({})",
                                       gpu.why_not, to_string(settings.strategy), strategy_needs_timing));
  return fmt::format("no GPU present ({}): compiling {} for {} only; nothing is timed", gpu.why_not,
                     settings.max_evals ? fmt::format("at most {} candidates a shape", *settings.max_evals)
                                        : std::string("every candidate"),
                     arch);
}

void tune(const TuneSettings& settings) {
  check_combination(settings);
  SearchSpace space = SearchSpace::load(settings.space_file);
  check_where(space, settings);
  std::optional<std::vector<Shape>> shapes = shapes_to_tune(space, settings);
  if (!shapes) return;
  TunePlan plan{std::move(*shapes), given_configs(space, settings)};
  if (!settings.replay.empty()) return replay_sweep(space, settings, std::move(plan));

  GpuCheck gpu = check_gpu(settings);
  std::vector<std::string> notes;
  const std::string arch = target_arch(settings, gpu, notes);
  if (!settings.compile_only) {
    if (gpu.device) return gpu_sweep(space, settings, std::move(plan), arch, gpu);
    notes.push_back(no_gpu_note(settings, gpu, arch));
  }
  // Nothing runs on a GPU from here on: the worker goes now, not at the end.
  gpu.worker.reset();
  compile_and_report(space, settings, std::move(plan), arch, gpu, std::move(notes));
}

}  // namespace

void run_tune(const TuneSettings& settings) {
  StopOnSignals stop;
  tune(settings);  // the sources, workers and compile threads are gone when it returns
  stop.die_if_stopped();
}

}  // namespace mlatune::cli
