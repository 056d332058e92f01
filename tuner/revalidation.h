// Re-validation of foreign best configs: a best entry measured on another
// device, or with another toolchain, is guidance only (the dispatcher never
// takes its time for this device's).  `mlatune cache revalidate` runs each
// such config at its shape through the normal sweep (validation and timing
// in the worker), so that it becomes this device's own measured result.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cache/store.h"
#include "core/device.h"
#include "core/space.h"
#include "tuner/given_configs.h"

namespace mlatune {

/// A foreign best entry to measure here.
struct ForeignEntry {
  std::string shape;
  std::string config;
  DeviceIdentity device;    // where it was measured
  ToolchainInfo toolchain;  // with what
  double median_us = 0;     // its time there
};

/// What a revalidation sweep evaluates.
struct RevalidationPlan {
  std::vector<ForeignEntry> foreign;  // in the store's order
  std::vector<Shape> shapes;          // each shape with a foreign entry, once, in that order
  GivenConfigs given;                 // the foreign configs, each at its own shape
  std::vector<std::string> unreadable;  // entries whose shape or config this space cannot read, and why
};

/// The best entries of `space`'s current kernel version made on another
/// device or with another toolchain than (`device`, `toolchain`).
RevalidationPlan plan_revalidation(Store& store, const SearchSpace& space, const DeviceIdentity& device,
                                   const ToolchainInfo& toolchain);

}  // namespace mlatune
