// mlatune report: a self-contained HTML page about a database (the layout is
// cli/report_page.cpp).  This file reads what the page shows from the store,
// restricted to one kernel family with --space, and writes the file whole or
// not at all.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cache/store.h"
#include "cli/commands.h"
#include "cli/report_page.h"
#include "core/error.h"
#include "core/space.h"

namespace mlatune::cli {
namespace {

namespace fs = std::filesystem;

struct ReportOptions {
  std::string db;
  std::string space;
  std::string out;
};

/// Keeps what belongs to `kernel`, the space's parameter order, and says so.
void restrict_to_space(ReportInput& input, const fs::path& space_file) {
  const SearchSpace space = SearchSpace::load(space_file);
  const std::string& kernel = space.kernel_name();
  std::erase_if(input.measurements, [&](const MeasurementRecord& r) { return r.kernel.name != kernel; });
  std::erase_if(input.best, [&](const BestRecord& b) { return b.kernel.name != kernel; });
  std::erase_if(input.runs, [&](const RunRecord& r) { return r.kernel_name != kernel; });
  ParameterOrder order;
  for (const Parameter& p : space.parameters()) order.emplace_back(p.name, p.text);
  input.parameters = std::move(order);
  input.scope = fmt::format("Only kernel {} (from {}); the other kernels are left out.", kernel,
                            space_file.filename().string());
}

ReportInput read_report_input(const fs::path& database, const std::string& space_file) {
  Store store = Store::open(database, StoreMode::read_only);
  ReportInput input;
  input.database = database;
  input.info = store.info();
  input.runs = store.runs();
  input.best = store.all_best();
  input.measurements = store.measurements();
  if (!space_file.empty()) restrict_to_space(input, space_file);
  return input;
}

/// Writes beside the target and renames, so that a reader never sees half a
/// page and a failed write leaves the old file as it was.
void write_whole(const fs::path& out, const std::string& text) {
  fs::path partial = out;
  partial += ".partial";
  {
    std::ofstream file(partial, std::ios::binary | std::ios::trunc);
    if (!file) throw EnvironmentError(fmt::format("cannot write {}: {}", partial.string(), std::strerror(errno)));
    file << text;
    file.close();
    if (!file) throw EnvironmentError(fmt::format("writing {} failed: {}", partial.string(), std::strerror(errno)));
  }
  std::error_code ec;
  fs::rename(partial, out, ec);
  if (ec) {
    fs::remove(partial, ec);
    throw EnvironmentError(fmt::format("cannot move the report to {}: {}", out.string(), ec.message()));
  }
}

void report(const ReportOptions& o) {
  const fs::path database = database_path(o.db);
  const fs::path out = o.out;
  std::error_code ec;
  if (fs::equivalent(out, database, ec))
    throw InputError(fmt::format("--out {} is the database itself; expected an .html file", out.string()));
  ReportInput input = read_report_input(database, o.space);
  const std::string page = report_html(input);
  write_whole(out, page);
  fmt::print("wrote {} ({} bytes): {} measurements, {} best entries, {} runs\n", out.string(), page.size(),
             input.measurements.size(), input.best.size(), input.runs.size());
}

}  // namespace

void add_report_commands(CLI::App& app) {
  auto options = std::make_shared<ReportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Write a self-contained HTML page about a database: best configs, time per parameter value, "
                "spread of repeated timings, search progress");
  cmd->add_option("--db", options->db, "database file (default: $MLATUNE_DB, else ./mlatune.db)");
  cmd->add_option("--space", options->space,
                  "only this space's kernel family, its parameters in the space's order");
  cmd->add_option("--out,-o", options->out, "the HTML file to write")->required();
  cmd->callback([options] { report(*options); });
}

}  // namespace mlatune::cli
