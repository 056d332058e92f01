// Warm-up: compile ahead of time every binary the dispatcher may need for
// the shapes of a box, and store them, so that a first call there loads a
// cubin instead of running NVRTC (`mlatune cache warm`).  Needs no GPU: the
// architecture is the index's target.
//
// The candidates are the configs the dispatcher runs without changing them:
// the tuned configs (this kernel version and toolchain), the space's
// fallbacks and its default.  Each gets one binary per tuple of compiled
// shape values it can run in the box (tuner/warm_probes.h), unless it needs
// more than a bound (it compiles a variable exactly over a wide range): such
// a config is reported, not compiled; at its shapes the dispatcher runs a
// warmed stand-in while the exact binary compiles in the background.  A
// repaired config (a tuned one changed to fit a shape) is not a candidate
// either, for the same reason.  What guarantees no NVRTC on a first call is
// then the coverage check (tuner/warm_coverage.h): at sampled shapes of the
// box, one of the dispatcher's ranked configs has a warmed or stored binary.
// Binaries already stored under their key for this architecture, NVRTC,
// kernel and template are not compiled again, so a second warm-up of the
// same range compiles nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cache/dispatch_index.h"
#include "cache/store.h"
#include "tuner/compile_pool.h"
#include "tuner/shape_box.h"
#include "tuner/warm_coverage.h"
#include "tuner/warm_probes.h"

namespace mlatune {

/// Shapes and configs of the best entries the index uses (this kernel
/// version and toolchain, every device).
struct TunedEntries {
  std::vector<Shape> shapes;
  std::vector<Config> configs;           // distinct
  std::vector<std::pair<Shape, Config>> entries;  // each best entry: its shape and config
  std::vector<DeviceIdentity> devices;   // distinct, in the store's order
};
TunedEntries tuned_entries(Store& store, const SearchSpace& space, const ToolchainInfo& toolchain);

/// A config the dispatcher may run unchanged, and why: "fallback 1",
/// "default" or "tuned".
struct CandidateConfig {
  Config config;
  std::string origin;
};
/// The fallbacks in order, the default, then the tuned configs; each once
/// (under its first origin).
std::vector<CandidateConfig> candidate_configs(const SearchSpace& space, const TunedEntries& tuned);

/// One binary to have stored, with a shape it is compiled at.
struct WarmBinary {
  BinaryKey key;
  Config config;
  Shape shape;
};

/// One candidate's share of the plan.
struct PlannedConfig {
  std::string origin;
  ConfigBinaries binaries;
};

/// What planning found.
struct WarmPlan {
  std::vector<PlannedConfig> configs;  // every candidate, in candidate order
  std::vector<WarmBinary> binaries;    // distinct keys, ordered by key
  /// Of those, binaries that only the tuned entries inside the box need at
  /// their own shapes (a hit there loads exactly that binary), for configs
  /// that cannot be warmed over the whole box (a variable compiled exactly).
  std::size_t tuned_shape_binaries = 0;
  /// Representative shapes over all warmable configs.
  std::uint64_t shapes() const;
};

struct WarmOptions {
  ShapeBox box;
  unsigned jobs = 0;  // planning, compiling and sampling threads; 0: one per core
  std::size_t max_binaries_per_config = default_max_binaries_per_config;
  std::size_t samples = default_coverage_samples;  // random shapes of the coverage check
  std::uint64_t seed = 1;
  CompileIn compile_in = CompileIn::threads;  // where NVRTC runs (CompilePool); `cache warm`: processes
};

/// The candidates and the binaries each needs over the box.
WarmPlan plan_warm(const DispatchIndex& index, const TunedEntries& tuned, const WarmOptions& options);

struct WarmReport {
  WarmPlan plan;
  std::uint64_t already_stored = 0;
  std::uint64_t compiled = 0;
  std::uint64_t failed = 0;
  std::string first_failure;  // the first failure's message, when there is one
  CoverageReport coverage;
  double seconds = 0;         // wall time of the whole warm-up
  CompileIn compiled_in = CompileIn::threads;  // where NVRTC ran (threads when no compile program was found)
  unsigned compile_threads = 0;
};

/// Plans, compiles what the store lacks with a compile pool, stores every new
/// binary, records the warmed range and checks the coverage.  `progress` (may be empty) is called
/// after each binary is done with (done, total).
WarmReport warm(Store& store, const DispatchIndex& index, const WarmOptions& options,
                const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

}  // namespace mlatune
