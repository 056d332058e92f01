#include <CLI/CLI.hpp>
#include "cli/commands.h"
namespace mlatune::cli {
void add_tune_commands(CLI::App& app) { app.add_subcommand("tune", "(being written)"); }
}  // namespace mlatune::cli
