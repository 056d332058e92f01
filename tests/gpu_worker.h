// What the GPU tests that go through a worker process share: the options
// that start this build's mlatune-worker, and one probe (run in a worker,
// never in the test process) of whether a GPU is usable, so that every test
// can skip with the reason.
#pragma once
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "tuner/worker/client.h"

namespace mlatune {

inline WorkerOptions worker_options() {
  WorkerOptions options;
  // MLATUNE_WORKER, when set, names the worker (test binaries copied away
  // from their build tree, e.g. to a GPU machine); else this build's.
  const char* chosen = std::getenv("MLATUNE_WORKER");
  options.executable = chosen && *chosen ? std::filesystem::path(chosen)
                                         : std::filesystem::path(MLATUNE_BINARY_DIR) / "mlatune-worker";
  return options;
}

/// Asks a worker once whether a GPU is usable.
inline const DeviceReport& gpu() {
  static const DeviceReport report = [] {
    Worker worker(worker_options());
    return worker.probe_device();
  }();
  return report;
}

}  // namespace mlatune

#define MLATUNE_REQUIRE_GPU() \
  if (!::mlatune::gpu().usable) GTEST_SKIP() << "no GPU: " << ::mlatune::gpu().reason
