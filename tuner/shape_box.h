// A box of shapes: one inclusive integer range per shape variable of a space,
// e.g. "B=1..8;T=1..4096;H=1..64;D=8..256;R=16..1024".  What `mlatune cache
// warm` compiles for, and what the first-call benchmark draws from.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/space.h"

namespace mlatune {

/// Per shape variable (in the space's declaration order) the lowest and
/// highest value, both included; every value positive.
struct ShapeBox {
  std::vector<std::int64_t> low;
  std::vector<std::int64_t> high;

  bool contains(const Shape& shape) const;
  /// Number of shapes in the box (saturates at UINT64_MAX).
  std::uint64_t size() const;
  /// "B=1..8;T=1..4096;..." in declaration order ("X=4" for a single value);
  /// parse_shape_box reads it back.
  std::string text(const SearchSpace& space) const;
};

/// Parses "NAME=LOW..HIGH" or "NAME=VALUE" items separated by ';' or ','.
/// Every shape variable of the space exactly once, 1 <= LOW <= HIGH.  Throws
/// InputError naming the item that is wrong.
ShapeBox parse_shape_box(const SearchSpace& space, std::string_view text);

}  // namespace mlatune
