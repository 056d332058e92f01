#include "cache/dispatch_launch.h"

#include <fmt/format.h>

namespace mlatune {

std::string dispatch_refusal(const LaunchPlan& plan, std::string_view where) {
  if (plan.ok()) return {};
  return fmt::format("{}: {}", where, plan.refusal);
}

DispatchLaunch dispatch_launch(const LaunchPlan& plan, const LoadedKernel* main,
                               const LoadedKernel* prologue) {
  DispatchLaunch launch;
  launch.sequence = launch_sequence(plan.steps, main, prologue);
  launch.arguments = plan.arguments.slots;
  launch.buffer_count = plan.arguments.buffer_count;
  for (std::size_t i = 0; i < launch.arguments.size(); ++i)
    if (launch.arguments[i].role == ArgumentRole::workspace) launch.workspace_positions.push_back(i);
  launch.workspace_bytes = plan.steps.workspace_bytes;
  return launch;
}

void point_arguments(const DispatchLaunch& launch, void* const* buffers, void** arguments) {
  const std::size_t n = launch.arguments.size();
  for (std::size_t i = 0; i < n; ++i) {
    const ArgumentSlot& slot = launch.arguments[i];
    const bool buffer = slot.role == ArgumentRole::input || slot.role == ArgumentRole::output;
    // cudaLaunchKernel only reads through these pointers.  A workspace's
    // packed value is 0: a null pointer unless point_workspaces replaces it.
    arguments[i] = buffer ? static_cast<void*>(const_cast<void**>(&buffers[slot.index]))
                          : static_cast<void*>(const_cast<std::uint64_t*>(&slot.packed));
  }
}

void point_workspaces(const DispatchLaunch& launch, void** arguments, void* const* workspaces) {
  for (std::size_t k = 0; k < launch.workspace_positions.size(); ++k)
    arguments[launch.workspace_positions[k]] = const_cast<void**>(&workspaces[k]);
}

}  // namespace mlatune
