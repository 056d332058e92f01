#include <CLI/CLI.hpp>
#include "cli/commands.h"
namespace mlatune::cli {
void add_cache_commands(CLI::App& app) { app.add_subcommand("cache", "(being written)"); }
}  // namespace mlatune::cli
