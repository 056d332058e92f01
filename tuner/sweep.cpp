#include "tuner/sweep.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "tuner/replay.h"
#include "tuner/strategies/registry.h"
#include "tuner/strategies/warm_start.h"
#include "tuner/sweep_journal.h"

namespace mlatune {
namespace {

using Clock = std::chrono::steady_clock;

/// The sweep's clock: the one the options give (tests), else the steady clock.
Clock::time_point now(const SweepOptions& options) { return options.clock ? options.clock() : Clock::now(); }

double seconds_since(const SweepOptions& options, Clock::time_point start) {
  return std::chrono::duration<double>(now(options) - start).count();
}

/// The seed of a shape's search: the sweep's seed and the shape alone, not
/// the shapes searched before it, so that a shard that skips shapes
/// (tuner/shard.h) searches each of its shapes exactly as an unsharded sweep
/// does.  FNV-1a of the shape, mixed with the seed by SplitMix64's finalizer.
std::uint64_t strategy_seed(std::uint64_t sweep_seed, const std::string& shape) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : shape) h = (h ^ c) * 0x100000001b3ULL;
  std::uint64_t z = sweep_seed ^ h;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Shapes read (nearest first) for the values a search leaves out of its
/// first, spread-out configs (Sweep::add_costly_values).
constexpr std::size_t kCostlyShapes = 4;

/// How the loop chooses its candidates.
struct Plan {
  /// Offer the space's default config first, so that the sweep can say what
  /// tuning gained over it; off: the strategy's order alone.
  bool default_first = true;
};

/// Proposes, measures and records, shape after shape.
class Sweep {
 public:
  Sweep(const SearchSpace& space, MeasurementSource& source, Journal& journal,
        const SweepOptions& options, std::uint64_t seed, Plan plan)
      : space_(space),
        subspace_(options.candidates ? *options.candidates : space),
        source_(source),
        journal_(journal),
        options_(options),
        plan_(plan),
        seed_(seed),
        rng_(seed) {}

  /// No shape follows.
  static constexpr std::size_t last_shape = std::numeric_limits<std::size_t>::max();
  /// The search at `shape_index`; `following` is the next shape this sweep
  /// takes (or last_shape), whose first candidates are prepared while this
  /// one's last are measured, where the source allows it.
  ShapeReport run_shape(std::size_t shape_index, std::size_t following);
  /// Whether this sweep's shard (if any) takes the shape at `shape_index`.
  bool takes_shape(std::size_t shape_index) const;
  /// The sweep's clock.
  Clock::time_point now() const { return mlatune::now(options_); }
  /// Whether the caller asked the sweep to stop (SweepOptions::stop_requested).
  bool stopping() const { return options_.stop_requested && options_.stop_requested(); }

 private:
  /// One shape's search in progress.
  struct ShapeRun {
    Shape shape;
    std::size_t index = 0;      // among the sweep's shapes
    std::uint64_t position = 0; // candidates of the sequence so far, every shard's
    Clock::time_point start;
    ShapeReport report;
    std::uint64_t budget = 0;
    StrategyKind kind;          // the strategy searching (auto resolved)
    std::unique_ptr<Strategy> strategy;
    EarlierResults earlier;
    std::set<Config> proposed;
    bool default_offered = false;
    bool proposals_done = false;   // the strategy, budget or clock has no more to propose
    bool source_told = false;      // MeasurementSource::begin_preparing was called
    bool current = false;          // measuring: its clock runs (before, it was prepared ahead)
    std::deque<Config> in_flight;  // prepared, not yet measured
  };

  std::unique_ptr<ShapeRun> open_run(std::size_t shape_index);
  void plan_shape(ShapeRun& run);
  void add_costly_values(ShapeRun& run, const std::vector<strategies::TunedText>& tuned, StrategyContext& context);
  StrategyContext strategy_context() const;
  StrategyKind kind_at(const Shape& shape) const;
  bool time_spent(ShapeRun& run) const;
  std::optional<Config> next_config(ShapeRun& run);
  bool splits_configs(StrategyKind kind) const;
  void refill(ShapeRun& run, std::size_t room);
  void prepare_ahead(const ShapeRun& run, std::size_t following);
  std::uint64_t expected_total(const ShapeRun& run) const;
  void announce(const ShapeRun& run);
  void measure_next(ShapeRun& run);
  void tally(ShapeRun& run, const Config& config, CandidateReport c);
  void retime_fastest(ShapeReport& report, bool retime);
  void say(std::string line);

  const SearchSpace& space_;
  const SearchSpace& subspace_;
  MeasurementSource& source_;
  Journal& journal_;
  const SweepOptions& options_;
  Plan plan_;
  std::uint64_t seed_;
  std::mt19937_64 rng_;
  SweepProgress progress_;
  /// The next shape, planned and its first candidates prepared while the
  /// shape before it was still being measured (prepare_ahead).
  std::unique_ptr<ShapeRun> ahead_;
  /// When the last shape ended: a shape prepared ahead counts its wall time
  /// (and its time budget) from there, so that the shapes' walls add up to
  /// the sweep's.
  std::optional<Clock::time_point> last_end_;
};

void Sweep::say(std::string line) {
  if (!options_.progress) return;
  progress_.line = std::move(line);
  options_.progress(progress_);
}

// Given configs are one fixed list, split like a sequence that ignores
// measurements.
bool Sweep::splits_configs(StrategyKind kind) const {
  return options_.shard && (options_.given || shard_split(kind) == ShardSplit::configs);
}

/// The budget a strategy is told: what auto chooses by.
StrategyContext Sweep::strategy_context() const {
  StrategyContext context;
  context.max_evals = options_.max_evals;
  context.time_limited = options_.time_budget.has_value();
  return context;
}

/// What the sweep's strategy is at `shape` (auto chooses per shape), which
/// every shard works out alike, so that they agree on how to split it.
StrategyKind Sweep::kind_at(const Shape& shape) const {
  return resolve_strategy(options_.strategy, subspace_.count(shape), strategy_context());
}

bool Sweep::takes_shape(std::size_t shape_index) const {
  if (!options_.shard) return true;
  const bool split = options_.given ? splits_configs(options_.strategy)
                                    : splits_configs(kind_at(options_.shapes[shape_index]));
  return split || shard_owns_shape(*options_.shard, shape_index);
}

std::unique_ptr<Sweep::ShapeRun> Sweep::open_run(std::size_t shape_index) {
  auto run = std::make_unique<ShapeRun>();
  run->shape = options_.shapes[shape_index];
  run->index = shape_index;
  run->start = now();
  plan_shape(*run);
  run->earlier = journal_.earlier(run->report.shape);
  return run;
}

ShapeReport Sweep::run_shape(std::size_t shape_index, std::size_t following) {
  std::unique_ptr<ShapeRun> owned =
      ahead_ && ahead_->index == shape_index ? std::move(ahead_) : open_run(shape_index);
  ahead_.reset();
  ShapeRun& run = *owned;
  if (last_end_ && run.start < *last_end_) run.start = *last_end_;
  run.current = true;
  refill(run, source_.lookahead());
  announce(run);
  if (run.in_flight.empty()) {
    last_end_ = now();
    return std::move(run.report);
  }

  // A resumed sweep cuts against the best its database already holds.
  Cutoff start{0.0, options_.cutoff_factor};
  if (std::optional<double> best = journal_.earlier_best_us(run.report.shape, options_.timing.cache)) {
    start.best_us = *best;
    run.report.cutoff_start_us = *best;
  }
  source_.begin_shape(run.shape, start, rng_, run.report);
  while (!run.in_flight.empty()) {
    if (stopping()) {
      // The prepared candidates (this shape's and the next's) are dropped:
      // an interrupt should not wait for a lookahead's worth of slow
      // candidates.
      run.report.interrupted = true;
      break;
    }
    measure_next(run);
    refill(run, source_.lookahead());  // a stop request ends its proposals and marks the shape interrupted
    prepare_ahead(run, following);
  }
  retime_fastest(run.report, !run.report.interrupted);
  journal_.look_up_best(run.report);
  const Clock::time_point end = now();
  run.report.wall_s = std::chrono::duration<double>(end - run.start).count();
  last_end_ = end;
  return std::move(run.report);
}

// What to evaluate at the shape: the strategy's search (the default config
// first, when the plan says so) within --max-evals, or the given configs.
void Sweep::plan_shape(ShapeRun& run) {
  run.report.shape = space_.shape_string(run.shape);
  run.report.valid_configs = subspace_.count(run.shape);
  run.budget = options_.max_evals.value_or(run.report.valid_configs);
  run.default_offered = !plan_.default_first || options_.given;
  if (!options_.given) {
    StrategyContext context = strategy_context();
    run.kind = resolve_strategy(options_.strategy, run.report.valid_configs, context);
    run.report.strategy = to_string(run.kind);
    if (options_.warm_start && run.kind.entry().warm_starts) {
      const std::vector<strategies::TunedText> tuned = journal_.tuned_elsewhere(run.report.shape);
      strategies::WarmStart warm = strategies::warm_start(subspace_, run.shape, tuned);
      run.report.warm_start = warm.configs.size();
      run.report.warm_start_repaired = warm.repaired;
      context.warm_start = std::move(warm.configs);
      add_costly_values(run, tuned, context);
    }
    run.strategy = make_strategy(run.kind, subspace_, run.shape, strategy_seed(seed_, run.report.shape), {}, context);
    return;
  }
  const std::vector<Config> given = options_.given->at(run.shape);
  run.strategy = given_configs_strategy(space_, subspace_, run.shape, given, run.report.skipped);
  run.budget = std::min<std::uint64_t>(run.budget, given.size() - run.report.skipped.size());
}

// The values that the nearest shapes measured in this kernel's version found
// slow as a whole (strategies::costly_values; at most kCostlyShapes shapes
// read): the strategy leaves them out of its spread-out first configs, and
// proposes each one's fastest config there after the warm start's.
void Sweep::add_costly_values(ShapeRun& run, const std::vector<strategies::TunedText>& tuned,
                              StrategyContext& context) {
  std::vector<strategies::MeasuredShape> measured;
  for (std::string& other : strategies::tuned_shapes_nearest_first(subspace_, run.shape, tuned)) {
    if (measured.size() >= kCostlyShapes) break;
    EarlierResults results = journal_.earlier(other);
    measured.push_back({std::move(other), std::move(results)});
  }
  const strategies::CostlyValues costly = strategies::costly_values(subspace_, run.shape, measured);
  const auto& parameters = space_.parameters();
  for (const strategies::CostlyValue& c : costly.values)
    run.report.costly_values.push_back(fmt::format("{}={} ({:.0f}x at {})", parameters[c.parameter].name,
                                                   parameters[c.parameter].text[c.value], c.median_ratio,
                                                   c.shape));
  run.report.warm_start += strategies::add_costly_values(costly, context);
}

// The next config to evaluate: the space's default first (when the plan says
// so), then the strategy's proposals.  A config committed by an earlier run
// is not evaluated again; its result is told to the strategy instead (resume).
// A shard skips the positions of the sequence that other shards evaluate
// (tuner/shard.h); the strategies whose sequence is split never look at the
// measurements, so they need not be told.  Once the time budget is spent,
// nothing more is proposed.
std::optional<Config> Sweep::next_config(ShapeRun& run) {
  ShapeReport& report = run.report;
  while (run.position < run.budget) {
    if (time_spent(run)) return std::nullopt;
    if (stopping()) {
      run.report.interrupted = true;
      return std::nullopt;
    }
    std::optional<Config> config;
    if (!run.default_offered) {
      run.default_offered = true;
      if (!subspace_.check(space_.default_config(), run.shape)) continue;
      config = space_.default_config();
    } else {
      config = run.strategy->next();
    }
    if (!config) return std::nullopt;
    if (!run.proposed.insert(*config).second) continue;
    const std::uint64_t position = run.position++;
    if (splits_configs(run.kind) && !shard_owns_candidate(*options_.shard, run.index, position)) {
      ++report.other_shards;
      continue;
    }
    ++report.planned;
    auto found = run.earlier.find(space_.config_string(*config));
    if (found != run.earlier.end()) {
      ++report.already_measured;
      run.strategy->observe(*config, found->second);
      continue;
    }
    return config;
  }
  return std::nullopt;
}

// A shape prepared ahead starts its clock when it becomes current.
bool Sweep::time_spent(ShapeRun& run) const {
  if (!options_.time_budget || !run.current || now() - run.start < options_.time_budget->limit) return false;
  run.report.time_budget_spent = true;
  return true;
}

// Prepares the run's next proposals until `room` candidates are in flight.
void Sweep::refill(ShapeRun& run, std::size_t room) {
  while (run.in_flight.size() < room) {
    std::optional<Config> config = next_config(run);
    if (!config) {
      run.proposals_done = true;
      return;
    }
    if (!run.source_told) {
      source_.begin_preparing(run.shape);
      run.source_told = true;
    }
    source_.prepare(*config, run.shape);
    run.in_flight.push_back(std::move(*config));
  }
}

// Once `run` has nothing more to propose, the room its draining lookahead
// leaves goes to the next shape (`following`), where the source allows it:
// that shape is planned now (its warm start sees the results in so far) and
// its first candidates compile while this shape's last are measured and the
// fastest re-timed, instead of after.  Its measurements start only with its
// own begin_shape, in run_shape.
// The same shape again is not prepared ahead: it must see every result of
// this run as already measured.
void Sweep::prepare_ahead(const ShapeRun& run, std::size_t following) {
  if (following == last_shape || !run.proposals_done || !source_.prepares_across_shapes() || stopping() ||
      options_.shapes[following] == run.shape)
    return;
  const std::size_t lookahead = source_.lookahead();
  if (run.in_flight.size() >= lookahead) return;
  if (!ahead_) ahead_ = open_run(following);
  const std::size_t before = ahead_->in_flight.size();
  refill(*ahead_, lookahead - run.in_flight.size());
  ahead_->report.prepared_ahead += ahead_->in_flight.size() - before;
}

// Configs found already measured while refilling shrink what is left.
std::uint64_t Sweep::expected_total(const ShapeRun& run) const {
  const std::uint64_t positions = std::min<std::uint64_t>(run.budget, run.report.valid_configs);
  const std::uint64_t ours =
      splits_configs(run.kind) ? shard_candidate_count(*options_.shard, run.index, positions) : positions;
  return ours - std::min(run.report.already_measured, ours);
}

void Sweep::announce(const ShapeRun& run) {
  progress_ = SweepProgress{};
  progress_.shape = run.report.shape;
  progress_.total = expected_total(run);
  std::string strategy = fmt::format("given configs ({} skipped: invalid here)", run.report.skipped.size());
  if (!options_.given) {
    strategy = fmt::format("strategy {}", to_string(run.kind));
    if (run.kind != options_.strategy) strategy += fmt::format(" (chosen by {})", to_string(options_.strategy));
    if (run.report.warm_start > 0)
      strategy += fmt::format(", warm start from {} configs tuned at other shapes ({} repaired)",
                              run.report.warm_start, run.report.warm_start_repaired);
    if (!run.report.costly_values.empty())
      strategy += fmt::format(", spread without {} (median over the fastest there), their fastest there proposed",
                              fmt::join(run.report.costly_values, ", "));
  }
  say(fmt::format("{}: {} valid configs, {}, budget {}{}, {} already in the database", run.report.shape,
                  run.report.valid_configs, strategy, run.budget,
                  options_.time_budget ? fmt::format(" or {}", to_string(*options_.time_budget)) : std::string(),
                  run.report.already_measured));
}

void Sweep::measure_next(ShapeRun& run) {
  Config config = std::move(run.in_flight.front());
  run.in_flight.pop_front();
  CandidateReport c = source_.measure(config, run.shape, run.report);
  c.config = space_.config_string(config);
  journal_.record(run.report.shape, c);
  run.strategy->observe(config, c.outcome == Outcome::ok && c.timing
                                    ? std::optional<double>(c.timing->median_us)
                                    : std::nullopt);
  tally(run, config, std::move(c));
}

/// Counts a measured candidate into the shape's report and the progress.
void Sweep::tally(ShapeRun& run, const Config& config, CandidateReport c) {
  ShapeReport& report = run.report;
  ++report.outcomes[c.outcome];
  const bool ok = c.outcome == Outcome::ok && c.timing;
  const bool cut = ok && c.timing->cut;
  if (cut) ++report.cut;
  ++progress_.done;
  progress_.total = std::max(progress_.done, expected_total(run));
  if (c.outcome != Outcome::ok) ++progress_.failures;
  if (ok && (!progress_.best_us || c.timing->median_us < *progress_.best_us))
    progress_.best_us = c.timing->median_us;
  progress_.elapsed_s = seconds_since(options_, run.start);
  if (config == space_.default_config()) report.default_config = c;
  say(fmt::format("[{}/{}] {} {} {}", progress_.done, progress_.total, c.config, to_string(c.outcome),
                  ok ? fmt::format("{:.2f} us{}", c.timing->median_us,
                                   cut ? fmt::format(" (timing cut after {} launches)", c.timing->count)
                                       : std::string())
                     : c.reason.substr(0, c.reason.find('\n'))));
  report.results.push_back(std::move(c));
}

// Median over the valid configs, and (with `retime`) the fastest few timed
// again, interleaved, so that drift during the sweep cannot pick the winner.
void Sweep::retime_fastest(ShapeReport& report, bool retime) {
  std::vector<std::size_t> ok;
  for (std::size_t i = 0; i < report.results.size(); ++i)
    if (report.results[i].outcome == Outcome::ok && report.results[i].timing) ok.push_back(i);
  auto median_of_result = [&](std::size_t i) { return report.results[i].timing->median_us; };
  std::sort(ok.begin(), ok.end(), [&](std::size_t a, std::size_t b) { return median_of_result(a) < median_of_result(b); });
  if (!ok.empty()) report.median_ok_us = median_of_result(ok[ok.size() / 2]);
  const std::size_t top =
      retime ? std::min<std::size_t>(ok.size(), static_cast<std::size_t>(std::max(0, options_.retime_top))) : 0;
  if (top == 0) return;
  std::vector<std::string> fastest;
  for (std::size_t k = 0; k < top; ++k) fastest.push_back(report.results[ok[k]].config);
  std::vector<std::optional<TimingStats>> retimed = source_.retime(fastest, options_.retime_rounds, report);
  for (std::size_t k = 0; k < top && k < retimed.size(); ++k) {
    if (!retimed[k]) continue;
    report.retimed.push_back({fastest[k], median_of_result(ok[k]), *retimed[k]});
  }
  std::sort(report.retimed.begin(), report.retimed.end(),
            [](const RetimedCandidate& a, const RetimedCandidate& b) { return a.retimed.median_us < b.retimed.median_us; });
}

/// Every shape of `options`, through `journal`; the run is marked failed when
/// anything throws.
SweepReport sweep_all(const SearchSpace& space, MeasurementSource& source, Journal& journal,
                      const SweepOptions& options, std::uint64_t seed, Plan plan, Clock::time_point start) {
  SweepReport report;
  report.run_id = journal.run_id();
  report.compile_threads = source.compile_threads();
  report.compile_processes = source.compiles_in_processes();
  Sweep sweep(space, source, journal, options, seed, plan);
  std::vector<std::size_t> taken;
  for (std::size_t i = 0; i < options.shapes.size(); ++i)
    if (sweep.takes_shape(i)) taken.push_back(i);
  try {
    for (std::size_t k = 0; k < taken.size() && !report.interrupted; ++k) {
      if (sweep.stopping()) {
        report.interrupted = true;
        break;
      }
      const std::size_t following = k + 1 < taken.size() ? taken[k + 1] : Sweep::last_shape;
      report.shapes.push_back(sweep.run_shape(taken[k], following));
      report.interrupted = report.shapes.back().interrupted;
    }
  } catch (...) {
    journal.finish(RunStatus::failed);
    throw;
  }
  journal.finish(report.interrupted ? RunStatus::interrupted : RunStatus::finished);
  source.add_totals(report);
  report.wall_s = seconds_since(options, start);
  return report;
}

void check_cutoff(const SweepOptions& options) {
  if (!(options.cutoff_factor == 0 || options.cutoff_factor > 1))
    throw InputError(fmt::format("cutoff factor {:g}: must be 0 (no early cut) or above 1, so that a "
                                 "candidate faster than the best is never cut",
                                 options.cutoff_factor));
}

}  // namespace

SweepReport run_sweep(const SearchSpace& space, const std::filesystem::path& space_file,
                      const std::filesystem::path& database, MeasurementSource& source,
                      const DeviceInfo& device, const SweepOptions& options) {
  const auto start = now(options);
  check_cutoff(options);
  const std::uint64_t seed = options.seed ? *options.seed : std::random_device{}();
  std::unique_ptr<Journal> journal = store_journal(database, space, space_file, device, options, source, seed);
  SweepReport report = sweep_all(space, source, *journal, options, seed, Plan{}, start);
  report.device = device;
  return report;
}

SweepReport run_sweep(const SearchSpace& space, const std::filesystem::path& space_file,
                      const std::filesystem::path& database, Worker* worker,
                      const DeviceInfo& device, const SweepOptions& options) {
  if (!worker && !options.replay)
    throw EnvironmentError("run_sweep: neither a GPU worker nor replay data to evaluate with");
  check_cutoff(options);  // before a source touches the database
  std::unique_ptr<MeasurementSource> source =
      options.replay ? replayed_measurements(*options.replay, options.replay_source)
                     : gpu_measurements(space, space_file, {database, options.arch, options.jobs, options.compile_in},
                                        options.timing, *worker);
  return run_sweep(space, space_file, database, *source, device, options);
}

SweepReport run_compile_sweep(const SearchSpace& space, const std::filesystem::path& database,
                              const SweepOptions& options) {
  const auto start = now(options);
  SweepOptions every_config = options;
  // Every config in enumeration order, or with --max-evals a uniform random
  // subset; both strategies draw lazily, so memory stays bounded.
  every_config.strategy = parse_strategy_kind(options.max_evals ? "random" : "brute_force");
  std::unique_ptr<MeasurementSource> source = compiled_only(space, {database, options.arch, options.jobs, options.compile_in});
  std::unique_ptr<Journal> journal = no_journal();
  return sweep_all(space, *source, *journal, every_config, 0, Plan{.default_first = false}, start);
}

WorkerTotals worker_totals(const WorkerLoad& load, double wall_s) {
  WorkerTotals t{load, std::nullopt, std::nullopt};
  if (wall_s > 0) {
    t.configs_per_s = static_cast<double>(load.evaluated) / wall_s;
    t.busy_fraction = load.busy_s / wall_s;
  }
  return t;
}

SweepTotals sweep_totals(const SweepReport& report) {
  SweepTotals t;
  t.shapes = report.shapes.size();
  for (const ShapeReport& s : report.shapes) {
    t.evaluated += s.results.size();
    t.shared_binaries += s.shared_binaries;
    t.cut += static_cast<std::uint64_t>(std::max(0, s.cut));
    t.gpu_s += s.gpu_s;
    t.compile_wait_s += s.compile_wait_s;
    t.setup_s += s.setup_s;
    t.nvrtc_s += s.nvrtc_s;
  }
  t.wall_s = report.wall_s;
  t.workers = std::max<unsigned>(1, static_cast<unsigned>(report.workers.size()));
  const double worker_s = t.workers * t.wall_s;
  t.other_s = std::max(0.0, worker_s - t.gpu_s - t.compile_wait_s - t.setup_s);
  t.compile_threads = report.compile_threads;
  const auto n = static_cast<double>(t.evaluated);
  if (t.evaluated > 0 && t.wall_s > 0) t.configs_per_s = n / t.wall_s;
  if (t.evaluated > 0 && t.gpu_s > 0) t.gpu_limit_configs_per_s = n / t.gpu_s;
  if (t.evaluated > 0 && t.nvrtc_s > 0 && t.compile_threads > 0)
    t.compile_limit_configs_per_s = n / (t.nvrtc_s / t.compile_threads);
  if (t.wall_s > 0) t.gpu_busy_fraction = t.gpu_s / worker_s;
  for (const WorkerLoad& load : report.workers) t.per_worker.push_back(worker_totals(load, t.wall_s));
  return t;
}

}  // namespace mlatune
