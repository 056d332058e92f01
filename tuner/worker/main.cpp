// mlatune-worker: the process in which candidates run (tuner/worker/client.h).
// Started by the tuner with the request pipe on fd 3, the reply pipe on fd 4
// and "--parent-pid <the tuner's pid>"; it dies with the tuner
// (tuner/worker/lifeline.h).
#include <csignal>
#include <cstdio>
#include <exception>

#include "core/compiler.h"
#include "tuner/worker/lifeline.h"
#include "tuner/worker/server.h"

namespace {
constexpr int request_fd = 3;
constexpr int reply_fd = 4;
}  // namespace

int main(int argc, char** argv) {
  try {
    // Before anything slow: a tuner killed now must not leave us behind.
    if (auto parent = mlatune::parent_pid_argument(argc, argv)) mlatune::die_with_parent(*parent);
    // A terminal's Ctrl-C reaches the whole process group. The tuner stops
    // between candidates and we die with it; killed here mid-candidate, the
    // candidate would be recorded as having crashed the worker.
    std::signal(SIGINT, SIG_IGN);
    mlatune::ensure_compute_cache_disabled(argv);
    mlatune::exit_when_closed(request_fd);
    return mlatune::run_worker_server(request_fd, reply_fd);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "mlatune-worker: %s\n", error.what());
    return 1;
  }
}
