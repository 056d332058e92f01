// mlatune cache warm: compile ahead of time every binary the dispatcher may
// choose for a range of shapes (tuner/warm.h), so that first calls inside it
// load a stored cubin instead of waiting for NVRTC.
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
  std::uint64_t max_probes = default_max_probe_shapes;
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

nlohmann::json report_json(const SearchSpace& space, const DeviceInfo& device, const ShapeBox& box,
                           const WarmReport& r) {
  nlohmann::json probes = nlohmann::json::object();
  for (const VariableProbes& v : r.plan.probes.variables) probes[v.name] = v.values.size();
  nlohmann::json reasons = nlohmann::json::object();
  for (const auto& [reason, count] : r.plan.reasons) reasons[std::string(to_string(reason))] = count;
  return {{"kernel", space.kernel_name()},  {"arch", device.arch},
          {"device", device.name},           {"range", box.text(space)},
          {"probe_values", probes},          {"tuned_shapes_inside", r.plan.probes.tuned_inside.size()},
          {"probe_shapes", r.plan.probes.count()}, {"choices", reasons},
          {"binaries", r.plan.binaries.size()},    {"already_stored", r.already_stored},
          {"compiled", r.compiled},          {"failed", r.failed},
          {"first_failure", r.first_failure}, {"seconds", r.seconds}};
}

void print_report(const SearchSpace& space, const DeviceInfo& device, const ShapeBox& box, const WarmReport& r) {
  std::vector<std::string> probes, reasons;
  for (const VariableProbes& v : r.plan.probes.variables) probes.push_back(fmt::format("{} {}", v.name, v.values.size()));
  for (const auto& [reason, count] : r.plan.reasons) reasons.push_back(fmt::format("{} {}", to_string(reason), count));
  fmt::print("warmed {} for {}{} over {}\n", space.kernel_name(), device.arch,
             device.name.empty() ? "" : " (" + device.name + ")", box.text(space));
  fmt::print("probe values       {} (+ {} tuned shape(s) inside)\n", fmt::join(probes, ", "),
             r.plan.probes.tuned_inside.size());
  fmt::print("probe shapes       {}\n", r.plan.probes.count());
  fmt::print("choices            {}\n", fmt::join(reasons, ", "));
  fmt::print("distinct binaries  {}\n", r.plan.binaries.size());
  fmt::print("already stored     {}\n", r.already_stored);
  fmt::print("compiled           {}\n", r.compiled);
  fmt::print("failed             {}\n", r.failed);
  fmt::print("wall time          {:.1f} s\n", r.seconds);
  if (r.failed) fmt::print("first failure      {}\n", r.first_failure.substr(0, r.first_failure.find('\n')));
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
  WarmReport report = warm(store, index, WarmOptions{box, o.jobs, o.max_probes}, progress);
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
  warm_cmd->add_option("--jobs,-j", options->jobs, "probing and compiling threads (default: one per core)")
      ->check(whole_number(1, 1024));
  warm_cmd->add_option("--max-probes", options->max_probes,
                       fmt::format("refuse a range that needs more probe shapes than this (default {})",
                                   default_max_probe_shapes))
      ->check(whole_number(1, UINT64_MAX));
  warm_cmd->add_flag("--json", options->json, "print the report as JSON");
  warm_cmd->add_flag("--quiet,-q", options->quiet, "no progress lines");
  warm_cmd->add_option("--db", options->db, "database file (default: $MLATUNE_DB, else ./mlatune.db)");
  warm_cmd->callback([options, cache_db] { warm_command(*options, *cache_db); });
}

}  // namespace mlatune::cli
