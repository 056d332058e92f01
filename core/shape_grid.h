// Many shapes at once, for `mlatune tune`: a grid (every combination of a
// few values per shape variable) and a shapes file (one shape per line).
//
// The grid grammar (whitespace around any token is ignored):
//
//   grid   := part ( ';' part )*
//   part   := NAME '=' items               one part per shape variable
//   items  := item ( '|' item )*           a list: the union, in order written
//   item   := INT                          a single value
//           | INT '..' INT                 every integer from a to b
//           | INT '..' INT ':x' INT        geometric: a, a*k, a*k^2, ... <= b (k >= 2)
//           | INT '..' INT ':+' INT        arithmetic: a, a+k, a+2k, ... <= b (k >= 1)
//
// e.g. "B=2; T=64..4096:x2; H=16; D=32|64|128; R=128" is 7 x 3 = 21 shapes.
// A range includes b only when the progression reaches it.  Every value must
// be a positive integer; a value listed twice counts once.  The grid is the
// product of its variables' values, the first variable the space declares
// varying slowest (the order of the parts does not matter).  A ',' also
// separates parts, so a plain shape ("B=2,T=32,...") is a grid of one.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/space.h"

namespace mlatune {

/// The most shapes a grid may expand to (and values one variable may take):
/// beyond it a typo (1..1000000) is more likely than a plan.
inline constexpr std::uint64_t max_grid_shapes = 100000;

/// One variable of a grid and its values, in the order written.
struct GridAxis {
  std::string name;
  std::vector<std::int64_t> values;
  int column = 0;  // 1-based column of the name in the grid text
};

/// A grid as written: its parts, not yet checked against a space.
struct ShapeGrid {
  std::vector<GridAxis> axes;
};

/// Parses the grid syntax.  InputError "grid '<text>': column N: <what>",
/// naming the column of the offending part.
ShapeGrid parse_shape_grid(std::string_view text);

/// Every shape of the grid for `space`: each shape variable given exactly
/// once (InputError with the column of an unknown or repeated one, or naming
/// a missing one), the product in the space's variable order.
std::vector<Shape> grid_shapes(const SearchSpace& space, std::string_view text);

/// Shapes one per line in the space's shape syntax ("B=2,T=32,..."); lines
/// whose first non-blank character is '#' and blank lines are skipped, and a
/// '#' after a shape starts a comment.  InputError at file:line for a bad
/// line; a shape given twice counts once.
std::vector<Shape> parse_shapes_text(const SearchSpace& space, std::string_view text,
                                     const std::string& file_name);
/// The same, read from a file (EnvironmentError when it cannot be read).
std::vector<Shape> read_shapes_file(const SearchSpace& space, const std::filesystem::path& file);

}  // namespace mlatune
