// mlatune cache trim: drop the stored binaries the dispatcher never loads
// (tuner/binary_trim.h).  Needs no GPU.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/store.h"
#include "cli/commands.h"
#include "cli/option_checks.h"
#include "core/error.h"
#include "core/space.h"
#include "tuner/binary_trim.h"

namespace mlatune::cli {
namespace {

struct TrimCommandOptions {
  std::string db;
  std::string space_file;
  TrimOptions trim;
  bool json = false;
};

// What a trimmed database costs later, in one sentence for both outputs.
constexpr const char* what_recompiles =
    "a sweep resumed or run again at a shape it measured compiles nothing again (it skips what it measured there); "
    "a dropped config is compiled again where another shape with the same compiled values or another GPU of the "
    "same architecture needs it";

void trim_command(const TrimCommandOptions& o, const std::string& cache_db) {
  const SearchSpace space = SearchSpace::load(o.space_file);
  const std::filesystem::path database = database_path(o.db.empty() ? cache_db : o.db);
  std::error_code ec;
  if (!std::filesystem::exists(database, ec))
    throw InputError(fmt::format("no database at {} (give --db or set MLATUNE_DB)", database.string()));
  Store store = Store::open(database, o.trim.dry_run ? StoreMode::read_only : StoreMode::read_write);
  const TrimReport r = trim_binaries(store, space, o.trim);
  if (o.json) {
    nlohmann::json out = {{"kernel", space.kernel_name()}, {"dry_run", o.trim.dry_run},
                          {"considered", r.considered},    {"considered_bytes", r.considered_bytes},
                          {"kept", r.kept},                {"kept_bytes", r.kept_bytes},
                          {"dropped", r.dropped},          {"dropped_bytes", r.dropped_bytes},
                          {"for_best", r.for_best},        {"for_warm", r.for_warm},
                          {"warm_ranges", r.warm_ranges},  {"other_versions", r.other_versions},
                          {"notes", r.notes},              {"recompiles", what_recompiles}};
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("{} binaries of {} (this template version and NVRTC): {}\n", r.considered, space.kernel_name(),
             human_bytes(static_cast<std::uintmax_t>(r.considered_bytes)));
  fmt::print("kept     {} ({}): {} loaded by hits at best entries, {} by first calls in {} warmed range(s)\n",
             r.kept, human_bytes(static_cast<std::uintmax_t>(r.kept_bytes)), r.for_best, r.for_warm, r.warm_ranges);
  fmt::print("{}  {} ({})\n", o.trim.dry_run ? "to drop" : "dropped", r.dropped,
             human_bytes(static_cast<std::uintmax_t>(r.dropped_bytes)));
  if (r.other_versions)
    fmt::print("left     {} of other template versions or NVRTC (`mlatune cache stale` / `prune`)\n",
               r.other_versions);
  for (const std::string& note : r.notes) fmt::print("note:    {}\n", note);
  fmt::print("then:    {}{}\n", what_recompiles,
             o.trim.dry_run || r.dropped == 0 ? "" : "; `mlatune cache vacuum` gives the file's free pages back");
}

}  // namespace

void add_trim_command(CLI::App& cache, std::shared_ptr<const std::string> cache_db) {
  auto options = std::make_shared<TrimCommandOptions>();
  CLI::App* trim = cache.add_subcommand(
      "trim", "Drop the stored binaries of a kernel family that the dispatcher never loads (keeps those of the "
              "best entries and of the warmed ranges)");
  trim->add_option("--space", options->space_file, "search-space YAML file of the family")->required();
  trim->add_option("--db", options->db, "database (default: $MLATUNE_DB, else ./mlatune.db)");
  trim->add_flag("--dry-run", options->trim.dry_run, "count what would be dropped; change nothing");
  trim->add_option("--max-binaries-per-config", options->trim.max_binaries_per_config,
                   "the bound the warmed ranges were planned with (cache warm's option; default 256)")
      ->check(whole_number(1, 1'000'000));
  trim->add_option("--jobs,-j", options->trim.jobs, "planning threads (default: one per core)");
  trim->add_flag("--json", options->json, "print the report as JSON");
  trim->callback([options, cache_db] { trim_command(*options, *cache_db); });
}

}  // namespace mlatune::cli
