#include "core/launch_limits.h"

#include <fmt/format.h>

namespace mlatune {

namespace {

std::string extent_refusal(const LaunchGeometry& g, const DeviceProperties& device,
                           std::string_view what) {
  for (int i = 0; i < 3; ++i) {
    if (g.grid[i] <= 0 || g.block[i] <= 0)
      return fmt::format("{}grid ({}, {}, {}) and block ({}, {}, {}) must be positive", what,
                         g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2]);
    if (g.block[i] > device.max_block[i])
      return fmt::format("{}block dimension {} is {}, the device allows {}", what, "xyz"[i],
                         g.block[i], device.max_block[i]);
    if (g.grid[i] > device.max_grid[i])
      return fmt::format("{}grid dimension {} is {}, the device allows {}", what, "xyz"[i],
                         g.grid[i], device.max_grid[i]);
  }
  return {};
}

}  // namespace

std::string limit_refusal(const LaunchGeometry& g, const KernelAttributes& attributes,
                          const DeviceProperties& device, std::string_view what) {
  if (std::string why = extent_refusal(g, device, what); !why.empty()) return why;
  // Each extent is at most the device's (about 2^31), so the product fits.
  const std::int64_t threads = g.block[0] * g.block[1] * g.block[2];
  if (threads > device.max_threads_per_block)
    return fmt::format("{}{} threads per block, the device allows {}", what, threads,
                       device.max_threads_per_block);
  if (threads > attributes.max_threads_per_block)
    return fmt::format("{}{} threads per block, but with {} registers per thread this "
                       "kernel can launch at most {}",
                       what, threads, attributes.registers, attributes.max_threads_per_block);
  if (g.shared_bytes < 0) return fmt::format("{}negative dynamic shared memory", what);
  if (attributes.static_shared_bytes + g.shared_bytes > device.shared_per_block_optin)
    return fmt::format("{}{} bytes of shared memory per block ({} static + {} dynamic), "
                       "the device allows {}",
                       what, attributes.static_shared_bytes + g.shared_bytes,
                       attributes.static_shared_bytes, g.shared_bytes,
                       device.shared_per_block_optin);
  return {};
}

std::string limit_refusal(const LaunchSteps& steps, const KernelAttributes& main,
                          const KernelAttributes* prologue, const DeviceProperties& device) {
  if (std::string why = limit_refusal(steps.geometry, main, device); !why.empty()) return why;
  if (!steps.prologue) return {};
  if (!prologue) return "prologue: its kernel was not loaded";
  return limit_refusal(steps.prologue->geometry, *prologue, device, "prologue: ");
}

}  // namespace mlatune
