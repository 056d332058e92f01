// Warm-up: compile ahead of time every binary the dispatcher may choose for
// the shapes of a box, and store them, so that a first call there loads a
// cubin instead of running NVRTC (`mlatune cache warm`).  Needs no GPU: the
// architecture is the index's target.
//
// For each probe shape (tuner/warm_probes.h) the binaries are the index's
// choice (DispatchIndex::choose) and the standing configs (those the
// dispatcher may run at any shape: the space's default) where they are valid.
// Binaries already stored under their key for this architecture, NVRTC,
// kernel and template are not compiled again, so a second warm-up of the
// same range compiles nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cache/dispatch_index.h"
#include "cache/store.h"
#include "tuner/shape_box.h"
#include "tuner/warm_probes.h"

namespace mlatune {

/// The configs the dispatcher may run at any shape, whatever was tuned.
std::vector<Config> standing_configs(const SearchSpace& space);

/// Shapes and configs of the best entries the index uses (this kernel
/// version and toolchain, every device).
struct TunedEntries {
  std::vector<Shape> shapes;
  std::vector<Config> configs;           // distinct
  std::vector<DeviceIdentity> devices;   // distinct, in the store's order
};
TunedEntries tuned_entries(Store& store, const SearchSpace& space, const ToolchainInfo& toolchain);

/// One binary the dispatcher may choose in the box, with a probe shape at
/// which it is chosen (what it is compiled with).
struct WarmBinary {
  BinaryKey key;
  Config config;
  Shape shape;
};

/// What the probes found.
struct WarmPlan {
  ProbePlan probes;
  std::vector<WarmBinary> binaries;  // distinct keys, ordered by key
  std::map<ChoiceReason, std::uint64_t> reasons;  // probe shapes per choice reason
};

struct WarmOptions {
  ShapeBox box;
  unsigned jobs = 0;  // probing and compiling threads; 0: one per core
  std::uint64_t max_probe_shapes = default_max_probe_shapes;
};

/// The probe shapes of the box and the distinct binaries chosen there.
WarmPlan plan_warm(const DispatchIndex& index, const TunedEntries& tuned, const WarmOptions& options);

struct WarmReport {
  WarmPlan plan;
  std::uint64_t already_stored = 0;
  std::uint64_t compiled = 0;
  std::uint64_t failed = 0;
  std::string first_failure;  // the first failure's message, when there is one
  double seconds = 0;         // wall time of the whole warm-up
};

/// Plans, compiles what the store lacks with a compile pool, stores every new
/// binary and records the warmed range.  `progress` (may be empty) is called
/// after each binary is done with (done, total).
WarmReport warm(Store& store, const DispatchIndex& index, const WarmOptions& options,
                const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

}  // namespace mlatune
