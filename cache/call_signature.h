// What a caller passes to launch one kernel family through the dispatcher:
// one positive value per shape variable, and one device buffer per input and
// output argument of the space, in launch order.  Scalars are evaluated from
// the shape and workspaces allocated by the dispatcher, so neither is the
// caller's.  The generic C ABI (cache/c_api.h) describes a family to foreign
// callers with this, and checks their calls against it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/space.h"

namespace mlatune {

/// The caller-facing argument list of one space.  Holds pointers into the
/// space, which must outlive it.  Immutable; safe to share between threads.
class CallSignature {
 public:
  explicit CallSignature(const SearchSpace& space);

  std::size_t shape_variable_count() const { return space_->shape_variables().size(); }
  const std::vector<std::string>& shape_variables() const { return space_->shape_variables(); }
  std::size_t buffer_count() const { return buffers_.size(); }
  /// The i-th caller buffer (an input or output argument); i < buffer_count().
  const Argument& buffer(std::size_t i) const { return *buffers_.at(i); }

  /// The shape for these values; InputError naming the space and what is
  /// wrong unless there is exactly one value per shape variable, each positive.
  Shape shape(std::span<const std::int64_t> values) const;
  /// Bytes each caller buffer holds at `shape` (a checked shape), in order.
  std::vector<std::int64_t> buffer_bytes(const Shape& shape) const;
  /// Elements of buffer i at `shape` (a checked shape).
  std::int64_t buffer_elements(std::size_t i, const Shape& shape) const;
  /// InputError naming the first buffer whose `given` bytes are fewer than
  /// `needed` (from buffer_bytes) at the shape of these values: the argument,
  /// both sizes and the shape.  Allocates only to say what is wrong.
  void check_bytes(std::span<const std::int64_t> shape, std::span<const std::int64_t> needed,
                   std::span<const std::size_t> given) const;

 private:
  const SearchSpace* space_;
  std::vector<const Argument*> buffers_;
};

}  // namespace mlatune
