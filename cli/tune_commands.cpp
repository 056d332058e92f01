// mlatune tune: compile (and, with a GPU, later time) every valid config of a
// search space for one or more shapes.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <deque>
#include <random>
#include <future>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/store.h"
#include "cli/commands.h"
#include "cli/option_checks.h"
#include "tuner/compile_pool.h"
#include "core/compiler.h"
#include "core/device.h"
#include "core/error.h"
#include "tuner/binary_cache.h"
#include "tuner/replay.h"
#include "core/space.h"
#include "tuner/strategy.h"
#include "tuner/sweep.h"
#include "tuner/timing.h"
#include "tuner/worker.h"

namespace mlatune::cli {
namespace {

struct TuneOptions {
  std::string space_file;
  std::vector<std::string> shapes;
  bool compile_only = false;
  std::string arch;
  bool json = false;
  bool quiet = false;
  unsigned jobs = 0;
  std::string db;
  std::optional<std::uint64_t> max_evals;
  std::optional<std::uint64_t> seed;
  std::string cache = "cold";
  std::string strategy = "brute_force";
  bool misses = false;
  std::string replay;
  double budget_ms = TimingOptions{}.budget_ms;
  double cutoff = SweepOptions{}.cutoff_factor;
  int cut_after = TimingOptions{}.cut_min_samples;
  std::vector<std::string> where;  // extra constraints on the candidates
  bool strategy_given = false;     // --strategy was on the command line
};

/// One config's compilation, as the report shows it.
struct Row {
  std::string config;
  std::shared_future<CompileResult> result;
};

struct ShapeWork {
  Shape shape;
  std::string shape_text;
};

struct Totals {
  std::uint64_t configs = 0;
  std::uint64_t compiled = 0;
  std::uint64_t failed = 0;
  std::uint64_t spilling = 0;
  double compile_seconds = 0;  // sum over configs (CPU time of the compilations)
};

std::string first_error_line(const std::string& log) {
  std::size_t at = log.find("error");
  std::size_t start = at == std::string::npos ? 0 : log.rfind('\n', at);
  start = (start == std::string::npos || at == std::string::npos) ? 0 : start + 1;
  std::size_t end = log.find('\n', start);
  std::string line = log.substr(start, end == std::string::npos ? std::string::npos : end - start);
  return line.empty() ? std::string("(empty log)") : line;
}

std::string status_of(const CompileResult& result) {
  if (!result.ok()) return "FAILED: " + first_error_line(result.log());
  return result.binary().usage.spills() ? "spills" : "ok";
}

nlohmann::json row_json(const Row& row, const CompileResult& result) {
  nlohmann::json j;
  j["config"] = row.config;
  j["status"] = result.ok() ? (result.binary().usage.spills() ? "spills" : "ok") : "failed";
  j["compile_ms"] = result.compile_seconds() * 1e3;
  j["key"] = result.key().hash;
  j["options"] = result.options();
  if (result.ok()) {
    const ResourceUsage& u = result.binary().usage;
    j["registers"] = u.registers;
    j["spill_store_bytes"] = u.spill_store_bytes;
    j["spill_load_bytes"] = u.spill_load_bytes;
    j["stack_frame_bytes"] = u.stack_frame_bytes;
    j["shared_bytes"] = u.shared_bytes;
    j["barriers"] = u.barriers;
    j["cubin_bytes"] = result.binary().cubin.size();
  } else {
    j["error"] = result.failure().message;
  }
  return j;
}

// Wide enough for any config of the space, so that rows printed as they
// complete line up without holding them all to measure them first.
std::size_t config_column_width(const SearchSpace& space) {
  std::size_t width = 0;
  for (const Parameter& p : space.parameters()) {
    std::size_t longest = 0;
    for (const std::string& text : p.text) longest = std::max(longest, text.size());
    width += (width ? 1 : 0) + p.name.size() + 1 + longest;
  }
  return std::max<std::size_t>(width, 6);
}

void print_table_header(std::size_t width) {
  fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8}  {}\n", "config", width, "regs",
             "spill st", "spill ld", "stack", "smem", "compile", "status");
  fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8}\n", "", width, "", "bytes",
             "bytes", "bytes", "bytes", "ms");
}

void count_row(const CompileResult& result, Totals& totals) {
  ++totals.configs;
  totals.compile_seconds += result.compile_seconds();
  if (!result.ok()) {
    ++totals.failed;
    return;
  }
  ++totals.compiled;
  if (result.binary().usage.spills()) ++totals.spilling;
}

void print_row(const Row& row, const CompileResult& result, std::size_t width) {
  if (result.ok()) {
    const ResourceUsage& u = result.binary().usage;
    fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8.0f}  {}\n", row.config, width,
               u.registers, u.spill_store_bytes, u.spill_load_bytes, u.stack_frame_bytes,
               u.shared_bytes, result.compile_seconds() * 1e3, status_of(result));
  } else {
    fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8.0f}  {}\n", row.config, width, "-",
               "-", "-", "-", "-", result.compile_seconds() * 1e3, status_of(result));
  }
}

std::string percent(int n, std::size_t total) {
  return total ? fmt::format("{:.0f}%", 100.0 * n / static_cast<double>(total)) : "-";
}

nlohmann::json timing_json(const TimingStats& t) {
  return {{"median_us", t.median_us}, {"min_us", t.min_us}, {"p90_us", t.p90_us},
          {"spread", t.spread},       {"count", t.count},   {"stable", t.stable},
          {"cut", t.cut},             {"method", t.method}};
}

nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

std::string rate_text(const std::optional<double>& rate) {
  return rate ? fmt::format("{:.1f} configs/s", *rate) : std::string("- configs/s");
}

/// Where a sweep's time went, as the --json summary gives it.
nlohmann::json totals_json(const SweepTotals& t) {
  return {{"evaluated", t.evaluated},
          {"cut", t.cut},
          {"wall_seconds", t.wall_s},
          {"configs_per_second", optional_json(t.configs_per_s)},
          {"gpu_seconds", t.gpu_s},
          {"gpu_busy_fraction", optional_json(t.gpu_busy_fraction)},
          {"compile_wait_seconds", t.compile_wait_s},
          {"setup_seconds", t.setup_s},
          {"other_seconds", t.other_s},
          {"nvrtc_seconds", t.nvrtc_s},
          {"compile_threads", t.compile_threads},
          {"gpu_limit_configs_per_second", optional_json(t.gpu_limit_configs_per_s)},
          {"compile_limit_configs_per_second", optional_json(t.compile_limit_configs_per_s)}};
}

bool is_run_id(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::string replay_name(const std::string& replay, const std::filesystem::path& database) {
  if (is_run_id(replay)) return fmt::format("run {} of {}", replay, database.filename().string());
  return std::filesystem::path(replay).filename().string();
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
  auto quoted = [](const std::string& field) {
    std::string out = "\"";
    for (char c : field) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
  };
  std::string csv = "shape,config,outcome,median_us\n";
  for (const MeasurementRecord& r : store.measurements({space.kernel_name(), ""})) {
    if (r.run_uuid != uuid) continue;
    const Measurement& m = r.measurement;
    csv += fmt::format("{},{},{},{}\n", quoted(m.shape), quoted(m.config), to_string(m.outcome),
                       m.timing ? fmt::format("{}", m.timing->median_us) : std::string());
  }
  return ReplayData::parse(csv, replay_name(replay, database), space);
}

/// Progress on stderr: on a terminal one bar, redrawn at most ten times a
/// second (done/total, failures, best so far, rate, ETA); elsewhere one plain
/// line per event.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool terminal) : terminal_(terminal) {}

  void update(const SweepProgress& p) {
    if (!terminal_) {
      fmt::print(stderr, "{}\n", p.line);
      return;
    }
    auto now = std::chrono::steady_clock::now();
    bool last = p.done >= p.total;
    if (p.shape != shape_) {
      finish();
      shape_ = p.shape;
    } else if (!last && now - drawn_ < std::chrono::milliseconds(100)) {
      return;
    }
    drawn_ = now;
    double rate = p.elapsed_s > 0 ? static_cast<double>(p.done) / p.elapsed_s : 0.0;
    double eta = rate > 0 ? static_cast<double>(p.total - std::min(p.done, p.total)) / rate : 0.0;
    constexpr int width = 30;
    int filled = p.total ? static_cast<int>(width * std::min(1.0, static_cast<double>(p.done) / p.total)) : 0;
    fmt::print(stderr, "\r{} [{}{}] {}/{}  failures {}  best {}  {:.1f}/s  ETA {:d}:{:02d} \x1b[K", shape_,
               std::string(filled, '#'), std::string(width - filled, '.'), p.done, p.total, p.failures,
               p.best_us ? fmt::format("{:.2f} us", *p.best_us) : std::string("-"), rate,
               static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
    open_ = true;
  }

  void finish() {
    if (open_) fmt::print(stderr, "\n");
    open_ = false;
  }

 private:
  bool terminal_;
  bool open_ = false;
  std::string shape_;
  std::chrono::steady_clock::time_point drawn_{};
};

/// The space with `--where` constraints added, or nothing when there are none.
std::optional<SearchSpace> restricted_space(const SearchSpace& space, const TuneOptions& options) {
  if (options.where.empty()) return std::nullopt;
  try {
    return space.restrict(options.where);
  } catch (const InputError& error) {
    throw InputError("--where " + error.message());
  }
}

void run_sweep_and_report(const SearchSpace& space, const TuneOptions& options,
                          const std::vector<ShapeWork>& work, Worker* worker, const DeviceInfo& device,
                          const std::string& arch, const std::filesystem::path& database) {
  SweepOptions sweep;
  const std::optional<SearchSpace> candidates = restricted_space(space, options);
  if (candidates) sweep.candidates = &*candidates;
  sweep.strategy = parse_strategy_kind(options.strategy);
  std::optional<ReplayData> replay;
  if (!options.replay.empty()) {
    replay = load_replay(options.replay, database, space);
    sweep.replay = &*replay;
    sweep.replay_source = replay_name(options.replay, database);
  }
  for (const ShapeWork& w : work) sweep.shapes.push_back(w.shape);
  sweep.arch = arch;
  sweep.jobs = options.jobs;
  sweep.max_evals = options.max_evals;
  sweep.seed = options.seed;
  sweep.timing.cache = parse_cache_mode(options.cache).value_or(CacheMode::cold);
  sweep.timing.budget_ms = options.budget_ms;
  sweep.cutoff_factor = options.cutoff;
  sweep.timing.cut_min_samples = options.cut_after;
  std::optional<ProgressPrinter> printer;
  if (!options.quiet && !options.json) {
    printer.emplace(::isatty(STDERR_FILENO) == 1);
    sweep.progress = [&printer](const SweepProgress& p) { printer->update(p); };
  }
  fmt::print(stderr, "mlatune: tuning {} on {} ({}, {} SMs) into {}\n", space.kernel_name(),
             device.name, device.arch, device.sm_count, database.string());
  SweepReport report = run_sweep(space, options.space_file, database, worker, device, sweep);
  if (printer) printer->finish();
  const char* unit = replay ? "us (replayed)" : "us";
  const SweepTotals totals = sweep_totals(report);

  if (options.json) {
    nlohmann::json out;
    out["kernel"] = space.kernel_name();
    out["device"] = {{"name", device.name}, {"arch", device.arch}, {"sm_count", device.sm_count}};
    out["database"] = database.string();
    out["run_id"] = report.run_id;
    out["wall_seconds"] = report.wall_s;
    out["nvrtc_runs"] = report.nvrtc_runs;
    out["binaries_reused"] = report.binaries_reused;
    out["worker_replacements"] = report.worker_replacements;
    out["cutoff_factor"] = options.cutoff;
    out["cut_after"] = options.cut_after;
    out["budget_ms"] = options.budget_ms;
    out["totals"] = totals_json(totals);
    nlohmann::json shapes = nlohmann::json::array();
    for (const ShapeReport& s : report.shapes) {
      nlohmann::json j;
      j["shape"] = s.shape;
      j["valid_configs"] = s.valid_configs;
      j["planned"] = s.planned;
      j["already_measured"] = s.already_measured;
      j["evaluated"] = s.results.size();
      nlohmann::json counts = nlohmann::json::object();
      for (const auto& [outcome, n] : s.outcomes) counts[std::string(to_string(outcome))] = n;
      j["outcomes"] = counts;
      nlohmann::json fastest = nlohmann::json::array();
      for (const RetimedCandidate& r : s.retimed)
        fastest.push_back({{"config", r.config}, {"sweep_median_us", r.first_median_us},
                           {"retimed", timing_json(r.retimed)}});
      j["fastest"] = fastest;
      if (s.best_config) j["best"] = {{"config", *s.best_config}, {"median_us", *s.best_us}};
      if (s.default_config && s.default_config->timing)
        j["default_median_us"] = s.default_config->timing->median_us;
      if (s.median_ok_us) j["median_ok_us"] = *s.median_ok_us;
      j["reference_us"] = s.workload.reference_us;
      j["floor"] = timing_json(s.workload.floor);
      j["seed"] = s.workload.seed;
      j["wall_seconds"] = s.wall_s;
      j["gpu_seconds"] = s.gpu_s;
      j["compile_wait_seconds"] = s.compile_wait_s;
      j["setup_seconds"] = s.setup_s;
      j["nvrtc_seconds"] = s.nvrtc_s;
      j["cut"] = s.cut;
      j["configs_per_second"] =
          s.wall_s > 0 ? nlohmann::json(static_cast<double>(s.results.size()) / s.wall_s) : nlohmann::json(nullptr);
      shapes.push_back(std::move(j));
    }
    out["shapes"] = std::move(shapes);
    fmt::print("{}\n", out.dump(2));
    return;
  }
  for (const ShapeReport& s : report.shapes) {
    fmt::print("\n{} at {} on {}\n", space.kernel_name(), s.shape, device.name);
    fmt::print("  configs: {} valid, {} planned, {} already in the database, {} evaluated now\n",
               count_text(s.valid_configs), s.planned, s.already_measured, s.results.size());
    if (!s.results.empty()) {
      std::string counts;
      for (const auto& [outcome, n] : s.outcomes)
        counts += fmt::format("{}{} {} ({})", counts.empty() ? "" : ", ", to_string(outcome), n,
                              percent(n, s.results.size()));
      fmt::print("  outcomes: {}\n", counts);
      if (!replay)
        fmt::print("  reference kernel {:.1f} us; empty-kernel floor {:.2f} us ({}); input seed {}\n",
                   s.workload.reference_us, s.workload.floor.median_us, s.workload.floor.method,
                   s.workload.seed);
      double rate = s.wall_s > 0 ? static_cast<double>(s.results.size()) / s.wall_s : 0.0;
      if (replay)
        fmt::print("  time: {:.1f} s wall (replayed: no GPU, no compilation); {:.1f} configs/s\n", s.wall_s, rate);
      else
        fmt::print("  time: {:.1f} s wall, {:.1f} s on the GPU worker, {:.1f} s waiting for compilation, "
                   "{:.1f} s workload setup; {:.1f} s of NVRTC on the compile threads; {:.1f} configs/s\n",
                   s.wall_s, s.gpu_s, s.compile_wait_s, s.setup_s, s.nvrtc_s, rate);
      if (s.cut > 0)
        fmt::print("  early cut: {} of {} ok configs timed with fewer launches, their median past {:g}x "
                   "the best so far\n",
                   s.cut, s.outcomes.count(Outcome::ok) ? s.outcomes.at(Outcome::ok) : 0, options.cutoff);
    }
    if (!s.retimed.empty()) {
      fmt::print("  fastest, timed again interleaved (median us; min; p90; sweep median):\n");
      for (const RetimedCandidate& r : s.retimed)
        fmt::print("    {:9.2f}  {:9.2f}  {:9.2f}  {:9.2f}  {}\n", r.retimed.median_us,
                   r.retimed.min_us, r.retimed.p90_us, r.first_median_us, r.config);
    }
    if (s.best_config) {
      fmt::print("  best in the database: {:.2f} {}  {}\n", *s.best_us, unit, *s.best_config);
      if (s.default_config && s.default_config->timing && s.default_config->outcome == Outcome::ok)
        fmt::print("  speedup over the space's default config ({:.2f} us): {:.2f}x\n",
                   s.default_config->timing->median_us, s.default_config->timing->median_us / *s.best_us);
      else if (s.default_config)
        fmt::print("  the space's default config: {}\n", to_string(s.default_config->outcome));
      if (s.median_ok_us)
        fmt::print("  speedup over the median valid config ({:.2f} us): {:.2f}x\n", *s.median_ok_us,
                   *s.median_ok_us / *s.best_us);
    } else {
      fmt::print("  no valid config measured at this shape\n");
    }
  }
  fmt::print("\nsweep: {} configs in {:.1f} s wall: {}; {} cut early; {} worker replacements; run {} in {}\n",
             totals.evaluated, totals.wall_s, rate_text(totals.configs_per_s), totals.cut,
             report.worker_replacements, report.run_id, database.string());
  if (!replay) {
    fmt::print("  GPU worker: {:.1f} s busy ({:.0f}% of wall; alone it would allow {}); {:.1f} s waiting for "
               "compilation, {:.1f} s workload setup, {:.1f} s other\n",
               totals.gpu_s, 100.0 * totals.gpu_busy_fraction.value_or(0.0),
               rate_text(totals.gpu_limit_configs_per_s), totals.compile_wait_s, totals.setup_s,
               totals.other_s);
    fmt::print("  compilation: {:.1f} s of NVRTC in {} runs on {} threads (alone it would allow {}); "
               "{} binaries reused\n",
               totals.nvrtc_s, report.nvrtc_runs, totals.compile_threads,
               rate_text(totals.compile_limit_configs_per_s), report.binaries_reused);
  }
}

/// What compile-only works with, for every shape.
struct CompileJob {
  const SearchSpace& space;
  const SearchSpace& candidates;  // the space, restricted by --where
  const TuneOptions& options;
  const std::string& arch;
  CompilePool& pool;
};

/// Compile-only at one shape: every valid config in enumeration order, or with
/// --max-evals a uniform random subset.  Configs are drawn lazily and at most
/// a few per compile thread are in flight, each printed (or added to the
/// JSON) as soon as it is done: memory stays bounded however large the space.
void compile_shape(const CompileJob& job, const ShapeWork& work, std::uint64_t seed,
                   Totals& totals, nlohmann::json& shapes_json) {
  const TuneOptions& options = job.options;
  const std::uint64_t valid = job.candidates.count(work.shape);
  if (valid == 0) {
    std::string culprit = job.space.most_restrictive_constraint(work.shape);
    std::string message = fmt::format(
        "no valid config for {}{}", work.shape_text,
        culprit.empty() ? "" : fmt::format(" (most restrictive constraint: {})", culprit));
    if (options.json)
      shapes_json.push_back(
          {{"shape", work.shape_text}, {"configs", nlohmann::json::array()}, {"note", message}});
    else
      fmt::print("\n{}\n", message);
    return;
  }
  const bool subset = options.max_evals && *options.max_evals < valid;
  std::unique_ptr<Strategy> order =
      make_strategy(subset ? StrategyKind::random : StrategyKind::brute_force, job.candidates,
                    work.shape, seed);
  const std::size_t width = config_column_width(job.space);
  if (!options.json) {
    fmt::print("\n{} at {}: {} valid configs{}\n", job.space.kernel_name(), work.shape_text,
               count_text(valid),
               subset ? fmt::format(", compiling a uniform random {} of them", *options.max_evals)
                      : std::string());
    print_table_header(width);
  }
  nlohmann::json configs = nlohmann::json::array();
  std::optional<CompileFailure> first_failure;
  std::deque<Row> in_flight;
  auto finish_oldest = [&] {
    const Row& row = in_flight.front();
    const CompileResult& result = row.result.get();
    count_row(result, totals);
    if (!result.ok() && !first_failure) first_failure = result.failure();
    if (options.json)
      configs.push_back(row_json(row, result));
    else
      print_row(row, result, width);
    in_flight.pop_front();
  };
  const std::size_t window = 4 * std::max<std::size_t>(job.pool.threads(), 1);
  const std::uint64_t planned = subset ? *options.max_evals : valid;
  for (std::uint64_t n = 0; n < planned; ++n) {
    std::optional<Config> config = order->next();
    if (!config) break;
    CompileRequest request = compile_request(job.space, *config, work.shape, job.arch);
    std::string config_text = request.config;
    in_flight.push_back({std::move(config_text), job.pool.submit(std::move(request))});
    if (in_flight.size() >= window) finish_oldest();
  }
  while (!in_flight.empty()) finish_oldest();
  if (options.json)
    shapes_json.push_back({{"shape", work.shape_text}, {"configs", std::move(configs)}});
  else if (first_failure)
    fmt::print(stderr, "\nfirst compile failure at {}:\n{}\n", work.shape_text,
               first_failure->message);
}

// A strategy picks what to time next from what it has timed; compiling
// measures nothing, so it would be silently ignored there.
const char* const strategy_needs_timing =
    "a strategy chooses what to time next from the times so far, and compiling times nothing; "
    "use --max-evals N to compile a uniform random subset";

void run_tune(const TuneOptions& options) {
  if (options.compile_only && options.strategy_given && options.replay.empty())
    throw InputError(fmt::format("--strategy {} cannot be used with --compile-only: {}",
                                 options.strategy, strategy_needs_timing));
  SearchSpace space = SearchSpace::load(options.space_file);
  for (const std::string& where : options.where) {  // before anything runs or is written
    try {
      space.check_constraint(where);
    } catch (const InputError& error) {
      throw InputError("--where " + error.message());
    }
  }

  std::vector<ShapeWork> work;
  if (options.misses) {
    // The shapes the dispatcher was asked for and had no tuned entry for.
    if (!options.shapes.empty()) throw InputError("give either --misses or --shape, not both");
    std::set<std::string> seen;
    Store store = Store::open(database_path(options.db), StoreMode::read_only);
    for (const MissRecord& miss : store.misses()) {
      if (miss.kernel_name != space.kernel_name() || !seen.insert(miss.shape).second) continue;
      Shape shape = space.parse_shape(miss.shape);
      work.push_back({shape, space.shape_string(shape)});
    }
    if (work.empty()) {
      fmt::print("no untuned shapes of {} were asked for at run time (no misses in {})\n",
                 space.kernel_name(), database_path(options.db).string());
      return;
    }
  } else if (options.shapes.empty()) {
    for (const Shape& shape : space.default_shapes())
      work.push_back({shape, space.shape_string(shape)});
  } else {
    for (const std::string& text : options.shapes) {
      Shape shape = shape_option(space, "--shape", text);
      work.push_back({shape, space.shape_string(shape)});
    }
  }
  if (work.empty())
    throw InputError(SourceLocation{space.file_name()},
                     "the space has no default shapes; give one with --shape");

  // The tuner never initializes CUDA itself: a worker process is asked
  // whether it can use a GPU (a crashing candidate can only take it down).
  std::string why_no_gpu;
  std::optional<DeviceInfo> device;
  std::vector<std::string> notes;
  std::optional<Worker> worker;
  if (options.replay.empty() && (!options.compile_only || options.arch.empty())) {
    worker.emplace();
    DeviceReport report = worker->probe_device();
    if (report.usable)
      device = report.device.info();
    else
      why_no_gpu = report.reason;
  }
  std::string arch;
  if (!options.arch.empty()) {
    arch = parse_architecture(options.arch);
  } else if (device) {
    arch = parse_architecture(device->arch);
  } else {
    arch = "sm_90";
    if (options.compile_only)
      notes.push_back(fmt::format("no GPU found ({}); compiling for sm_90 (choose with --arch)",
                                  why_no_gpu));
  }
  const std::filesystem::path database = database_path(options.db);
  if (!options.replay.empty()) {
    // Measurements come from a recorded sweep: no GPU, no compilation.
    DeviceInfo replayed;
    replayed.name = "replay of " + replay_name(options.replay, database);
    replayed.arch = arch;
    run_sweep_and_report(space, options, work, nullptr, replayed, arch, database);
    return;
  }
  if (!options.compile_only) {
    if (device) {
      if (device->arch != arch)
        throw InputError(fmt::format("--arch {} does not match the GPU ({}, {}); timing needs the GPU's "
                                     "architecture (use --compile-only to compile for another one)",
                                     arch, device->name, device->arch));
      run_sweep_and_report(space, options, work, &*worker, *device, arch, database);
      return;
    }
    if (options.strategy_given)
      throw EnvironmentError(fmt::format("no GPU present ({}), so nothing can be timed: --strategy "
                                         "{} needs timing ({})",
                                         why_no_gpu, options.strategy, strategy_needs_timing));
    notes.push_back(fmt::format(
        "no GPU present ({}): compiling {} for {} only; nothing is timed", why_no_gpu,
        options.max_evals ? fmt::format("at most {} candidates a shape", *options.max_evals)
                          : std::string("every candidate"),
        arch));
  }
  for (const std::string& note : notes) fmt::print(stderr, "mlatune: {}\n", note);

  // Compiled binaries go into the database, so that a later sweep on a GPU
  // (or the dispatcher) loads them instead of compiling again.
  Compiler compiler;
  StoreBinaryCache binary_cache(database, space.kernel_name(), space.template_hash());
  CompilePool pool(compiler, options.jobs, binary_cache.hooks());
  auto start = std::chrono::steady_clock::now();
  const std::optional<SearchSpace> restricted = restricted_space(space, options);
  const CompileJob job{space, restricted ? *restricted : space, options, arch, pool};
  std::mt19937_64 rng(options.seed ? *options.seed : std::random_device{}());
  Totals totals;
  nlohmann::json shapes_json = nlohmann::json::array();
  for (const ShapeWork& shape_work : work) compile_shape(job, shape_work, rng(), totals, shapes_json);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CompilePoolStats stats = pool.stats();
  double rate = wall > 0 ? static_cast<double>(totals.configs) / wall : 0.0;

  if (options.json) {
    nlohmann::json out;
    out["space"] = space.file_name();
    out["kernel"] = space.kernel_name();
    out["arch"] = arch;
    out["nvrtc"] = compiler.version();
    out["device"] = device ? nlohmann::json{{"name", device->name}, {"arch", device->arch},
                                            {"sm_count", device->sm_count},
                                            {"memory_bytes", device->memory_bytes},
                                            {"l2_bytes", device->l2_bytes},
                                            {"driver_version", device->driver_version}}
                           : nlohmann::json(nullptr);
    if (!device) out["no_device_reason"] = why_no_gpu;
    out["notes"] = notes;
    out["timed"] = false;
    out["shapes"] = std::move(shapes_json);
    out["totals"] = {{"configs", totals.configs},
                     {"compiled", totals.compiled},
                     {"failed", totals.failed},
                     {"spilling", totals.spilling},
                     {"nvrtc_runs", stats.compiled},
                     {"reused", stats.memory_hits + stats.external_hits},
                     {"database", database.string()},
                     {"threads", pool.threads()},
                     {"compile_seconds", totals.compile_seconds},
                     {"wall_seconds", wall},
                     {"configs_per_second", rate}};
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print(
        "\ntotal: {} configs for {} ({} NVRTC runs, {} reused), {} compiled, {} failed, {} "
        "spilling\n"
        "time: {:.2f} s wall on {} threads ({:.2f} s of compilation); {:.1f} configs/s\n"
        "binaries stored in {}\n",
        totals.configs, arch, stats.compiled, stats.memory_hits + stats.external_hits,
        totals.compiled, totals.failed, totals.spilling, wall, pool.threads(),
        totals.compile_seconds, rate, database.string());
  }
  if (totals.configs > 0 && totals.compiled == 0)
    throw InputError(SourceLocation{space.kernel().path.string()},
                     "no config compiled; the first failure is shown above");
}

// ---- option checks: every option is checked when given, used or not --------

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
  tune->add_flag("--compile-only", options->compile_only,
                 "compile every valid config and report resources; time nothing");
  tune->add_option("--arch", options->arch,
                   "GPU architecture to compile for, e.g. sm_90 (default: the GPU's, else sm_90)");
  tune->add_flag("--json", options->json, "print the report as JSON");
  tune->add_flag("--quiet,-q", options->quiet, "no progress lines");
  tune->add_option("--db", options->db,
                   "database file (default: $MLATUNE_DB, else ./mlatune.db)");
  tune->add_option("--max-evals", options->max_evals,
                   "per shape: evaluate a uniform random subset of this many valid configs")
      ->check(whole_number(1, UINT64_MAX));
  tune->add_option("--seed", options->seed, "seed for inputs and sampling (default: fresh)")
      ->check(whole_number(0, UINT64_MAX));
  tune->add_option("--where", options->where,
                   "only configs that also satisfy this constraint, e.g. \"ALGORITHM == tf32x3\" "
                   "(repeatable); results are stored under the space itself");
  tune->add_flag("--misses", options->misses,
                 "tune the shapes the runtime dispatcher was asked for but had no tuned entry for "
                 "(recorded in the database)");
  CLI::Option* strategy = tune->add_option("--strategy", options->strategy,
                   "search strategy: brute_force, random, annealing, model (default brute_force)")
      ->check(strategy_name());
  tune->add_option("--replay", options->replay,
                   "serve measurements from a recorded sweep instead of a GPU: a run id of the "
                   "database, or a CSV of shape,config,outcome,median_us (`mlatune cache export "
                   "--format csv`)");
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
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              std::size_t used = 0;
              double factor = std::stod(text, &used);
              if (used == text.size() && (factor == 0 || (factor > 1 && std::isfinite(factor))))
                return {};
            } catch (const std::exception&) {
              // Not a number: the message below.
            }
            return "must be 0 (no early cut) or a finite number above 1, so that a candidate faster than "
                   "the best is never cut";
          },
          "0 or above 1"));
  // Three at least: with fewer, one wild launch could decide the cut.
  tune->add_option("--cut-after", options->cut_after,
                   fmt::format("launches timed before a candidate may be cut (default {})",
                               TimingOptions{}.cut_min_samples))
      ->check(CLI::Range(3, 1000));
  tune->add_option("--jobs,-j", options->jobs, "compile threads (default: one per core)")
      ->check(whole_number(0, 1024));
  tune->callback([options, strategy] {
    options->strategy_given = strategy->count() > 0;
    run_tune(*options);
  });
}

}  // namespace mlatune::cli
