// worker_parent: a stand-in for the tuner in tests of the worker's lifetime
// (tests/worker_lifetime_test.cpp).  Starts a worker through the real client,
// prints "worker <pid>", then leaves it idle or keeps it busy (a request that
// never returns) until this process is killed, or ends normally ("return").
//   worker_parent <mlatune-worker> idle|busy|return
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "tuner/worker/client.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: worker_parent <mlatune-worker> idle|busy|return\n");
    return 2;
  }
  const std::string mode = argv[2];
  mlatune::WorkerOptions options;
  options.executable = argv[1];
  options.allow_test_faults = true;
  options.timeout_floor_s = 3600;  // a hang is what "busy" wants
  mlatune::Worker worker(options);
  worker.probe_device();
  std::printf("worker %d\n", worker.process_id().value_or(-1));
  std::fflush(stdout);
  if (mode == "busy") worker.test_fault("hang");
  if (mode == "idle")
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  return 0;
}
