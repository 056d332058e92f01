// mlatune cache warm: compile ahead of time every binary the dispatcher may
// choose for a range of shapes (tuner/warm.h), so that first calls inside it
// load a stored cubin instead of waiting for NVRTC.
#include <map>
#include <memory>
#include <set>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cache/dispatch_index.h"
#include "cache/store.h"
#include "cli/commands.h"
#include "cli/option_checks.h"
#include "core/compiler.h"
#include "core/cuda.h"
#include "core/error.h"
#include "core/space.h"
#include "tuner/warm.h"

namespace mlatune::cli {
namespace {

struct WarmCommandOptions {
  std::string db;
  std::string space_file;
  std::string range;
  std::string arch;
  std::string device;
  unsigned jobs = 0;
  std::size_t max_binaries = default_max_binaries_per_config;
  std::size_t samples = default_coverage_samples;
  std::uint64_t seed = 1;
  std::string compile_in{to_string(CompileIn::processes)};
  bool json = false;
  bool quiet = false;
};

/// The device the dispatcher will run on: the GPU's when no architecture is
/// given; otherwise the one device of the database tuned for that
/// architecture (--device picks among several), else a device known only by
/// its architecture (every tuned entry is then another device's guidance).
DeviceInfo warm_device(Store& store, const SearchSpace& space, const WarmCommandOptions& o) {
  if (o.arch.empty()) {
    GpuProbe probe = probe_gpu();
    if (!probe.usable) throw EnvironmentError("no GPU: " + probe.reason + "; give the architecture with --arch");
    return probe.device.info();
  }
  const std::string arch = parse_architecture(o.arch);
  std::vector<DeviceIdentity> matching;
  for (const DeviceIdentity& d : tuned_entries(store, space, ToolchainInfo::current()).devices)
    if (d.arch == arch && (o.device.empty() || d.name == o.device)) matching.push_back(d);
  if (matching.size() > 1) {
    std::vector<std::string> names;
    for (const DeviceIdentity& d : matching) names.push_back(fmt::format("'{}' (driver {})", d.name, d.driver_version));
    throw InputError(fmt::format("several devices of {} have tuned entries ({}); choose one with --device NAME",
                                 arch, fmt::join(names, ", ")));
  }
  if (!o.device.empty() && matching.empty())
    throw InputError(fmt::format("no device named '{}' of {} has tuned entries of {}", o.device, arch,
                                 space.kernel_name()));
  DeviceInfo device;
  if (!matching.empty()) static_cast<DeviceIdentity&>(device) = matching.front();
  device.arch = arch;
  return device;
}

nlohmann::json configs_json(const SearchSpace& space, const WarmPlan& plan) {
  nlohmann::json configs = nlohmann::json::array();
  for (const PlannedConfig& p : plan.configs)
    configs.push_back({{"config", space.config_string(p.binaries.config)}, {"origin", p.origin},
                       {"warmable", p.binaries.warmable}, {"tuples", p.binaries.tuples},
                       {"varying", p.binaries.varying}, {"binaries", p.binaries.shapes.size()},
                       {"never_valid", p.binaries.never_valid}});
  return configs;
}

nlohmann::json coverage_json(const CoverageReport& c) {
  nlohmann::json standing = nlohmann::json::array();
  for (const StandingCoverage& s : c.standing)
    standing.push_back({{"origin", s.origin}, {"config", s.config_text}, {"ready", s.ready}});
  return {{"sampled", c.sampled},       {"corners", c.corners},       {"seed", c.seed},
          {"uncovered", c.uncovered},   {"unrunnable", c.unrunnable}, {"examples", c.examples},
          {"guaranteed", c.guaranteed()}, {"standing", standing},
          {"largest_workspace_bytes", c.largest_workspace_bytes}, {"largest_workspace_shape", c.largest_workspace_shape},
          {"workspace_reserve", reserve_text(c.largest_workspace_bytes)}};
}

nlohmann::json report_json(const SearchSpace& space, const DeviceInfo& device, const ShapeBox& box,
                           const WarmReport& r) {
  return {{"kernel", space.kernel_name()},   {"arch", device.arch},
          {"device", device.name},           {"range", box.text(space)},
          {"configs", configs_json(space, r.plan)}, {"binaries", r.plan.binaries.size()},
          {"tuned_shape_binaries", r.plan.tuned_shape_binaries},
          {"already_stored", r.already_stored}, {"compiled", r.compiled}, {"compile_in", std::string(to_string(r.compiled_in))},
          {"failed", r.failed},              {"first_failure", r.first_failure},
          {"coverage", coverage_json(r.coverage)}, {"seconds", r.seconds}};
}

/// Counts by origin, and one line per config that is not warmable (the
/// first few: --json lists them all).
void print_configs(const SearchSpace& space, const WarmPlan& plan) {
  constexpr std::size_t shown = 8;
  std::map<std::string, std::size_t> warmable;
  std::vector<const PlannedConfig*> not_warmable;
  std::uint64_t never_valid = 0;
  for (const PlannedConfig& p : plan.configs) {
    if (p.binaries.warmable) ++warmable[p.origin.substr(0, p.origin.find(' '))];
    else not_warmable.push_back(&p);
    never_valid += p.binaries.never_valid;
  }
  std::vector<std::string> parts;
  for (const auto& [origin, count] : warmable) parts.push_back(fmt::format("{} {}", count, origin));
  fmt::print("candidate configs  {} ({} warmable: {}; {} compiled-value tuples where a config cannot run skipped)\n",
             plan.configs.size(), plan.configs.size() - not_warmable.size(), fmt::join(parts, ", "), never_valid);
  fmt::print("not warmable       {}{}\n", not_warmable.size(),
             not_warmable.empty() ? "" : " (too many binaries over this range: a first call runs a warmed stand-in "
                                         "while the exact binary compiles in the background)");
  for (std::size_t i = 0; i < not_warmable.size() && i < shown; ++i)
    fmt::print("  {} {}: {} binaries (compiled values vary with {})\n", not_warmable[i]->origin,
               space.config_string(not_warmable[i]->binaries.config), count_text(not_warmable[i]->binaries.tuples),
               fmt::join(not_warmable[i]->binaries.varying, ", "));
  if (not_warmable.size() > shown) fmt::print("  ... and {} more (--json lists them all)\n", not_warmable.size() - shown);
}

void print_coverage(const CoverageReport& c) {
  fmt::print("coverage           {} sampled shapes ({} corners + {} random, seed {})\n", c.sampled, c.corners,
             c.sampled - c.corners, c.seed);
  for (const StandingCoverage& s : c.standing)
    fmt::print("  {:<16} ready at {} of {}: {}\n", s.origin, s.ready, c.sampled, s.config_text);
  if (c.unrunnable) fmt::print("  no config can run {} of them (refused, nothing compiles)\n", c.unrunnable);
  if (c.largest_workspace_bytes == 0)
    fmt::print("largest workspace  0 (no ranked config in the range launches a prologue)\n");
  else
    fmt::print("largest workspace  {} bytes ({:.2f} GiB), a ranked config's at {}: a process maps it at its first "
               "calls there (milliseconds per GB) unless it reserves it at open: MLATUNE_WORKSPACE_RESERVE={}\n",
               c.largest_workspace_bytes, static_cast<double>(c.largest_workspace_bytes) / (1 << 30),
               c.largest_workspace_shape, reserve_text(c.largest_workspace_bytes));
  if (c.guaranteed()) {
    fmt::print("uncovered          0: every sampled shape has a warmed binary among the dispatcher's ranked configs "
               "(no NVRTC on a first call inside the range)\n");
    return;
  }
  fmt::print("uncovered          {}: sampled shapes without a warmed binary among the dispatcher's ranked configs "
             "(a first call there compiles)\n", c.uncovered);
  for (const std::string& example : c.examples) fmt::print("  {}\n", example);
}

void print_report(const SearchSpace& space, const DeviceInfo& device, const ShapeBox& box, const WarmReport& r) {
  fmt::print("warmed {} for {}{} over {}\n", space.kernel_name(), device.arch,
             device.name.empty() ? "" : " (" + device.name + ")", box.text(space));
  print_configs(space, r.plan);
  fmt::print("distinct binaries  {} ({} of them tuned entries' own, at their shapes)\n", r.plan.binaries.size(),
             r.plan.tuned_shape_binaries);
  fmt::print("already stored     {}\n", r.already_stored);
  if (r.compiled + r.failed == 0)
    fmt::print("compiled           0\n");
  else
    fmt::print("compiled           {} (on {} threads{})\n", r.compiled, r.compile_threads,
               r.compiled_in == CompileIn::processes ? ", each with a compile process" : "");
  fmt::print("failed             {}\n", r.failed);
  if (r.failed) fmt::print("first failure      {}\n", r.first_failure.substr(0, r.first_failure.find('\n')));
  print_coverage(r.coverage);
  fmt::print("wall time          {:.1f} s\n", r.seconds);
}

void warm_command(const WarmCommandOptions& o, const std::string& cache_db) {
  SearchSpace space = SearchSpace::load(o.space_file);
  const ShapeBox box = parse_shape_box(space, o.range);
  const std::filesystem::path database = database_path(o.db.empty() ? cache_db : o.db);
  std::error_code ec;
  if (!std::filesystem::exists(database, ec))
    throw InputError(fmt::format("no database at {} (give --db, set MLATUNE_DB, or tune or import first)",
                                 database.string()));
  Store store = Store::open(database, StoreMode::read_write);
  const DeviceInfo device = warm_device(store, space, o);
  const DispatchIndex index = DispatchIndex::build(store, space, DispatchTarget{device, ToolchainInfo::current()});
  auto progress = [&](std::uint64_t done, std::uint64_t total) {
    if (!o.quiet && !o.json && (done == total || done % 50 == 0))
      fmt::print(stderr, "warm: {}/{} binaries\n", done, total);
  };
  WarmReport report =
      warm(store, index,
           WarmOptions{box, o.jobs, o.max_binaries, o.samples, o.seed,
                       parse_compile_in(o.compile_in).value_or(CompileIn::processes)},  // checked by its validator
           progress);
  if (o.json)
    fmt::print("{}\n", report_json(space, device, box, report).dump(2));
  else
    print_report(space, device, box, report);
  if (report.failed)
    throw EnvironmentError(fmt::format("{} of {} binaries did not compile", report.failed, report.plan.binaries.size()));
}

}  // namespace

void add_warm_command(CLI::App& cache, std::shared_ptr<const std::string> cache_db) {
  auto options = std::make_shared<WarmCommandOptions>();
  CLI::App* warm_cmd = cache.add_subcommand(
      "warm", "Compile ahead of time every binary the dispatcher may choose for a range of shapes");
  warm_cmd->add_option("--space", options->space_file, "search-space YAML file")->required();
  warm_cmd->add_option("--range", options->range,
                       "the shapes, e.g. \"B=1..8;T=1..4096;H=1..64;D=8..256;R=16..1024\" (every variable)")
      ->required();
  warm_cmd->add_option("--arch", options->arch,
                       "architecture to compile for, e.g. sm_90; no GPU needed (default: the GPU's)");
  warm_cmd->add_option("--device", options->device,
                       "with --arch: whose tuned entries count as this device's, when several devices of "
                       "that architecture have them");
  warm_cmd->add_option("--jobs,-j", options->jobs, "planning, compiling and sampling threads (default: one per core)")
      ->check(whole_number(1, 1024));
  warm_cmd->add_option("--max-binaries-per-config", options->max_binaries,
                       fmt::format("a config needing more binaries than this over the range (it compiles a "
                                   "variable exactly) is reported, not compiled (default {})",
                                   default_max_binaries_per_config))
      ->check(whole_number(1, 1'000'000));
  warm_cmd->add_option("--samples", options->samples,
                       fmt::format("random shapes of the coverage check, besides the box's corners (default {})",
                                   default_coverage_samples))
      ->check(whole_number(0, 10'000'000));
  warm_cmd->add_option("--seed", options->seed, "seed of the coverage check's shapes (default 1)");
  warm_cmd->add_option("--compile-in", options->compile_in,
                       "where NVRTC runs: processes (default: a compile-only mlatune-worker per compile thread, as "
                       "`tune` does) or threads (in this process)")
      ->check(CLI::IsMember({"processes", "threads"}));
  warm_cmd->add_flag("--json", options->json, "print the report as JSON");
  warm_cmd->add_flag("--quiet,-q", options->quiet, "no progress lines");
  warm_cmd->add_option("--db", options->db, "database file (default: $MLATUNE_DB, else ./mlatune.db)");
  warm_cmd->callback([options, cache_db] { warm_command(*options, *cache_db); });
}

}  // namespace mlatune::cli
