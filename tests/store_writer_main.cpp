// store_writer: a helper program for tests/store_process_test.cpp.  It writes
// measurements into a store as a tuning sweep would, one commit each, and
// prints "<id> <shape> <config>" on stdout after each commit, so that a test
// that kills it knows what it had committed.
//
//   store_writer DB WRITER COUNT
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>

#include "cache/store.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: store_writer DB WRITER COUNT\n");
    return 2;
  }
  try {
    const std::string db = argv[1];
    const int writer = std::atoi(argv[2]);
    const long count = std::atol(argv[3]);
    mlatune::Store store = mlatune::Store::open(db);
    auto kernel = store.ensure_kernel({"mla", "template-hash", "definition-hash"});
    auto device = store.ensure_device({"NVIDIA H200", "sm_90", 132, 150'000'000'000, "580.65"});
    auto toolchain = store.ensure_toolchain({"13.0", "0.1.0"});
    auto run = store.begin_run({kernel, device, toolchain, "mla.yaml", "kernel: mla\n", "random",
                                "{\"writer\": " + std::to_string(writer) + "}"});
    std::mt19937_64 rng(static_cast<std::uint64_t>(writer) * 7919 + 1);
    std::uniform_real_distribution<double> time_us(1.0, 100.0);
    for (long i = 0; i < count; ++i) {
      mlatune::Measurement m;
      m.run_id = run;
      m.shape = "B=" + std::to_string(i % 10) + ",T=32";
      m.config = "WRITER=" + std::to_string(writer) + ",I=" + std::to_string(i);
      if (i % 7 == 3) {
        m.outcome = mlatune::Outcome::compile_error;
        m.message = "error: identifier \"TILE\" is undefined";
      } else {
        m.outcome = mlatune::Outcome::ok;
        double median = time_us(rng);
        m.timing = mlatune::Timing{median, median * 0.95, median * 1.1, 50, 0.15, "events"};
        m.error = mlatune::ErrorFigures{1e-7, 2e-6};
      }
      std::int64_t id = store.record(m);
      std::printf("%lld %s %s\n", static_cast<long long>(id), m.shape.c_str(), m.config.c_str());
      std::fflush(stdout);
    }
    store.finish_run(run, mlatune::RunStatus::finished);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_writer: %s\n", e.what());
    return 1;
  }
}
