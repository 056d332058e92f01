// The GPU this process would run on, found through the static CUDA runtime.
// On a machine without a driver or a GPU, detection returns a plain reason
// instead of failing: compiling for an explicit architecture still works there.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace mlatune {

/// What the tuner needs to know about a GPU (device 0 of this process).
struct DeviceInfo {
  std::string name;            // "NVIDIA H200"
  std::string arch;            // "sm_90"
  int sm_count = 0;
  std::int64_t memory_bytes = 0;
  std::string driver_version;  // "13.0" (the CUDA version the driver supports)
  std::int64_t l2_bytes = 0;
  std::int64_t max_shared_per_block_optin = 0;  // bytes, with the opt-in attribute
  bool operator==(const DeviceInfo&) const = default;
};

/// Device 0, or nullopt when there is none; then *why_not (when given) says
/// why in plain words, e.g. "no CUDA driver found (libcuda.so.1 absent)" or
/// "no GPU".  Never throws for a missing driver or device.
std::optional<DeviceInfo> detect_device(std::string* why_not = nullptr);

}  // namespace mlatune
