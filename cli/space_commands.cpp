#include <CLI/CLI.hpp>
#include "cli/commands.h"
namespace mlatune::cli {
void add_space_commands(CLI::App& app) { app.add_subcommand("space", "(being written)"); }
}  // namespace mlatune::cli
