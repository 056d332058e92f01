// mlatune-worker: the process in which candidates run (tuner/worker/client.h).
// Started by the tuner with the request pipe on fd 3 and the reply pipe on fd 4.
#include <cstdio>
#include <exception>

#include "core/compiler.h"
#include "tuner/worker/server.h"

int main(int, char** argv) {
  mlatune::ensure_compute_cache_disabled(argv);
  try {
    return mlatune::run_worker_server(3, 4);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "mlatune-worker: %s\n", error.what());
    return 1;
  }
}
