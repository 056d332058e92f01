// mlatune cache ...: look into, export, merge and clean the tuning database.
// Thin glue: every command opens a Store, calls one or two of its functions
// and prints the result (human tables by default, JSON with --json).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cache/store.h"
#include "cli/commands.h"
#include "core/space.h"

namespace mlatune::cli {

std::string human_bytes(std::uintmax_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < 1024 * 1024) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0));
}

namespace {

using nlohmann::json;

struct CacheOptions {
  std::string db;
  std::string kernel;
  std::string shape;
  bool json_output = false;
  std::string format;
  std::string output;
  bool force = false;
  std::vector<std::string> others;  // cache merge: databases to merge in, in order
  std::vector<std::string> spaces;
};

// ---- formatting ------------------------------------------------------------------

/// A plain text table: a header row, then rows, columns padded to fit.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::FILE* out) const {
    std::vector<std::size_t> width(rows_[0].size(), 0);
    for (const auto& row : rows_) {
      for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    for (const auto& row : rows_) {
      std::string line;
      for (std::size_t i = 0; i < row.size(); ++i) {
        line += i + 1 == row.size() ? row[i] : fmt::format("{:<{}}  ", row[i], width[i]);
      }
      fmt::print(out, "{}\n", line);
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string number(const std::optional<double>& value, int digits = 3) {
  return value ? fmt::format("{:.{}f}", *value, digits) : "";
}

std::string scientific(const std::optional<double>& value) { return value ? fmt::format("{:.2e}", *value) : ""; }

std::string one_line(const std::string& text, std::size_t limit) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > limit) line = line.substr(0, limit - 3) + "...";
  return line;
}

/// "B=2,T=32" and "T=32, B=2" name the same shape.
std::set<std::string> shape_parts(const std::string& shape) {
  std::set<std::string> parts;
  std::size_t start = 0;
  while (start <= shape.size()) {
    std::size_t end = shape.find(',', start);
    if (end == std::string::npos) end = shape.size();
    std::string part;
    for (char c : shape.substr(start, end - start)) {
      if (c != ' ' && c != '\t') part += c;
    }
    if (!part.empty()) parts.insert(part);
    start = end + 1;
  }
  return parts;
}

json device_json(const DeviceIdentity& d) {
  return {{"name", d.name},
          {"arch", d.arch},
          {"sm_count", d.sm_count},
          {"memory_bytes", d.memory_bytes},
          {"driver_version", d.driver_version}};
}

json measurement_json(const MeasurementRecord& r) {
  const Measurement& m = r.measurement;
  json j = {{"id", r.id},
            {"run", r.run_uuid},
            {"kernel", {{"name", r.kernel.name},
                        {"template_hash", r.kernel.template_hash},
                        {"definition_hash", r.kernel.definition_hash}}},
            {"device", device_json(r.device)},
            {"toolchain", {{"nvrtc_version", r.toolchain.nvrtc_version},
                           {"mlatune_version", r.toolchain.mlatune_version}}},
            {"shape", m.shape},
            {"config", m.config},
            {"outcome", std::string(to_string(m.outcome))},
            {"message", m.message},
            {"measured_at", r.measured_at}};
  j["timing"] = m.timing ? json{{"median_us", m.timing->median_us},
                                {"min_us", m.timing->min_us},
                                {"p90_us", m.timing->p90_us},
                                {"samples", m.timing->samples},
                                {"spread", m.timing->spread},
                                {"method", m.timing->method}}
                         : json(nullptr);
  j["error"] = m.error ? json{{"relative_l2", m.error->relative_l2}, {"max_abs", m.error->max_abs}} : json(nullptr);
  j["resources"] = m.resources ? json{{"registers", m.resources->registers},
                                      {"spill_store_bytes", m.resources->spill_store_bytes},
                                      {"spill_load_bytes", m.resources->spill_load_bytes},
                                      {"stack_frame_bytes", m.resources->stack_frame_bytes},
                                      {"shared_bytes", m.resources->shared_bytes}}
                               : json(nullptr);
  return j;
}

json best_json(const BestRecord& b) {
  return {{"kernel", {{"name", b.kernel.name},
                      {"template_hash", b.kernel.template_hash},
                      {"definition_hash", b.kernel.definition_hash}}},
          {"device", device_json(b.device)},
          {"toolchain", {{"nvrtc_version", b.toolchain.nvrtc_version},
                         {"mlatune_version", b.toolchain.mlatune_version}}},
          {"shape", b.entry.shape},
          {"config", b.entry.config},
          {"median_us", b.entry.median_us},
          {"measurement_id", b.entry.measurement_id}};
}

/// Compiler logs and messages may hold bytes that are not UTF-8; they are
/// replaced rather than failing the whole output.
std::string text(const json& value) { return value.dump(2, ' ', false, json::error_handler_t::replace); }

/// RFC 4180: a field with a comma, quote or line break is quoted, and its
/// quotes doubled.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

std::string csv_number(const std::optional<double>& value) {
  return value ? fmt::format("{}", *value) : "";
}

void write_csv(std::ostream& out, const std::vector<MeasurementRecord>& records) {
  const std::vector<std::string> header = {
      "id", "run", "kernel", "template_hash", "definition_hash", "device", "arch", "sm_count", "memory_bytes",
      "driver_version", "nvrtc_version", "mlatune_version", "shape", "config", "outcome", "median_us", "min_us",
      "p90_us", "samples", "spread", "timing_method", "relative_l2", "max_abs", "registers", "spill_bytes",
      "shared_bytes", "message", "measured_at"};
  auto write_row = [&](const std::vector<std::string>& fields) {
    for (std::size_t i = 0; i < fields.size(); ++i) out << (i ? "," : "") << csv_field(fields[i]);
    out << "\r\n";
  };
  write_row(header);
  for (const auto& r : records) {
    const Measurement& m = r.measurement;
    const Timing* t = m.timing ? &*m.timing : nullptr;
    write_row({std::to_string(r.id), r.run_uuid, r.kernel.name, r.kernel.template_hash, r.kernel.definition_hash,
               r.device.name, r.device.arch, std::to_string(r.device.sm_count),
               std::to_string(r.device.memory_bytes), r.device.driver_version, r.toolchain.nvrtc_version,
               r.toolchain.mlatune_version, m.shape, m.config, std::string(to_string(m.outcome)),
               t ? csv_number(t->median_us) : "", t ? csv_number(t->min_us) : "", t ? csv_number(t->p90_us) : "",
               t ? std::to_string(t->samples) : "", t ? csv_number(t->spread) : "", t ? t->method : "",
               m.error ? csv_number(m.error->relative_l2) : "", m.error ? csv_number(m.error->max_abs) : "",
               m.resources ? std::to_string(m.resources->registers) : "",
               m.resources ? std::to_string(m.resources->spill_store_bytes + m.resources->spill_load_bytes) : "",
               m.resources ? std::to_string(m.resources->shared_bytes) : "", m.message, r.measured_at});
  }
}

// ---- the versions in force now --------------------------------------------------------

/// Current template and definition hashes of every kernel the database knows,
/// from the space files given with --space, else from the space file its
/// latest run was started with; and the NVRTC linked into this program.
CurrentVersions current_versions(Store& store, const std::vector<std::string>& spaces) {
  CurrentVersions current;
  current.nvrtc_version = ToolchainInfo::current().nvrtc_version;
  for (const auto& file : spaces) {
    SearchSpace space = SearchSpace::load(file);
    current.kernels[space.kernel_name()] = {space.template_hash(), space.definition_hash()};
  }
  std::map<std::string, std::string> latest_space;  // kernel name -> space file
  for (const auto& run : store.runs()) latest_space[run.kernel_name] = run.space_path;
  for (const auto& [kernel, file] : latest_space) {
    if (current.kernels.count(kernel)) continue;
    try {
      SearchSpace space = SearchSpace::load(file);
      if (space.kernel_name() != kernel) {
        fmt::print(stderr, "mlatune: warning: {} now defines kernel '{}', not '{}'; '{}' is not judged\n", file,
                   space.kernel_name(), kernel, kernel);
        continue;
      }
      current.kernels[kernel] = {space.template_hash(), space.definition_hash()};
    } catch (const Error& e) {
      fmt::print(stderr, "mlatune: warning: kernel '{}' is not judged: its space file cannot be loaded: {}\n",
                 kernel, e.what());
    }
  }
  return current;
}

// ---- commands ------------------------------------------------------------------------------

void show(const CacheOptions& o) {
  Store store = Store::open(database_path(o.db), StoreMode::read_only);
  auto records = store.measurements(MeasurementFilter{o.kernel, ""});
  if (!o.shape.empty()) {
    auto wanted = shape_parts(o.shape);
    std::erase_if(records, [&](const MeasurementRecord& r) { return shape_parts(r.measurement.shape) != wanted; });
  }
  if (o.json_output) {
    json all = json::array();
    for (const auto& r : records) all.push_back(measurement_json(r));
    fmt::print("{}\n", text(all));
    return;
  }
  if (records.empty()) {
    fmt::print("no measurements{}{}\n", o.kernel.empty() ? "" : " of kernel " + o.kernel,
               o.shape.empty() ? "" : " at shape " + o.shape);
    return;
  }
  Table table({"id", "kernel", "device", "shape", "config", "outcome", "median_us", "min_us", "p90_us", "rel_l2",
               "regs", "spills", "message"});
  for (const auto& r : records) {
    const Measurement& m = r.measurement;
    table.add({std::to_string(r.id), r.kernel.name, r.device.arch, m.shape, m.config,
               std::string(to_string(m.outcome)), number(m.timing ? std::optional(m.timing->median_us) : std::nullopt),
               number(m.timing ? std::optional(m.timing->min_us) : std::nullopt),
               number(m.timing ? std::optional(m.timing->p90_us) : std::nullopt),
               scientific(m.error ? std::optional(m.error->relative_l2) : std::nullopt),
               m.resources ? std::to_string(m.resources->registers) : "",
               m.resources ? std::to_string(m.resources->spill_store_bytes + m.resources->spill_load_bytes) : "", one_line(m.message, 60)});
  }
  table.print(stdout);
  fmt::print("{} measurement(s)\n", records.size());
}

void best(const CacheOptions& o) {
  Store store = Store::open(database_path(o.db), StoreMode::read_only);
  auto all = store.all_best();
  if (o.json_output) {
    json out = json::array();
    for (const auto& b : all) out.push_back(best_json(b));
    fmt::print("{}\n", text(out));
    return;
  }
  if (all.empty()) {
    fmt::print("no best entries yet\n");
    return;
  }
  Table table({"kernel", "template", "device", "arch", "nvrtc", "shape", "config", "median_us"});
  for (const auto& b : all) {
    table.add({b.kernel.name, b.kernel.template_hash.substr(0, 12), b.device.name, b.device.arch,
               b.toolchain.nvrtc_version, b.entry.shape, b.entry.config, number(b.entry.median_us)});
  }
  table.print(stdout);
}

bool is_sqlite_database(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char header[16] = {};
  in.read(header, sizeof header);
  return in.gcount() == sizeof header && std::equal(header, header + 16, "SQLite format 3");
}

// Exporting over the database (by any name: a link is the same file) would
// replace every measurement with their CSV; another database likewise.
void check_export_target(const std::filesystem::path& output, const std::filesystem::path& database,
                         bool force) {
  std::error_code ec;
  if (std::filesystem::equivalent(output, database, ec))
    throw InputError(fmt::format("--output {} is the database {} itself; expected another file",
                                 output.string(), database.string()));
  if (!force && is_sqlite_database(output))
    throw InputError(fmt::format("--output {} is an SQLite database, which the export would "
                                 "overwrite; expected another file (or --force to overwrite it)",
                                 output.string()));
}

void export_measurements(const CacheOptions& o) {
  Store store = Store::open(database_path(o.db), StoreMode::read_only);
  if (!o.output.empty()) check_export_target(o.output, store.path(), o.force);
  auto records = store.measurements();
  std::ofstream file;
  if (!o.output.empty()) {
    file.open(o.output, std::ios::binary);
    if (!file) throw EnvironmentError(fmt::format("cannot write {}", o.output));
  }
  std::ostream& out = o.output.empty() ? std::cout : file;
  if (o.format == "csv") {
    write_csv(out, records);
  } else {
    json all = {{"schema_version", Store::schema_version}, {"measurements", json::array()}, {"best", json::array()}};
    for (const auto& r : records) all["measurements"].push_back(measurement_json(r));
    for (const auto& b : store.all_best()) all["best"].push_back(best_json(b));
    out << text(all) << "\n";
  }
  out.flush();
  if (!out) throw EnvironmentError(fmt::format("writing {} failed", o.output.empty() ? "stdout" : o.output));
}

// Several files (the databases of a sharded sweep) are merged one after the
// other, each in its own transaction; the best entries do not depend on the
// order (Store::merge).
void merge(const CacheOptions& o) {
  Store store = Store::open(database_path(o.db), StoreMode::read_write);
  for (const std::string& other : o.others) {
    MergeCounts counts = store.merge(other);
    fmt::print("merged {} into {}: {} run(s), {} measurement(s), {} binary(ies) added; {} best entry(ies) changed\n",
               other, store.path().string(), counts.runs, counts.measurements, counts.binaries,
               counts.best_changed);
  }
}

void stale(const CacheOptions& o) {
  Store store = Store::open(database_path(o.db), StoreMode::read_only);
  auto entries = store.stale(current_versions(store, o.spaces));
  if (o.json_output) {
    json out = json::array();
    for (const auto& e : entries) {
      out.push_back({{"kind", std::string(to_string(e.kind))},
                     {"description", e.description},
                     {"reason", e.reason},
                     {"runs", e.runs},
                     {"measurements", e.measurements},
                     {"best", e.best}});
    }
    fmt::print("{}\n", text(out));
    return;
  }
  if (entries.empty()) {
    fmt::print("nothing stale\n");
    return;
  }
  Table table({"kind", "what", "why", "runs", "measurements", "best"});
  for (const auto& e : entries) {
    bool binary = e.kind == StaleEntry::Kind::binary;
    table.add({std::string(to_string(e.kind)), e.description, e.reason, binary ? "" : std::to_string(e.runs),
               binary ? "" : std::to_string(e.measurements), binary ? "" : std::to_string(e.best)});
  }
  table.print(stdout);
  fmt::print("{} stale entry(ies); `mlatune cache prune` removes them\n", entries.size());
}

void prune(const CacheOptions& o) {
  Store store = Store::open(database_path(o.db), StoreMode::read_write);
  PruneCounts c = store.prune(current_versions(store, o.spaces));
  fmt::print("removed {} kernel version(s), {} toolchain(s), {} run(s), {} measurement(s), {} best entry(ies), "
             "{} binary(ies), {} miss record(s)\n",
             c.kernels, c.toolchains, c.runs, c.measurements, c.best, c.binaries, c.misses);
}

void vacuum(const CacheOptions& o) {
  Store store = Store::open(database_path(o.db), StoreMode::read_write);
  auto before = store.info();
  const Store::Repacked repacked = store.repack_binaries();
  if (repacked.binaries)
    fmt::print("repacked {} binary(ies) stored before zstd: {} -> {}\n", repacked.binaries,
               human_bytes(repacked.bytes_before), human_bytes(repacked.bytes_after));
  if (repacked.damaged)
    fmt::print("left {} damaged binary(ies) as they are (a dispatcher or sweep that reads one says which)\n",
               repacked.damaged);
  store.vacuum();
  auto after = store.info();
  fmt::print("{}: {} -> {}\n", store.path().string(), human_bytes(before.file_bytes + before.wal_bytes),
             human_bytes(after.file_bytes + after.wal_bytes));
}

json warm_ranges_json(const std::vector<WarmRange>& ranges) {
  json all = json::array();
  for (const WarmRange& w : ranges)
    all.push_back({{"kernel", w.kernel_name}, {"template_hash", w.template_hash},
                   {"definition_hash", w.definition_hash}, {"arch", w.arch}, {"nvrtc_version", w.nvrtc_version},
                   {"range", w.range}, {"probe_shapes", w.probe_shapes}, {"binaries", w.binaries},
                   {"failed", w.failed}, {"warmed_at", w.warmed_at}});
  return all;
}

void info(const CacheOptions& o) {
  Store store = Store::open(database_path(o.db), StoreMode::read_only);
  StoreInfo i = store.info();
  if (o.json_output) {
    json out = {{"path", i.path.string()},     {"schema_version", i.schema_version},
                {"journal_mode", i.journal_mode}, {"file_bytes", i.file_bytes},
                {"wal_bytes", i.wal_bytes},       {"devices", i.devices},
                {"toolchains", i.toolchains},     {"kernels", i.kernels},
                {"runs", i.runs},                 {"measurements", i.measurements},
                {"best", i.best},                 {"binaries", i.binaries},
                {"misses", i.misses}};
    out["warm_ranges"] = warm_ranges_json(store.warm_ranges());
    fmt::print("{}\n", text(out));
    return;
  }
  fmt::print("database        {}\n", i.path.string());
  fmt::print("schema version  {}\n", i.schema_version);
  fmt::print("journal mode    {}\n", i.journal_mode);
  fmt::print("size            {} (+ {} write-ahead log)\n", human_bytes(i.file_bytes), human_bytes(i.wal_bytes));
  fmt::print("devices         {}\n", i.devices);
  fmt::print("toolchains      {}\n", i.toolchains);
  fmt::print("kernels         {}\n", i.kernels);
  fmt::print("runs            {}\n", i.runs);
  fmt::print("measurements    {}\n", i.measurements);
  fmt::print("best entries    {}\n", i.best);
  fmt::print("binaries        {}\n", i.binaries);
  fmt::print("untuned misses  {}\n", i.misses);
  for (const WarmRange& w : store.warm_ranges())
    fmt::print("warm range      {} {} NVRTC {} {}: {} binaries ({} failed), {} probe shapes, {}\n", w.kernel_name,
               w.arch, w.nvrtc_version, w.range, w.binaries, w.failed, w.probe_shapes, w.warmed_at);
}

}  // namespace

void add_cache_commands(CLI::App& app) {
  auto options = std::make_shared<CacheOptions>();
  CLI::App* cache = app.add_subcommand("cache", "Look into, export, merge and clean the tuning database");
  cache->require_subcommand(1);
  cache->fallthrough();  // --db may also follow the subcommand
  cache->add_option("--db", options->db, "Database file (default: $MLATUNE_DB, else ./mlatune.db)");

  CLI::App* show_cmd = cache->add_subcommand("show", "List measurements");
  show_cmd->add_option("--kernel", options->kernel, "Only this kernel");
  show_cmd->add_option("--shape", options->shape, "Only this shape, e.g. B=2,T=32,H=4,D=16,R=24");
  show_cmd->add_flag("--json", options->json_output, "JSON instead of a table");
  show_cmd->callback([options] { show(*options); });

  CLI::App* best_cmd = cache->add_subcommand("best", "The best config per kernel, device, toolchain and shape");
  best_cmd->add_flag("--json", options->json_output, "JSON instead of a table");
  best_cmd->callback([options] { best(*options); });

  CLI::App* export_cmd = cache->add_subcommand("export", "Write every measurement as CSV or JSON");
  export_cmd->add_option("--format", options->format, "csv or json")
      ->required()
      ->check(CLI::IsMember({"csv", "json"}));
  export_cmd->add_option("--output,-o", options->output, "File to write (default: stdout)");
  export_cmd->add_flag("--force", options->force,
                       "Overwrite --output even if it is an SQLite database (never the --db itself)");
  export_cmd->callback([options] { export_measurements(*options); });

  CLI::App* merge_cmd = cache->add_subcommand(
      "merge", "Add other databases' results (shards from other machines or GPUs); idempotent");
  merge_cmd->add_option("other", options->others, "The database(s) to merge in, one after the other")->required();
  merge_cmd->callback([options] { merge(*options); });

  CLI::App* stale_cmd = cache->add_subcommand(
      "stale", "List entries made under a template, parameter definitions or NVRTC that no longer hold");
  stale_cmd->add_option("--space", options->spaces,
                        "Current space file(s) (default: each kernel's space file from its latest run)");
  stale_cmd->add_flag("--json", options->json_output, "JSON instead of a table");
  stale_cmd->callback([options] { stale(*options); });

  CLI::App* prune_cmd = cache->add_subcommand("prune", "Remove the entries that `stale` lists");
  prune_cmd->add_option("--space", options->spaces,
                        "Current space file(s) (default: each kernel's space file from its latest run)");
  prune_cmd->callback([options] { prune(*options); });

  CLI::App* vacuum_cmd = cache->add_subcommand(
      "vacuum", "Compact the database file (binaries stored before zstd are repacked with it first)");
  vacuum_cmd->callback([options] { vacuum(*options); });

  CLI::App* info_cmd = cache->add_subcommand("info", "Schema version, counts and size");
  info_cmd->add_flag("--json", options->json_output, "JSON instead of text");
  info_cmd->callback([options] { info(*options); });

  add_portable_commands(*cache, std::shared_ptr<const std::string>(options, &options->db));
  add_warm_command(*cache, std::shared_ptr<const std::string>(options, &options->db));
  add_regret_command(*cache, std::shared_ptr<const std::string>(options, &options->db));
  add_trim_command(*cache, std::shared_ptr<const std::string>(options, &options->db));
}

}  // namespace mlatune::cli
