#include "cli/tune_report.h"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/config_text.h"
#include "tuner/input_kinds.h"

namespace mlatune::cli {

namespace {

/// The value of parameter `name` in a config text; empty when it names none.
std::string parameter_value(const std::string& config, const std::string& name) {
  for (auto& [n, value] : config_pairs(config))
    if (n == name) return value;
  return {};
}

}  // namespace

std::vector<KindErrorRow> kind_error_rows(const ShapeReport& shape, const std::string& by) {
  std::vector<KindErrorRow> rows;
  for (const CandidateReport& c : shape.results) {
    if (c.outcome != Outcome::ok || !c.validation || c.validation->per_kind.empty()) continue;
    const std::string group = by.empty() ? "all" : parameter_value(c.config, by);
    auto row = std::find_if(rows.begin(), rows.end(), [&](const KindErrorRow& r) { return r.group == group; });
    if (row == rows.end()) row = rows.insert(rows.end(), KindErrorRow{group, 0, {}});
    ++row->configs;
    for (const KindErrors& k : c.validation->per_kind) {
      auto worst = std::find_if(row->worst.begin(), row->worst.end(),
                                [&](const KindErrors& w) { return w.kind == k.kind; });
      if (worst == row->worst.end()) {
        row->worst.push_back(k);
      } else {
        worst->relative_l2 = std::max(worst->relative_l2, k.relative_l2);
        worst->max_abs = std::max(worst->max_abs, k.max_abs);
      }
    }
  }
  return rows;
}

namespace {

using nlohmann::json;

json kind_errors_json(const ShapeReport& s, const std::string& by) {
  json rows = json::array();
  for (const KindErrorRow& row : kind_error_rows(s, by)) {
    json kinds = json::array();
    for (const KindErrors& k : row.worst)
      kinds.push_back({{"kind", std::string(to_string(k.kind))}, {"relative_l2", k.relative_l2}, {"max_abs", k.max_abs}});
    rows.push_back({{"group", row.group}, {"configs", row.configs}, {"per_kind", std::move(kinds)}});
  }
  return rows;
}

std::string kind_errors_text(const KindErrorRow& row) {
  std::string text;
  for (const KindErrors& k : row.worst)
    text += fmt::format("{}{} {:.2e}", text.empty() ? "" : ", ", to_string(k.kind), k.relative_l2);
  return text;
}

std::string percent(int n, std::size_t total) {
  return total ? fmt::format("{:.0f}%", 100.0 * n / static_cast<double>(total)) : "-";
}

json timing_json(const TimingStats& t) {
  return {{"median_us", t.median_us}, {"min_us", t.min_us}, {"p90_us", t.p90_us},
          {"spread", t.spread},       {"count", t.count},   {"stable", t.stable},
          {"cut", t.cut},             {"method", t.method}};
}

json optional_json(const std::optional<double>& value) { return value ? json(*value) : json(nullptr); }

std::string rate_text(const std::optional<double>& rate) {
  return rate ? fmt::format("{:.1f} configs/s", *rate) : std::string("- configs/s");
}

// ", N prologue parts compiled apart for M configs" where the space compiles
// its prologue apart; empty otherwise.
std::string prologue_parts_text(const SweepReport& report) {
  if (report.prologue_parts_compiled == 0 && report.prologue_parts_reused == 0) return {};
  return fmt::format("; {} prologue part(s) compiled apart for {} config(s)", report.prologue_parts_compiled,
                     report.prologue_parts_compiled + report.prologue_parts_reused);
}

// The same counts in the JSON reports.
json prologue_parts_json(const SweepReport& report) {
  return {{"compiled", report.prologue_parts_compiled}, {"reused", report.prologue_parts_reused}};
}

/// "16 threads", and how they compiled: both summaries say it alike.
std::string compile_threads_text(unsigned threads, const SweepReport& report) {
  return fmt::format("{} threads{}", threads, report.compile_processes ? ", each with a compile process" : "");
}

double configs_per_second(const ShapeReport& s) {
  return s.wall_s > 0 ? static_cast<double>(s.results.size()) / s.wall_s : 0.0;
}

// ---- a sweep ------------------------------------------------------------------

/// Where a sweep's time went, as the --json summary gives it.
json totals_json(const SweepTotals& t) {
  return {{"evaluated", t.evaluated},
          {"shapes", t.shapes},
          {"shared_binaries", t.shared_binaries},
          {"cut", t.cut},
          {"wall_seconds", t.wall_s},
          {"workers", t.workers},
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

json workers_json(const SweepTotals& t) {
  json list = json::array();
  for (const WorkerTotals& w : t.per_worker)
    list.push_back({{"label", w.load.label},
                    {"evaluated", w.load.evaluated},
                    {"busy_seconds", w.load.busy_s},
                    {"busy_fraction", optional_json(w.busy_fraction)},
                    {"configs_per_second", optional_json(w.configs_per_s)},
                    {"replacements", w.load.replacements}});
  return list;
}

json shape_json(const ShapeReport& s, const std::string& errors_by) {
  json j;
  j["shape"] = s.shape;
  j["valid_configs"] = s.valid_configs;
  j["strategy"] = s.strategy.empty() ? json(nullptr) : json(s.strategy);
  j["warm_start"] = {{"configs", s.warm_start}, {"repaired", s.warm_start_repaired}};
  j["time_budget_spent"] = s.time_budget_spent;
  j["interrupted"] = s.interrupted;
  j["planned"] = s.planned;
  j["already_measured"] = s.already_measured;
  j["other_shards"] = s.other_shards;
  j["evaluated"] = s.results.size();
  json counts = json::object();
  for (const auto& [outcome, n] : s.outcomes) counts[std::string(to_string(outcome))] = n;
  j["outcomes"] = counts;
  json fastest = json::array();
  for (const RetimedCandidate& r : s.retimed)
    fastest.push_back({{"config", r.config}, {"sweep_median_us", r.first_median_us},
                       {"retimed", timing_json(r.retimed)}});
  j["fastest"] = fastest;
  if (s.best_config) j["best"] = {{"config", *s.best_config}, {"median_us", *s.best_us}};
  if (s.default_config && s.default_config->timing) j["default_median_us"] = s.default_config->timing->median_us;
  if (s.median_ok_us) j["median_ok_us"] = *s.median_ok_us;
  j["reference_us"] = s.workload.reference_us;
  j["floor"] = timing_json(s.workload.floor);
  j["seed"] = s.workload.seed;
  j["wall_seconds"] = s.wall_s;
  j["gpu_seconds"] = s.gpu_s;
  j["compile_wait_seconds"] = s.compile_wait_s;
  j["setup_seconds"] = s.setup_s;
  j["prepared_ahead"] = s.prepared_ahead;
  j["nvrtc_seconds"] = s.nvrtc_s;
  j["cut"] = s.cut;
  j["configs_per_second"] = s.wall_s > 0 ? json(configs_per_second(s)) : json(nullptr);
  j["shared_binaries"] = s.shared_binaries;
  j["kind_errors"] = kind_errors_json(s, errors_by);
  if (!errors_by.empty()) j["kind_errors_by"] = errors_by;
  json skipped = json::array();
  for (const SkippedConfig& k : s.skipped) skipped.push_back({{"config", k.config}, {"reason", k.reason}});
  j["skipped"] = std::move(skipped);
  return j;
}

/// What was evaluated at a shape, and where its time went.
void print_shape_counts(const ShapeReport& s, const SweepSummary& summary) {
  std::string counts;
  for (const auto& [outcome, n] : s.outcomes)
    counts += fmt::format("{}{} {} ({})", counts.empty() ? "" : ", ", to_string(outcome), n,
                          percent(n, s.results.size()));
  fmt::print("  outcomes: {}\n", counts);
  if (summary.replayed) {
    fmt::print("  time: {:.1f} s wall (replayed: no GPU, no compilation); {:.1f} configs/s\n", s.wall_s,
               configs_per_second(s));
  } else {
    fmt::print("  reference kernel {:.1f} us; empty-kernel floor {:.2f} us ({}); input seed {}\n",
               s.workload.reference_us, s.workload.floor.median_us, s.workload.floor.method, s.workload.seed);
    fmt::print("  time: {:.1f} s wall, {:.1f} s on the GPU worker, {:.1f} s waiting for compilation, "
               "{:.1f} s workload setup; {:.1f} s of NVRTC on the compile threads; {:.1f} configs/s{}\n",
               s.wall_s, s.gpu_s, s.compile_wait_s, s.setup_s, s.nvrtc_s, configs_per_second(s),
               s.prepared_ahead > 0 ? fmt::format("; {} candidates prepared while the shape before was timed",
                                                  s.prepared_ahead)
                                    : std::string());
  }
  if (s.cut > 0)
    fmt::print("  early cut: {} of {} ok configs timed with fewer launches, their median past {:g}x "
               "the best so far{}\n",
               s.cut, s.outcomes.count(Outcome::ok) ? s.outcomes.at(Outcome::ok) : 0, summary.cutoff_factor,
               s.cutoff_start_us ? fmt::format(" (from the database's {:.2f} us on)", *s.cutoff_start_us)
                                 : std::string());
  const std::vector<KindErrorRow> rows = kind_error_rows(s, summary.errors_by);
  if (summary.errors_by.empty()) {
    for (const KindErrorRow& row : rows)
      fmt::print("  worst rel-L2 per input kind over the {} ok configs: {}\n", row.configs, kind_errors_text(row));
  } else if (!rows.empty()) {
    fmt::print("  worst rel-L2 per input kind over the ok configs, by {}:\n", summary.errors_by);
    for (const KindErrorRow& row : rows)
      fmt::print("    {} ({} config{}): {}\n", row.group.empty() ? "-" : row.group, row.configs,
                 row.configs == 1 ? "" : "s",
                 kind_errors_text(row));
  }
}

/// The winner, and what tuning gained over the default and the median config.
void print_shape_best(const ShapeReport& s, const SweepSummary& summary) {
  if (!s.best_config) {
    fmt::print("  no valid config measured at this shape\n");
    return;
  }
  fmt::print("  best in the database: {:.2f} {}  {}\n", *s.best_us, summary.replayed ? "us (replayed)" : "us",
             *s.best_config);
  if (s.default_config && s.default_config->timing && s.default_config->outcome == Outcome::ok)
    fmt::print("  speedup over the space's default config ({:.2f} us): {:.2f}x\n",
               s.default_config->timing->median_us, s.default_config->timing->median_us / *s.best_us);
  else if (s.default_config)
    fmt::print("  the space's default config: {}\n", to_string(s.default_config->outcome));
  if (s.median_ok_us)
    fmt::print("  speedup over the median valid config ({:.2f} us): {:.2f}x\n", *s.median_ok_us,
               *s.median_ok_us / *s.best_us);
}

void print_shape_text(const ShapeReport& s, const SweepSummary& summary) {
  fmt::print("\n{} at {} on {}\n", summary.kernel, s.shape, summary.device.name);
  fmt::print("  configs: {} valid, {} planned, {} already in the database, {} evaluated now{}\n",
             count_text(s.valid_configs), s.planned, s.already_measured, s.results.size(),
             s.other_shards ? fmt::format(" ({} left to other shards)", s.other_shards) : std::string());
  if (!s.strategy.empty())
    fmt::print("  search: {}{}{}\n", s.strategy,
               s.strategy != summary.strategy ? fmt::format(" (chosen by {})", summary.strategy) : std::string(),
               s.warm_start ? fmt::format(", first {} configs tuned at other shapes ({} repaired to be valid here)",
                                          s.warm_start, s.warm_start_repaired)
                            : std::string());
  if (s.time_budget_spent && summary.time_budget)
    fmt::print("  stopped: the time budget of {} a shape was spent after {} evaluations\n",
               to_string(*summary.time_budget), s.results.size());
  if (s.interrupted)
    fmt::print("  interrupted after {} evaluations: the rest of the shape was not searched and the fastest were "
               "not timed again\n",
               s.results.size());
  if (!s.skipped.empty()) {
    fmt::print("  given configs skipped, invalid at this shape: {}\n", s.skipped.size());
    for (const SkippedConfig& k : s.skipped) fmt::print("    {}  ({})\n", k.config, k.reason);
  }
  if (!s.results.empty()) print_shape_counts(s, summary);
  if (!s.retimed.empty()) {
    fmt::print("  fastest, timed again interleaved (median us; min; p90; sweep median):\n");
    for (const RetimedCandidate& r : s.retimed)
      fmt::print("    {:9.2f}  {:9.2f}  {:9.2f}  {:9.2f}  {}\n", r.retimed.median_us, r.retimed.min_us,
                 r.retimed.p90_us, r.first_median_us, r.config);
  }
  print_shape_best(s, summary);
}

// ---- a compile-only run ---------------------------------------------------------

std::string first_error_line(const std::string& log) {
  std::size_t at = log.find("error");
  std::size_t start = at == std::string::npos ? 0 : log.rfind('\n', at);
  start = (start == std::string::npos || at == std::string::npos) ? 0 : start + 1;
  std::size_t end = log.find('\n', start);
  std::string line = log.substr(start, end == std::string::npos ? std::string::npos : end - start);
  return line.empty() ? std::string("(empty log)") : line;
}

bool compiled(const CandidateReport& c) { return c.outcome != Outcome::compile_error; }
bool spills(const CandidateReport& c) { return compiled(c) && c.usage && c.usage->spills(); }
double compile_ms(const CandidateReport& c) { return c.compile ? c.compile->seconds * 1e3 : 0.0; }

std::string status_of(const CandidateReport& c) {
  if (!compiled(c)) return "FAILED: " + first_error_line(c.compile ? c.compile->log : c.reason);
  return spills(c) ? "spills" : "ok";
}

json row_json(const CandidateReport& c) {
  json j;
  j["config"] = c.config;
  j["status"] = compiled(c) ? (spills(c) ? "spills" : "ok") : "failed";
  j["compile_ms"] = compile_ms(c);
  if (c.compile) {
    j["key"] = c.compile->key;
    j["options"] = c.compile->options;
  }
  if (compiled(c) && c.usage) {
    const ResourceUsage& u = *c.usage;
    j["registers"] = u.registers;
    j["spill_store_bytes"] = u.spill_store_bytes;
    j["spill_load_bytes"] = u.spill_load_bytes;
    j["stack_frame_bytes"] = u.stack_frame_bytes;
    j["shared_bytes"] = u.shared_bytes;
    j["barriers"] = u.barriers;
    j["cubin_bytes"] = c.compile ? c.compile->cubin_bytes : 0;
  } else {
    j["error"] = c.reason;
  }
  return j;
}

/// "no valid config for N=16 (most restrictive constraint: ...)".
std::string no_config_note(const CompileSummaryContext& context, std::size_t shape_index,
                           const ShapeReport& shape) {
  const std::string& shape_text = shape.shape;
  if (shape.other_shards > 0)
    return fmt::format("no config of {} for this shard ({} left to other shards)", shape_text, shape.other_shards);
  std::string culprit = context.space->most_restrictive_constraint(context.shapes.at(shape_index));
  return fmt::format("no valid config for {}{}", shape_text,
                     culprit.empty() ? "" : fmt::format(" (most restrictive constraint: {})", culprit));
}

void print_compile_table(const ShapeReport& s, const std::string& kernel) {
  std::size_t width = 6;
  for (const CandidateReport& c : s.results) width = std::max(width, c.config.size());
  // With --max-evals the sweep compiled a uniform random subset of the valid configs.
  const std::uint64_t sequence = s.planned + s.other_shards;  // every shard's share
  const bool subset = sequence < s.valid_configs;
  fmt::print("\n{} at {}: {} valid configs{}{}\n", kernel, s.shape,
             count_text(subset || s.other_shards ? s.valid_configs : s.results.size()),
             subset ? fmt::format(", compiling a uniform random {} of them", sequence) : std::string(),
             s.other_shards ? fmt::format(" ({} in this shard)", s.planned) : std::string());
  fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8}  {}\n", "config", width, "regs", "spill st",
             "spill ld", "stack", "smem", "compile", "status");
  fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8}\n", "", width, "", "bytes", "bytes", "bytes",
             "bytes", "ms");
  const CandidateReport* first_failure = nullptr;
  for (const CandidateReport& c : s.results) {
    if (compiled(c) && c.usage) {
      const ResourceUsage& u = *c.usage;
      fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8.0f}  {}\n", c.config, width, u.registers,
                 u.spill_store_bytes, u.spill_load_bytes, u.stack_frame_bytes, u.shared_bytes, compile_ms(c),
                 status_of(c));
    } else {
      if (!first_failure) first_failure = &c;
      fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8.0f}  {}\n", c.config, width, "-", "-", "-",
                 "-", "-", compile_ms(c), status_of(c));
    }
  }
  if (first_failure) fmt::print(stderr, "\nfirst compile failure at {}:\n{}\n", s.shape, first_failure->reason);
}

double compile_rate(const SweepReport& report, const CompileTotals& totals) {
  return report.wall_s > 0 ? static_cast<double>(totals.configs) / report.wall_s : 0.0;
}

json device_json(const std::optional<DeviceInfo>& device) {
  if (!device) return json(nullptr);
  return {{"name", device->name},         {"arch", device->arch},
          {"sm_count", device->sm_count}, {"memory_bytes", device->memory_bytes},
          {"l2_bytes", device->l2_bytes}, {"driver_version", device->driver_version}};
}

}  // namespace

void print_sweep_json(const SweepReport& report, const SweepSummary& summary) {
  json out;
  out["kernel"] = summary.kernel;
  out["device"] = {{"name", summary.device.name}, {"arch", summary.device.arch},
                   {"sm_count", summary.device.sm_count}};
  out["database"] = summary.database.string();
  out["run_id"] = report.run_id;
  out["wall_seconds"] = report.wall_s;
  out["nvrtc_runs"] = report.nvrtc_runs;
  out["binaries_reused"] = report.binaries_reused;
  out["prologue_parts"] = prologue_parts_json(report);
  out["worker_replacements"] = report.worker_replacements;
  out["cutoff_factor"] = summary.cutoff_factor;
  out["cut_after"] = summary.cut_after;
  out["budget_ms"] = summary.budget_ms;
  out["strategy"] = summary.strategy;
  out["time_budget"] = summary.time_budget ? json(to_string(*summary.time_budget)) : json(nullptr);
  out["interrupted"] = report.interrupted;
  const SweepTotals totals = sweep_totals(report);
  out["totals"] = totals_json(totals);
  out["workers"] = workers_json(totals);
  json shapes = json::array();
  for (const ShapeReport& s : report.shapes) shapes.push_back(shape_json(s, summary.errors_by));
  out["shapes"] = std::move(shapes);
  fmt::print("{}\n", out.dump(2));
}

/// A sweep over several shapes: one line per shape, then what they shared.
void print_range_text(const SweepReport& report, const SweepTotals& totals, const SweepSummary& summary) {
  std::size_t width = 5;
  for (const ShapeReport& s : report.shapes) width = std::max(width, s.shape.size());
  fmt::print("\n{} shapes:\n  {:<{}}  {:>9}  {:>9}  {:>6}  {}\n", totals.shapes, "shape", width, "evaluated",
             summary.replayed ? "best (r)" : "best us", "shared", "best config");
  std::uint64_t tuned = 0;
  for (const ShapeReport& s : report.shapes) {
    if (s.best_us) ++tuned;
    fmt::print("  {:<{}}  {:>9}  {:>9}  {:>6}  {}\n", s.shape, width, s.results.size(),
               s.best_us ? fmt::format("{:.2f}", *s.best_us) : std::string("-"), s.shared_binaries,
               s.best_config.value_or("(none valid)"));
  }
  fmt::print("range: {} shapes ({} with a best config), {} evaluations in {:.1f} s wall: {}; {} binaries shared "
             "across shapes (compiled or loaded once)\n",
             totals.shapes, tuned, totals.evaluated, totals.wall_s, rate_text(totals.configs_per_s),
             totals.shared_binaries);
}

/// Where the GPU workers' time went; with several, each one's rate and share.
void print_worker_lines(const SweepTotals& totals) {
  const bool several = totals.workers > 1;
  fmt::print("  GPU worker{}: {:.1f} s busy ({:.0f}% of {}wall; {} would allow {}); {:.1f} s waiting for "
             "compilation, {:.1f} s workload setup, {:.1f} s other\n",
             several ? fmt::format("s ({})", totals.workers) : std::string(), totals.gpu_s,
             100.0 * totals.gpu_busy_fraction.value_or(0.0),
             several ? fmt::format("{} x ", totals.workers) : std::string(), several ? "one alone" : "alone it",
             rate_text(totals.gpu_limit_configs_per_s),
             totals.compile_wait_s, totals.setup_s, totals.other_s);
  if (!several) return;
  for (const WorkerTotals& w : totals.per_worker)
    fmt::print("    {}: {} configs, {}, busy {:.0f}% of wall; {} replacements\n", w.load.label, w.load.evaluated,
               rate_text(w.configs_per_s), 100.0 * w.busy_fraction.value_or(0.0), w.load.replacements);
}

void print_sweep_text(const SweepReport& report, const SweepSummary& summary) {
  for (const ShapeReport& s : report.shapes) print_shape_text(s, summary);
  const SweepTotals totals = sweep_totals(report);
  if (report.shapes.size() > 1) print_range_text(report, totals, summary);
  fmt::print("\nsweep: {} configs in {:.1f} s wall: {}; {} cut early; {} worker replacements; run {} in {}\n",
             totals.evaluated, totals.wall_s, rate_text(totals.configs_per_s), totals.cut,
             report.worker_replacements, report.run_id, summary.database.string());
  if (report.interrupted)
    fmt::print("interrupted: the {} configs evaluated are in {}; the same command again goes on from there\n",
               totals.evaluated, summary.database.string());
  if (summary.replayed) return;
  print_worker_lines(totals);
  fmt::print("  compilation: {:.1f} s of NVRTC in {} runs on {} (alone it would allow {}); "
             "{} binaries reused{}\n",
             totals.nvrtc_s, report.nvrtc_runs, compile_threads_text(totals.compile_threads, report),
             rate_text(totals.compile_limit_configs_per_s), report.binaries_reused, prologue_parts_text(report));
}

CompileTotals compile_totals(const SweepReport& report) {
  CompileTotals totals;
  for (const ShapeReport& s : report.shapes) {
    for (const CandidateReport& c : s.results) {
      ++totals.configs;
      totals.compile_seconds += c.compile ? c.compile->seconds : 0.0;
      if (!compiled(c)) {
        ++totals.failed;
        continue;
      }
      ++totals.compiled;
      if (spills(c)) ++totals.spilling;
    }
  }
  return totals;
}

void print_compile_text(const SweepReport& report, const CompileSummaryContext& context) {
  for (std::size_t i = 0; i < report.shapes.size(); ++i) {
    const ShapeReport& s = report.shapes[i];
    if (s.results.empty())
      fmt::print("\n{}\n", no_config_note(context, i, s));
    else
      print_compile_table(s, context.space->kernel_name());
  }
  const CompileTotals totals = compile_totals(report);
  fmt::print(
      "\ntotal: {} configs for {} ({} NVRTC runs, {} reused{}), {} compiled, {} failed, {} "
      "spilling\n"
      "time: {:.2f} s wall on {} ({:.2f} s of compilation); {:.1f} configs/s\n"
      "binaries stored in {}\n",
      totals.configs, context.arch, report.nvrtc_runs, report.binaries_reused, prologue_parts_text(report),
      totals.compiled, totals.failed,
      totals.spilling, report.wall_s, compile_threads_text(report.compile_threads, report), totals.compile_seconds,
      compile_rate(report, totals), context.database.string());
  if (report.shapes.size() > 1)
    fmt::print("{} shapes; {} binaries shared across shapes (compiled or loaded once)\n", report.shapes.size(),
               sweep_totals(report).shared_binaries);
}

void print_compile_json(const SweepReport& report, const CompileSummaryContext& context) {
  json shapes = json::array();
  for (std::size_t i = 0; i < report.shapes.size(); ++i) {
    const ShapeReport& s = report.shapes[i];
    if (s.results.empty()) {
      shapes.push_back({{"shape", s.shape}, {"configs", json::array()}, {"note", no_config_note(context, i, s)}});
      continue;
    }
    json configs = json::array();
    for (const CandidateReport& c : s.results) configs.push_back(row_json(c));
    shapes.push_back({{"shape", s.shape}, {"configs", std::move(configs)}, {"shared_binaries", s.shared_binaries}});
  }
  const CompileTotals totals = compile_totals(report);
  json out;
  out["space"] = context.space->file_name();
  out["kernel"] = context.space->kernel_name();
  out["arch"] = context.arch;
  out["nvrtc"] = context.nvrtc_version;
  out["device"] = device_json(context.device);
  if (!context.device) out["no_device_reason"] = context.no_device_reason;
  out["notes"] = context.notes;
  out["timed"] = false;
  out["shapes"] = std::move(shapes);
  out["totals"] = {{"configs", totals.configs},
                   {"compiled", totals.compiled},
                   {"failed", totals.failed},
                   {"spilling", totals.spilling},
                   {"nvrtc_runs", report.nvrtc_runs},
                   {"reused", report.binaries_reused},
                   {"prologue_parts", prologue_parts_json(report)},
                   {"shared_binaries", sweep_totals(report).shared_binaries},
                   {"database", context.database.string()},
                   {"threads", report.compile_threads},
                   {"compile_processes", report.compile_processes},
                   {"compile_seconds", totals.compile_seconds},
                   {"wall_seconds", report.wall_s},
                   {"configs_per_second", compile_rate(report, totals)}};
  fmt::print("{}\n", out.dump(2));
}

void ProgressPrinter::update(const SweepProgress& p) {
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

void ProgressPrinter::finish() {
  if (open_) fmt::print(stderr, "\n");
  open_ = false;
}

}  // namespace mlatune::cli
