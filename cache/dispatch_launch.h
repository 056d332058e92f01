// What the dispatcher keeps to launch one shape: made once from the shape's
// LaunchPlan (core/launch_plan.h) and the loaded kernels, then read without
// a lock by every later launch of the shape.  Kept out of the dispatcher so
// that a GPU-free test (tests/launch_plan_test.cpp) can compare it with what
// the evaluator launches for the same config and shape.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/launch_issue.h"
#include "core/launch_plan.h"

namespace mlatune {

struct DispatchLaunch {
  LaunchSequence sequence;  // what a hit reads first
  /// Per kernel argument: a caller's buffer, a packed scalar, or a workspace.
  std::vector<ArgumentSlot> arguments;
  std::size_t buffer_count = 0;
  std::vector<std::size_t> workspace_positions;  // argument indices of the workspaces
  /// Bytes per workspace where the prologue runs; empty elsewhere.
  std::vector<std::int64_t> workspace_bytes;

  bool ready() const { return sequence.main.kernel != nullptr; }
  bool runs_prologue() const { return sequence.prologue.kernel != nullptr; }
};

/// What the dispatcher reports for a shape whose plan refuses: "<where>:
/// <why>" (an InputError at launch: no config it could choose runs there);
/// empty when the plan can go on to its kernels.  `where` names the config
/// and the shape.
std::string dispatch_refusal(const LaunchPlan& plan, std::string_view where);

/// The launch of `plan` (which must be ok()) with the loaded kernels;
/// `prologue` is used only where the plan's prologue runs.  Needs no GPU.
DispatchLaunch dispatch_launch(const LaunchPlan& plan, const LoadedKernel* main,
                               const LoadedKernel* prologue);

/// Fills `arguments` (one per kernel argument) for a launch given only the
/// caller's buffers: each points at its buffer's entry in `buffers` or at the
/// stored packed scalar; a workspace's at a stored null pointer.  No
/// allocation: this is the cache hit.
void point_arguments(const DispatchLaunch& launch, void* const* buffers, void** arguments);

/// Points each workspace argument of a complete list at `workspaces[k]`,
/// storage the caller keeps alive until the launch call returns.
void point_workspaces(const DispatchLaunch& launch, void** arguments, void* const* workspaces);

}  // namespace mlatune
