// mlatune: parse options, run one subcommand, map errors to an exit code and
// one clear message.  0 success, 1 environment error, 2 bad input, 3 internal
// error (a bug in mlatune).
#include <cstdio>
#include <cstdlib>
#include <exception>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "core/compiler.h"
#include "core/error.h"

namespace mlatune::cli {

std::filesystem::path database_path(const std::string& db_option) {
  if (!db_option.empty()) return db_option;
  if (const char* env = std::getenv("MLATUNE_DB"); env && *env) return env;
  return "mlatune.db";
}

}  // namespace mlatune::cli

int main(int argc, char** argv) {
  mlatune::ensure_compute_cache_disabled(argv);
  CLI::App app{"mlatune: autotuning of CUDA kernel templates (NVRTC + SQLite)", "mlatune"};
  app.set_version_flag("--version", MLATUNE_VERSION);
  app.require_subcommand(1);
  mlatune::cli::add_space_commands(app);
  mlatune::cli::add_tune_commands(app);
  mlatune::cli::add_cache_commands(app);
  mlatune::cli::add_run_commands(app);
  mlatune::cli::add_report_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const mlatune::InputError& e) {
    fmt::print(stderr, "mlatune: error: {}\n", e.what());
    return 2;
  } catch (const mlatune::Error& e) {
    fmt::print(stderr, "mlatune: error: {}\n", e.what());
    return 1;
  } catch (const mlatune::InternalError& e) {
    fmt::print(stderr,
               "mlatune: internal error: {}\nThis is a bug in mlatune, not in your input or system; please "
               "report it with the command that caused it.\n",
               e.what());
    return 3;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mlatune: internal error: {}\n", e.what());
    return 1;
  }
  return 0;
}
