// What the GPU tests that go through a worker process share: the options
// that start this build's mlatune-worker, and one probe (run in a worker,
// never in the test process) of whether a GPU is usable, so that every test
// can skip with the reason.
#pragma once
#include <filesystem>

#include <gtest/gtest.h>

#include "tuner/worker/client.h"

namespace mlatune {

inline WorkerOptions worker_options() {
  WorkerOptions options;
  options.executable = std::filesystem::path(MLATUNE_BINARY_DIR) / "mlatune-worker";
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
