#include "core/launch_issue.h"

#include <fmt/format.h>

#include "core/launch_limits.h"

namespace mlatune {

namespace {

KernelLaunch kernel_launch(const LoadedKernel* kernel, const LaunchGeometry& g) {
  KernelLaunch launch;
  launch.kernel = kernel;
  for (int i = 0; i < 3; ++i) {
    launch.grid[i] = g.grid[i];
    launch.block[i] = g.block[i];
  }
  launch.shared_bytes = g.shared_bytes;
  return launch;
}

}  // namespace

LoadedEntry::LoadedEntry(std::string_view image, const std::string& entry)
    : kernel(image, entry), attributes(kernel.attributes()) {}

LoadedEntry::LoadedEntry(const LoadedEntry& loaded, const std::string& entry)
    : kernel(loaded.kernel.sibling(entry)), attributes(kernel.attributes()) {}

LaunchSequence launch_sequence(const LaunchSteps& steps, const LoadedKernel* main,
                               const LoadedKernel* prologue) {
  LaunchSequence sequence;
  sequence.main = kernel_launch(main, steps.geometry);
  if (steps.prologue) sequence.prologue = kernel_launch(prologue, steps.prologue->geometry);
  return sequence;
}

int allow_dynamic_shared(LoadedEntry& entry, std::int64_t bytes) {
  if (bytes <= entry.shared_allowed) return 0;
  int code = entry.kernel.set_max_dynamic_shared(bytes);
  if (code != 0) {
    cuda_take_last_error();
    return code;
  }
  entry.shared_allowed = bytes;
  return 0;
}

LaunchReadiness prepare_launch(const LaunchSteps& steps, LoadedEntry& main, LoadedEntry* prologue,
                               const DeviceProperties& device) {
  LaunchReadiness readiness;
  // Every limit is named before the GPU is asked for anything.
  readiness.refusal = limit_refusal(steps, main.attributes,
                                    prologue ? &prologue->attributes : nullptr, device);
  if (!readiness.refusal.empty()) return readiness;
  if (int code = allow_dynamic_shared(main, steps.geometry.shared_bytes); code != 0) {
    readiness.opt_in = {code, LaunchStep::main};
    return readiness;
  }
  if (steps.prologue) {
    if (int code = allow_dynamic_shared(*prologue, steps.prologue->geometry.shared_bytes); code != 0)
      readiness.opt_in = {code, LaunchStep::prologue};
  }
  return readiness;
}

std::string launch_error_text(const LaunchStatus& status, std::string_view what) {
  return fmt::format("{}{}: {} ({})", status.step == LaunchStep::prologue ? "prologue: " : "",
                     what, cuda_error_string(status.code), cuda_error_name(status.code));
}

}  // namespace mlatune
