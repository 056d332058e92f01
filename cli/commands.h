// The mlatune program's subcommands.  Each add_*_commands registers a group of
// subcommands on the app; their callbacks do the work and report failure by
// throwing mlatune::InputError (exit 2) or another mlatune::Error (exit 1).
// Output goes to stdout; diagnostics to stderr.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace CLI {
class App;
}

namespace mlatune::cli {

void add_space_commands(CLI::App& app);  // mlatune space ...  (cli/space_commands.cpp)
void add_tune_commands(CLI::App& app);   // mlatune tune ...   (cli/tune_commands.cpp)
void add_cache_commands(CLI::App& app);  // mlatune cache ...  (cli/cache_commands.cpp)
void add_run_commands(CLI::App& app);    // mlatune run ...    (cli/run_commands.cpp)
void add_report_commands(CLI::App& app);  // mlatune report    (cli/report_commands.cpp)
/// mlatune cache export-best / import / revalidate (cli/portable_commands.cpp),
/// added to the `cache` command; `db` is its --db option.
void add_portable_commands(CLI::App& cache, std::shared_ptr<const std::string> db);
/// mlatune cache warm / cache regret, added to the `cache` subcommand;
/// `cache_db` is its --db (given before the subcommand's name).
void add_warm_command(CLI::App& cache, std::shared_ptr<const std::string> cache_db);    // cli/warm_commands.cpp
void add_regret_command(CLI::App& cache, std::shared_ptr<const std::string> cache_db);  // cli/regret_commands.cpp
void add_trim_command(CLI::App& cache, std::shared_ptr<const std::string> cache_db);    // cli/trim_commands.cpp

/// The database path: --db if given, else $MLATUNE_DB, else ./mlatune.db.
std::filesystem::path database_path(const std::string& db_option);

/// "812 B", "3.4 KiB", "12.7 MiB" (cli/cache_commands.cpp).
std::string human_bytes(std::uintmax_t bytes);

}  // namespace mlatune::cli
