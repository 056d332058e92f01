// Issuing a planned launch (core/launch_plan.h) on a stream: the loaded
// entries of a cubin, the one place that opts them in to more dynamic shared
// memory, and the prologue-then-main sequence.  The evaluator (tuner/) and
// the dispatcher (cache/) both go through it; the dispatcher's cache hit
// calls LaunchSequence::issue, which takes no lock and allocates nothing.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "core/cuda.h"
#include "core/launch_plan.h"

namespace mlatune {

/// One entry of a cubin, loaded, with its attributes (read once) and the
/// dynamic shared memory it has been allowed so far.  The allowance belongs
/// to the kernel, not to a launch: every shape that launches it shares it,
/// so it is only ever raised.
struct LoadedEntry {
  /// Throws CudaError when the image cannot be loaded or lacks `entry`.
  LoadedEntry(std::string_view image, const std::string& entry);
  /// Another entry of `loaded`'s image, which is not loaded again.
  LoadedEntry(const LoadedEntry& loaded, const std::string& entry);
  LoadedKernel kernel;
  KernelAttributes attributes;
  std::int64_t shared_allowed = 0;
};

/// Which kernel of a sequence a CUDA error came from.
enum class LaunchStep { prologue, main };

/// The first CUDA error code of a step (0: none) and the kernel that gave it.
struct LaunchStatus {
  int code = 0;
  LaunchStep step = LaunchStep::main;
  bool ok() const { return code == 0; }
};

/// One kernel launch, ready to issue.
struct KernelLaunch {
  const LoadedKernel* kernel = nullptr;
  std::int64_t grid[3] = {1, 1, 1};
  std::int64_t block[3] = {1, 1, 1};
  std::int64_t shared_bytes = 0;
};

/// The prologue (where one runs) and then the main kernel, back to back on
/// one stream with one argument list.
struct LaunchSequence {
  KernelLaunch prologue;  // kernel null: no prologue
  KernelLaunch main;

  /// Queues the kernels; stops at the first refused launch.  No allocation.
  LaunchStatus issue(void** arguments, void* stream) const {
    if (prologue.kernel) {
      int code = prologue.kernel->launch(prologue.grid, prologue.block, prologue.shared_bytes,
                                         arguments, stream);
      if (code != 0) return {code, LaunchStep::prologue};
    }
    return {main.kernel->launch(main.grid, main.block, main.shared_bytes, arguments, stream),
            LaunchStep::main};
  }
};

/// The sequence of `steps` with the given kernels; `prologue` is used only
/// where steps.prologue is set.  Needs no GPU (the kernels are not touched).
LaunchSequence launch_sequence(const LaunchSteps& steps, const LoadedKernel* main,
                               const LoadedKernel* prologue);

/// Allows `entry` `bytes` of dynamic shared memory when it is above what it
/// already may use.  Returns the CUDA error code (0 on success), cleared from
/// the thread's last error: a refusal is a property of the config.
int allow_dynamic_shared(LoadedEntry& entry, std::int64_t bytes);

/// Whether a sequence can be issued: a device limit it would break, or the
/// failed opt-in to dynamic shared memory of one of its kernels.
struct LaunchReadiness {
  std::string refusal;
  LaunchStatus opt_in;
  bool ok() const { return refusal.empty() && opt_in.ok(); }
};

/// Checks `steps` against `device` and the entries' attributes
/// (core/launch_limits.h), then opts each entry in to its dynamic shared
/// memory.  `prologue` must be set where steps.prologue is.
LaunchReadiness prepare_launch(const LaunchSteps& steps, LoadedEntry& main, LoadedEntry* prologue,
                               const DeviceProperties& device);

/// "<what>: <description> (<name>)" for a CUDA error code of a launch step,
/// with "prologue: " in front where the prologue gave it.
std::string launch_error_text(const LaunchStatus& status, std::string_view what);

}  // namespace mlatune
