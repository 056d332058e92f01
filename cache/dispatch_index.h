// The dispatcher's decision table: which config runs a kernel family at a
// shape, built once from the store's best entries and needing no GPU.
//
// Only entries of the space's current kernel version (template and definition
// hashes) and of this toolchain count.  An entry of this device at the very
// shape is a hit; otherwise the config of the closest tuned shape (this
// device's entries first, then other devices' as guidance) that the space
// accepts at the requested shape is used; otherwise the space's default
// config, or the first valid one.  Every borrowed config is re-checked
// against the constraints and the launch geometry at the requested shape.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/store.h"
#include "core/compiler.h"
#include "core/device.h"
#include "core/space.h"

namespace mlatune {

/// Why a config was chosen.
enum class ChoiceReason {
  hit,          // tuned at this shape on this device
  nearest,      // tuned at another shape (or on another device), valid here
  default_config,  // the space's default config
  first_valid,  // the default is invalid here: the first valid config
  none,         // no config of the space can run this shape
};
std::string_view to_string(ChoiceReason);

/// The decision for one shape.
struct Choice {
  ChoiceReason reason = ChoiceReason::none;
  Config config;             // empty when reason is none
  std::string config_text;   // canonical text of config
  /// The tuned shape whose best config was taken (hit and nearest).
  std::optional<Shape> source_shape;
  std::string source_device;  // the device it was tuned on (hit and nearest)
  double tuned_median_us = 0; // its measured time there (hit and nearest)
  /// Names the cubin of config at this shape for this index's architecture
  /// and NVRTC: a binary stored under another key is never used.
  BinaryKey binary;
  /// One readable line for logs: the reason and where the config came from.
  std::string explanation;
  bool ok() const { return reason != ChoiceReason::none; }
};

/// What the index is built for: the device launches run on (its arch names
/// the binaries) and the toolchain that compiles them.
struct DispatchTarget {
  DeviceInfo device;
  ToolchainInfo toolchain;
};

/// Thread safety: immutable after build(); choose() may run on many threads.
/// Holds a reference to the space, which must outlive it.
class DispatchIndex {
 public:
  /// Reads all best entries once (the store may be read-only).
  static DispatchIndex build(Store& store, const SearchSpace& space, DispatchTarget target);

  Choice choose(const Shape& shape) const;

  /// A stored binary for `choice`, or nullopt when absent or when its record
  /// says it was made for another architecture, NVRTC, kernel or template
  /// (a key collision must not load a foreign cubin).
  std::optional<BinaryRecord> stored_binary(Store& store, const Choice& choice) const;
  /// The record to store for a binary compiled for `choice`.
  BinaryRecord binary_record(const CompiledBinary& binary) const;

  const SearchSpace& space() const { return *space_; }
  const DispatchTarget& target() const { return target_; }
  /// Best entries of the current kernel version and toolchain, all devices.
  std::size_t entries() const { return entries_.size(); }
  /// Entries ignored: other kernel versions, toolchains, unreadable shapes.
  std::size_t ignored() const { return ignored_; }

 private:
  struct Entry {
    Shape shape;
    Config config;
    std::string config_text;
    std::string device_name;
    bool this_device = false;
    double median_us = 0;
  };
  DispatchIndex(const SearchSpace& space, DispatchTarget target);
  void finish(Choice& choice, const Shape& shape) const;

  const SearchSpace* space_;
  DispatchTarget target_;
  Compiler compiler_;
  std::vector<Entry> entries_;  // this device's first, then by shape
  std::size_t ignored_ = 0;
};

}  // namespace mlatune
