// mlatune cache regret: the selector's regret on held-out tuned shapes
// (tuner/selector_regret.h).  Needs no GPU.
#include <fstream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cache/store.h"
#include "cli/commands.h"
#include "core/cuda.h"
#include "core/error.h"
#include "core/space.h"
#include "tuner/selector_regret.h"
#include "tuner/warm.h"

namespace mlatune::cli {
namespace {

struct RegretOptions {
  std::string db;
  std::string space_file;
  std::string holdout = "every:4";
  std::string holdout_file;
  std::string device;
  std::string unmeasured_out;
  bool json = false;
};

/// The device whose tuned shapes are judged: --device by name, else the only
/// one with tuned entries, else this machine's GPU when it is one of them.
DeviceInfo regret_device(const std::filesystem::path& database, const SearchSpace& space, const std::string& name) {
  Store store = Store::open(database, StoreMode::read_only);
  std::vector<DeviceIdentity> devices = tuned_entries(store, space, ToolchainInfo::current()).devices;
  std::vector<DeviceIdentity> matching;
  for (const DeviceIdentity& d : devices)
    if (name.empty() || d.name == name) matching.push_back(d);
  if (matching.size() > 1 && name.empty()) {
    GpuProbe probe = probe_gpu();
    if (probe.usable) {
      DeviceInfo gpu = probe.device.info();
      if (std::find(matching.begin(), matching.end(), gpu.identity()) != matching.end()) return gpu;
    }
  }
  if (matching.size() != 1) {
    std::vector<std::string> names;
    for (const DeviceIdentity& d : devices) names.push_back(fmt::format("'{}' ({}, driver {})", d.name, d.arch, d.driver_version));
    throw InputError(fmt::format("{} device(s){} have tuned entries of {} with this NVRTC{}{}", matching.size(),
                                 name.empty() ? "" : " named '" + name + "'", space.kernel_name(),
                                 names.empty() ? "" : ": ", fmt::join(names, ", ")) +
                     (matching.size() > 1 ? "; choose one with --device NAME" : ""));
  }
  DeviceInfo device;
  static_cast<DeviceIdentity&>(device) = matching.front();
  return device;
}

std::string format_us(const std::optional<double>& us) { return us ? fmt::format("{:.2f}", *us) : "-"; }

/// One configs file per unmeasured shape (one config per line, as `mlatune
/// tune --configs-file` reads), and tune-commands.sh with the command that
/// measures each.
void write_unmeasured(const std::filesystem::path& dir, const SearchSpace& space, const RegretOptions& o,
                      const std::filesystem::path& database, const RegretReport& report) {
  std::filesystem::create_directories(dir);
  std::ofstream commands(dir / "tune-commands.sh");
  commands << "#!/bin/sh\n# the configs `mlatune cache regret` chose at held-out shapes without a measurement\n";
  std::size_t n = 0;
  for (const RegretRow& row : report.rows) {
    if (!row.choice.ok() || row.chosen_us) continue;
    const std::filesystem::path file = dir / fmt::format("{}.configs", ++n);
    std::ofstream configs(file);
    configs << row.choice.config_text << "\n";
    if (!configs) throw EnvironmentError(fmt::format("cannot write {}", file.string()));
    commands << fmt::format("mlatune tune '{}' --shape '{}' --configs-file '{}' --db '{}'\n", o.space_file,
                            space.shape_string(row.shape), file.string(), database.string());
  }
  if (!commands) throw EnvironmentError(fmt::format("cannot write {}", (dir / "tune-commands.sh").string()));
}

nlohmann::json summary_json(const SearchSpace& space, const RegretSummary& s) {
  return {{"rows", s.rows}, {"measured", s.measured}, {"geomean", s.measured ? nlohmann::json(s.geomean) : nullptr},
          {"worst", s.measured ? nlohmann::json(s.worst) : nullptr},
          {"worst_shape", s.worst_shape ? nlohmann::json(space.shape_string(*s.worst_shape)) : nullptr}};
}

nlohmann::json report_json(const SearchSpace& space, const RegretReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const RegretRow& row : r.rows) {
    std::optional<double> regret = row.regret();
    rows.push_back({{"shape", space.shape_string(row.shape)},
                    {"reason", std::string(to_string(row.choice.reason))},
                    {"config", row.choice.config_text},
                    {"explanation", row.choice.explanation},
                    {"chosen_us", row.chosen_us ? nlohmann::json(*row.chosen_us) : nullptr},
                    {"best_us", row.best_us},
                    {"best_config", row.best_config},
                    {"regret", regret ? nlohmann::json(*regret) : nullptr}});
  }
  nlohmann::json by_reason = nlohmann::json::object();
  for (const auto& [reason, s] : r.by_reason) by_reason[std::string(to_string(reason))] = summary_json(space, s);
  return {{"device", r.device.name}, {"tuned", r.tuned}, {"kept", r.kept}, {"held_out", r.rows.size()},
          {"rows", rows}, {"overall", summary_json(space, r.overall)}, {"by_reason", by_reason}};
}

std::string summary_text(const SearchSpace& space, const RegretSummary& s) {
  if (!s.measured) return fmt::format("{} shape(s), none measured", s.rows);
  return fmt::format("{} shape(s), {} measured: geomean {:.3f}, worst {:.3f} at {}", s.rows, s.measured, s.geomean,
                     s.worst, space.shape_string(*s.worst_shape));
}

void print_report(const SearchSpace& space, const RegretReport& r) {
  fmt::print("held out {} of {} tuned shape(s) of {} on {} (index built from the other {})\n", r.rows.size(), r.tuned,
             space.kernel_name(), r.device.name, r.kept);
  for (const RegretRow& row : r.rows) {
    std::optional<double> regret = row.regret();
    fmt::print("{}  {}  {}  chosen {} us  best {:.2f} us  regret {}\n", space.shape_string(row.shape),
               to_string(row.choice.reason), row.choice.ok() ? row.choice.config_text : "-", format_us(row.chosen_us),
               row.best_us, regret ? fmt::format("{:.3f}", *regret) : "unmeasured");
  }
  fmt::print("regret: {}\n", summary_text(space, r.overall));
  for (const auto& [reason, s] : r.by_reason) fmt::print("  {}: {}\n", to_string(reason), summary_text(space, s));
}

void regret_command(const RegretOptions& o, const std::string& cache_db) {
  SearchSpace space = SearchSpace::load(o.space_file);
  const std::filesystem::path database = database_path(o.db.empty() ? cache_db : o.db);
  Holdout holdout = o.holdout_file.empty() ? parse_holdout_every(o.holdout)
                                           : Holdout{0, read_shape_file(space, o.holdout_file)};
  const DeviceInfo device = regret_device(database, space, o.device);
  RegretReport report = selector_regret(database, space, device, holdout);
  if (o.json)
    fmt::print("{}\n", report_json(space, report).dump(2));
  else
    print_report(space, report);
  std::size_t unmeasured = report.overall.rows - report.overall.measured;
  if (!o.unmeasured_out.empty()) {
    write_unmeasured(o.unmeasured_out, space, o, database, report);
    if (!o.json) fmt::print("unmeasured: {} (configs and tune commands in {})\n", unmeasured, o.unmeasured_out);
  }
}

}  // namespace

void add_regret_command(CLI::App& cache, std::shared_ptr<const std::string> cache_db) {
  auto options = std::make_shared<RegretOptions>();
  CLI::App* cmd = cache.add_subcommand(
      "regret", "The selector's regret at held-out tuned shapes: chosen config's time / best time there");
  cmd->add_option("--space", options->space_file, "search-space YAML file")->required();
  CLI::Option* every = cmd->add_option(
      "--holdout", options->holdout, "every:N: hold out the N-th, 2N-th, ... tuned shape (default every:4)");
  cmd->add_option("--holdout-file", options->holdout_file, "hold out the shapes in this file (one per line)")
      ->excludes(every);
  cmd->add_option("--device", options->device, "whose tuned shapes (default: the only device, or this GPU)");
  cmd->add_option("--unmeasured-out", options->unmeasured_out,
                  "directory: one configs file per unmeasured held-out shape, and tune-commands.sh");
  cmd->add_flag("--json", options->json, "print the report as JSON");
  cmd->add_option("--db", options->db, "database file (default: $MLATUNE_DB, else ./mlatune.db)");
  cmd->callback([options, cache_db] { regret_command(*options, *cache_db); });
}

}  // namespace mlatune::cli
