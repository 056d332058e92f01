// The launch of one config at one shape, as a value: the entries that run
// (a prologue where the config has one there, then the main kernel) with
// their geometry, the workspace they share, and what each kernel argument
// receives.  The tuner's evaluator and the runtime dispatcher both launch
// from it (core/launch_limits.h checks it against a device,
// core/launch_issue.h issues it), so the two cannot drift apart.
//
// Needs no GPU.  "This config cannot run this shape" (an invalid geometry, a
// scalar its type cannot hold) is a refusal inside the value, never an
// exception.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/space.h"

namespace mlatune {

/// A second entry of the same cubin launched right before the main one.
struct PrologueLaunch {
  std::string entry;
  LaunchGeometry geometry;
};

/// The kernels of one launch and the scratch they share: what a compiled
/// candidate carries to the worker (tuner/evaluator.h) and what the
/// dispatcher issues.
struct LaunchSteps {
  std::string entry;
  LaunchGeometry geometry;
  /// Set where the config's prologue runs at the shape.
  std::optional<PrologueLaunch> prologue;
  /// Bytes of each workspace argument (launch order) where the prologue
  /// runs; empty otherwise (workspace arguments then get null pointers).
  std::vector<std::int64_t> workspace_bytes;
};

/// What one kernel argument receives: 8 aligned bytes, cudaLaunchKernel's
/// view of every argument type a space can declare.
struct ArgumentSlot {
  ArgumentRole role = ArgumentRole::input;
  /// input and output: the index among the caller's buffers (the space's
  /// input and output arguments in launch order, workspaces left out);
  /// workspace: the index among the workspace arguments; scalar: -1.
  int index = -1;
  /// scalar: the value as the kernel reads it, in the low bytes; else 0.
  std::uint64_t packed = 0;
};

/// Every kernel argument of a space at one shape, in launch order.  Depends
/// on the shape alone: scalar values may not use parameters (the parser
/// enforces it), so one layout serves every config.
struct ArgumentLayout {
  std::vector<ArgumentSlot> slots;
  std::size_t buffer_count = 0;
  std::size_t workspace_count = 0;
  /// Why the arguments cannot be passed at this shape (a scalar outside
  /// its type); empty when they can.
  std::string refusal;
  bool ok() const { return refusal.empty(); }
};

/// A scalar packed for the kernel, or why its value cannot be.
struct PackedScalar {
  std::uint64_t packed = 0;
  std::string refusal;
  bool ok() const { return refusal.empty(); }
};

/// Packs `value` as `argument`'s type: an integer type takes only integral
/// values within its range (int64: within ±2^53, where a double is exact), a
/// float type only finite values that stay finite in it.
PackedScalar pack_scalar(const Argument& argument, double value);

/// The layout of arguments bound at one shape (SearchSpace::bind_arguments).
ArgumentLayout layout_arguments(const std::vector<BoundArgument>& bound);

/// Bytes of each workspace argument among `bound`, in launch order.
std::vector<std::int64_t> workspace_sizes(const std::vector<BoundArgument>& bound);

/// Everything one launch of a config at a shape needs besides the loaded
/// kernels, the caller's buffers and a stream.
struct LaunchPlan {
  LaunchSteps steps;
  ArgumentLayout arguments;
  /// Why this config cannot run this shape (the arguments' reason, else the
  /// geometry's); empty when it can, as far as the space can tell.  Device
  /// limits are checked apart (core/launch_limits.h): they need the device.
  std::string refusal;
  bool ok() const { return refusal.empty(); }
};

/// The plan of `config` at `shape`.  Throws InputError only where
/// SearchSpace::bind_arguments does (a buffer extent that is not an integer).
LaunchPlan plan_launch(const SearchSpace& space, const Config& config, const Shape& shape);

/// The plan as canonical text, one line per part: each entry with its grid,
/// block and dynamic shared memory, the workspace bytes, and what every
/// argument slot receives.  Equal texts mean the launches are the same
/// (tuner/code_identity.h hashes it with the code).
std::string launch_plan_text(const LaunchPlan& plan);

}  // namespace mlatune
