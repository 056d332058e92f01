#include "cache/call_signature.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace mlatune {

CallSignature::CallSignature(const SearchSpace& space) : space_(&space) {
  for (const Argument& argument : space.arguments())
    if (argument.role == ArgumentRole::input || argument.role == ArgumentRole::output)
      buffers_.push_back(&argument);
}

Shape CallSignature::shape(std::span<const std::int64_t> values) const {
  const auto& names = space_->shape_variables();
  if (values.size() != names.size())
    throw InputError(fmt::format("{} takes {} shape values ({}); {} given", space_->kernel_name(), names.size(),
                                 fmt::join(names, ", "), values.size()));
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i] <= 0)
      throw InputError(fmt::format("{}: shape variable {} is {}; it must be positive", space_->kernel_name(),
                                   names[i], values[i]));
  return Shape{{values.begin(), values.end()}};
}

std::vector<std::int64_t> CallSignature::buffer_bytes(const Shape& shape) const {
  std::vector<std::int64_t> bytes;
  for (const BoundArgument& bound : space_->bind_arguments(shape)) {
    const ArgumentRole role = bound.argument->role;
    if (role != ArgumentRole::input && role != ArgumentRole::output) continue;
    bytes.push_back(bound.element_count * static_cast<std::int64_t>(element_size(bound.argument->type)));
  }
  return bytes;
}

std::int64_t CallSignature::buffer_elements(std::size_t i, const Shape& shape) const {
  const Argument* wanted = buffers_.at(i);
  for (const BoundArgument& bound : space_->bind_arguments(shape))
    if (bound.argument == wanted) return bound.element_count;
  throw std::logic_error("CallSignature: a buffer missing from the space's arguments");
}

void CallSignature::check_bytes(std::span<const std::int64_t> shape, std::span<const std::int64_t> needed,
                                std::span<const std::size_t> given) const {
  if (given.size() != buffers_.size() || needed.size() != buffers_.size())
    throw InputError(fmt::format("{} takes {} buffers; {} given", space_->kernel_name(), buffers_.size(),
                                 given.size()));
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    if (static_cast<std::uint64_t>(needed[i]) <= given[i]) continue;
    throw InputError(fmt::format("{}: buffer {} ({} {}) holds {} bytes; {} needed at {}", space_->kernel_name(),
                                 buffers_[i]->name, element_type_name(buffers_[i]->type),
                                 buffers_[i]->role == ArgumentRole::input ? "input" : "output", given[i],
                                 needed[i], space_->shape_string(Shape{{shape.begin(), shape.end()}})));
  }
}

}  // namespace mlatune
