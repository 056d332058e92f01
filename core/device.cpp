#include "core/device.h"

#include "core/cuda.h"

namespace mlatune {

std::optional<DeviceInfo> detect_device(std::string* why_not) {
  GpuProbe probe = probe_gpu(0);
  if (!probe.usable) {
    if (why_not) *why_not = probe.reason;
    return std::nullopt;
  }
  return probe.device.info();
}

}  // namespace mlatune
