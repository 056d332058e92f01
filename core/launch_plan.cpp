#include "core/launch_plan.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace mlatune {

namespace {

template <typename T>
std::uint64_t packed_bytes(T value) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t));
  std::uint64_t packed = 0;
  std::memcpy(&packed, &value, sizeof value);
  return packed;
}

std::string scalar_refusal(const Argument& argument, double value, std::string_view why) {
  return fmt::format("scalar '{}' ({}, {}) is {} at this shape: {}", argument.name,
                     element_type_name(argument.type), argument.where.str(), value, why);
}

/// Why `value` is no integer within [lo, hi]; empty when it is one.
std::string integral_refusal(double value, double lo, double hi, ElementType type) {
  if (!std::isfinite(value)) return "not a finite number";
  if (value != std::floor(value)) return "not an integer";
  if (value < lo || value > hi)
    return fmt::format("outside the range of {} [{}, {}]", element_type_name(type), lo, hi);
  return {};
}

}  // namespace

PackedScalar pack_scalar(const Argument& argument, double value) {
  // Every conversion below is checked first: casting an out-of-range double
  // to an integer (or to float) is undefined behaviour, not a wrap.
  constexpr double int64_exact = 9007199254740992.0;  // 2^53
  std::string why;
  PackedScalar out;
  switch (argument.type) {
    case ElementType::float32:
      if (!std::isfinite(value))
        why = "not a finite number";
      else if (std::fabs(value) > std::numeric_limits<float>::max())
        why = "beyond the largest float32";
      else
        out.packed = packed_bytes(static_cast<float>(value));
      break;
    case ElementType::float64:
      if (!std::isfinite(value))
        why = "not a finite number";
      else
        out.packed = packed_bytes(value);
      break;
    case ElementType::int32:
      why = integral_refusal(value, std::numeric_limits<std::int32_t>::min(),
                             std::numeric_limits<std::int32_t>::max(), argument.type);
      if (why.empty()) out.packed = packed_bytes(static_cast<std::int32_t>(value));
      break;
    case ElementType::int64:
      why = integral_refusal(value, -int64_exact, int64_exact, argument.type);
      if (why.empty()) out.packed = packed_bytes(static_cast<std::int64_t>(value));
      break;
  }
  if (!why.empty()) out.refusal = scalar_refusal(argument, value, why);
  return out;
}

ArgumentLayout layout_arguments(const std::vector<BoundArgument>& bound) {
  ArgumentLayout layout;
  layout.slots.reserve(bound.size());
  for (const BoundArgument& b : bound) {
    ArgumentSlot slot;
    slot.role = b.argument->role;
    switch (slot.role) {
      case ArgumentRole::input:
      case ArgumentRole::output:
        slot.index = static_cast<int>(layout.buffer_count++);
        break;
      case ArgumentRole::workspace:
        slot.index = static_cast<int>(layout.workspace_count++);
        break;
      case ArgumentRole::scalar: {
        PackedScalar packed = pack_scalar(*b.argument, b.scalar);
        slot.packed = packed.packed;
        if (!packed.ok() && layout.ok()) layout.refusal = std::move(packed.refusal);
        break;
      }
    }
    layout.slots.push_back(slot);
  }
  return layout;
}

std::vector<std::int64_t> workspace_sizes(const std::vector<BoundArgument>& bound) {
  constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
  std::vector<std::int64_t> bytes;
  for (const BoundArgument& b : bound) {
    if (b.argument->role != ArgumentRole::workspace) continue;
    const auto size = static_cast<std::int64_t>(element_size(b.argument->type));
    // A count that saturated (bind_arguments) stays saturated in bytes: the
    // allocation then fails cleanly instead of a product wrapping around.
    bool too_large = b.element_count < 0 || b.element_count > most / size;
    bytes.push_back(too_large ? most : b.element_count * size);
  }
  return bytes;
}

LaunchPlan plan_launch(const SearchSpace& space, const Config& config, const Shape& shape) {
  LaunchPlan plan;
  plan.steps.entry = space.kernel().entry;
  plan.steps.geometry = space.geometry(config, shape);
  const std::vector<BoundArgument> bound = space.bind_arguments(shape);
  plan.arguments = layout_arguments(bound);
  if (std::optional<LaunchGeometry> prologue = space.prologue_geometry(config, shape)) {
    plan.steps.prologue = PrologueLaunch{space.prologue()->kernel.entry, std::move(*prologue)};
    plan.steps.workspace_bytes = workspace_sizes(bound);
  }
  // The arguments' refusal first: it holds for every config at this shape,
  // which is how the worker reports it (its workload cannot be built).
  if (!plan.arguments.ok())
    plan.refusal = plan.arguments.refusal;
  else if (!plan.steps.geometry.valid())
    plan.refusal = "invalid launch geometry: " + plan.steps.geometry.invalid_reason;
  return plan;
}

namespace {
std::string geometry_text(const LaunchGeometry& g) {
  return fmt::format("grid {},{},{} block {},{},{} shared {}{}", g.grid[0], g.grid[1], g.grid[2], g.block[0],
                     g.block[1], g.block[2], g.shared_bytes, g.valid() ? "" : " invalid: " + g.invalid_reason);
}
}  // namespace

std::string launch_plan_text(const LaunchPlan& plan) {
  std::string out;
  if (plan.steps.prologue)
    out += fmt::format("prologue {} {}\n", plan.steps.prologue->entry, geometry_text(plan.steps.prologue->geometry));
  out += fmt::format("main {} {}\n", plan.steps.entry, geometry_text(plan.steps.geometry));
  out += fmt::format("workspace bytes {}\n", fmt::join(plan.steps.workspace_bytes, ","));
  for (const ArgumentSlot& slot : plan.arguments.slots)
    out += fmt::format("argument {} {} {:#x}\n", argument_role_name(slot.role), slot.index, slot.packed);
  if (!plan.ok()) out += "refused: " + plan.refusal + "\n";
  return out;
}

}  // namespace mlatune
