// The GPU this process would run on, found through the static CUDA runtime.
// On a machine without a driver or a GPU, detection returns a plain reason
// instead of failing: compiling for an explicit architecture still works there.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace mlatune {

/// What names one GPU: the fields the store keeps of a device and compares
/// when it looks one up.  A driver update makes a new identity on purpose:
/// times measured under another driver are not taken as this device's.
struct DeviceIdentity {
  std::string name;            // "NVIDIA H200"
  std::string arch;            // "sm_90"
  int sm_count = 0;
  std::int64_t memory_bytes = 0;
  std::string driver_version;  // "13.0" (the CUDA version the driver supports)
  bool operator==(const DeviceIdentity&) const = default;
};

/// What the tuner needs to know about a GPU (device 0 of this process): its
/// identity, and properties that size the work but do not name the device
/// (the store keeps none of them).  It derives from its identity so that
/// `device.name` reads as before.  It has no operator== of its own, on
/// purpose: a detected device and one read back from the store differ in the
/// properties, so `a == b` would never hold; compare `a.identity()`.
struct DeviceInfo : DeviceIdentity {
  std::int64_t l2_bytes = 0;
  std::int64_t max_shared_per_block_optin = 0;  // bytes, with the opt-in attribute
  const DeviceIdentity& identity() const { return *this; }
  bool operator==(const DeviceInfo&) const = delete;
};

/// Device 0, or nullopt when there is none; then *why_not (when given) says
/// why in plain words, e.g. "no CUDA driver found (libcuda.so.1 absent)" or
/// "no GPU".  Never throws for a missing driver or device.
std::optional<DeviceInfo> detect_device(std::string* why_not = nullptr);

}  // namespace mlatune
