// A kernel argument list that owns its values, as the worker launches it:
// 8 aligned bytes per argument (a device pointer or a packed scalar, laid out
// by core/launch_plan.h) and the array of pointers to them that
// cudaLaunchKernel reads.  Needs no GPU.
#pragma once
#include <cstddef>
#include <vector>

#include "core/launch_plan.h"

namespace mlatune {

class ArgumentList {
 public:
  ArgumentList() = default;
  /// The arguments of `layout` with device pointers `inputs` and `outputs`
  /// (one per input / output argument, each in launch order) and null
  /// workspaces.  Throws EnvironmentError when a count disagrees.
  ArgumentList(const ArgumentLayout& layout, const std::vector<void*>& inputs,
               const std::vector<void*>& outputs);
  // Moving keeps the heap storage, so the pointers stay valid; a copy would not.
  ArgumentList(ArgumentList&&) noexcept = default;
  ArgumentList& operator=(ArgumentList&&) noexcept = default;
  ArgumentList(const ArgumentList&) = delete;
  ArgumentList& operator=(const ArgumentList&) = delete;

  /// Points the workspace arguments at `pointers` (one per workspace
  /// argument, null for none).  Throws EnvironmentError for a count mismatch.
  void set_workspaces(const std::vector<void*>& pointers);

  /// The list cudaLaunchKernel takes.
  void** pointers() { return pointers_.data(); }
  std::size_t size() const { return pointers_.size(); }

 private:
  struct alignas(8) Slot {
    unsigned char bytes[8] = {};
  };
  std::vector<Slot> slots_;
  std::vector<void*> pointers_;
  std::vector<std::size_t> workspace_positions_;
};

}  // namespace mlatune
