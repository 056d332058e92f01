#include "core/shape_grid.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <iterator>
#include <set>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune {
namespace {

/// Reads the grid text left to right; every error names its column.
class GridReader {
 public:
  explicit GridReader(std::string_view text) : text_(text) {}

  ShapeGrid read() {
    ShapeGrid grid;
    skip_blanks();
    if (at_end()) fail(1, "empty grid; expected NAME=VALUES for each shape variable");
    while (true) {
      grid.axes.push_back(read_part());
      skip_blanks();
      if (at_end()) return grid;
      if (peek() != ';' && peek() != ',') fail(column(), fmt::format("unexpected '{}'; expected ';' between parts", peek()));
      ++at_;
    }
  }

  [[noreturn]] void fail(int column, const std::string& what) const {
    throw InputError(fmt::format("grid '{}': column {}: {}", text_, column, what));
  }

 private:
  bool at_end() const { return at_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[at_]; }
  int column() const { return static_cast<int>(at_) + 1; }
  void skip_blanks() {
    while (!at_end() && (text_[at_] == ' ' || text_[at_] == '\t')) ++at_;
  }
  bool accept(std::string_view token) {
    skip_blanks();
    if (text_.substr(at_, token.size()) != token) return false;
    at_ += token.size();
    return true;
  }

  GridAxis read_part() {
    skip_blanks();
    GridAxis axis;
    axis.column = column();
    while (!at_end() && (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_')) axis.name += text_[at_++];
    if (axis.name.empty()) fail(axis.column, "expected a shape variable name");
    if (!accept("=")) fail(column(), fmt::format("expected '=' after '{}'", axis.name));
    seen_.clear();
    do {
      read_item(axis);
    } while (accept("|"));
    return axis;
  }

  std::int64_t read_number(const char* what) {
    skip_blanks();
    const int start = column();
    const char* first = text_.data() + at_;
    std::int64_t value = 0;
    auto [end, ec] = std::from_chars(first, text_.data() + text_.size(), value);
    if (ec == std::errc::result_out_of_range) fail(start, fmt::format("{} is too large", what));
    if (ec != std::errc() || end == first) fail(start, fmt::format("expected {} (a positive integer)", what));
    if (value <= 0) fail(start, fmt::format("{} {} is not a positive integer", what, value));
    at_ += static_cast<std::size_t>(end - first);
    return value;
  }

  void add(GridAxis& axis, std::int64_t value, int column) {
    if (!seen_.insert(value).second) return;
    if (axis.values.size() >= max_grid_shapes)
      fail(column, fmt::format("'{}' takes more than {} values", axis.name, max_grid_shapes));
    axis.values.push_back(value);
  }

  void read_item(GridAxis& axis) {
    skip_blanks();
    const int start = column();
    const std::int64_t first = read_number("a value");
    if (!accept("..")) return add(axis, first, start);
    const std::int64_t last = read_number("the end of the range");
    if (last < first) fail(start, fmt::format("range {}..{} is empty (its end is below its start)", first, last));
    if (!accept(":")) return add_arithmetic(axis, first, last, 1, start);
    skip_blanks();
    const int step_column = column();
    if (accept("x")) return add_geometric(axis, first, last, read_step(step_column, 2), start);
    if (accept("+")) return add_arithmetic(axis, first, last, read_step(step_column, 1), start);
    fail(step_column, "expected a step 'xK' (geometric) or '+K' (arithmetic) after ':'");
  }

  std::int64_t read_step(int step_column, std::int64_t minimum) {
    const std::int64_t step = read_number("a step");
    if (step < minimum) fail(step_column, fmt::format("step {} must be at least {}", step, minimum));
    return step;
  }

  void add_arithmetic(GridAxis& axis, std::int64_t first, std::int64_t last, std::int64_t step, int column) {
    for (std::int64_t v = first; v <= last; v += step) {
      add(axis, v, column);
      if (last - v < step) break;  // the next value would pass the end (or overflow)
    }
  }

  void add_geometric(GridAxis& axis, std::int64_t first, std::int64_t last, std::int64_t factor, int column) {
    for (std::int64_t v = first; v <= last; v *= factor) {
      add(axis, v, column);
      if (v > last / factor) break;  // the next value would pass the end (or overflow)
    }
  }

  std::string_view text_;
  std::size_t at_ = 0;
  std::set<std::int64_t> seen_;  // the values of the part being read
};

/// The product of the axes (already in the space's variable order), first
/// axis slowest.
std::vector<Shape> product(const std::vector<const GridAxis*>& axes) {
  std::vector<Shape> shapes{Shape{}};
  for (const GridAxis* axis : axes) {
    std::vector<Shape> longer;
    longer.reserve(shapes.size() * axis->values.size());
    for (const Shape& shape : shapes) {
      for (std::int64_t value : axis->values) {
        Shape s = shape;
        s.values.push_back(value);
        longer.push_back(std::move(s));
      }
    }
    shapes = std::move(longer);
  }
  return shapes;
}

std::string without_comment(std::string_view line) {
  std::string_view shape = line.substr(0, line.find('#'));
  while (!shape.empty() && std::isspace(static_cast<unsigned char>(shape.back()))) shape.remove_suffix(1);
  while (!shape.empty() && std::isspace(static_cast<unsigned char>(shape.front()))) shape.remove_prefix(1);
  return std::string(shape);
}

}  // namespace

ShapeGrid parse_shape_grid(std::string_view text) { return GridReader(text).read(); }

std::vector<Shape> grid_shapes(const SearchSpace& space, std::string_view text) {
  const ShapeGrid grid = parse_shape_grid(text);
  const GridReader reader(text);
  const std::vector<std::string>& names = space.shape_variables();
  std::vector<const GridAxis*> ordered(names.size(), nullptr);
  std::uint64_t count = 1;
  for (const GridAxis& axis : grid.axes) {
    auto it = std::find(names.begin(), names.end(), axis.name);
    if (it == names.end())
      reader.fail(axis.column, fmt::format("unknown shape variable '{}'; expected {}", axis.name, fmt::join(names, ", ")));
    const GridAxis*& slot = ordered[static_cast<std::size_t>(it - names.begin())];
    if (slot) reader.fail(axis.column, fmt::format("'{}' is given twice", axis.name));
    slot = &axis;
    count *= axis.values.size();  // each at most max_grid_shapes: checked below before it can overflow
    if (count > max_grid_shapes)
      reader.fail(axis.column, fmt::format("the grid has more than {} shapes", max_grid_shapes));
  }
  for (std::size_t i = 0; i < names.size(); ++i)
    if (!ordered[i])
      reader.fail(static_cast<int>(text.size()) + 1,
                  fmt::format("lacks '{}'; every one of {} needs a value", names[i], fmt::join(names, ", ")));
  return product(ordered);
}

std::vector<Shape> parse_shapes_text(const SearchSpace& space, std::string_view text, const std::string& file_name) {
  std::vector<Shape> shapes;
  std::set<Shape> seen;
  int line_number = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    ++line_number;
    const std::string shape_text = without_comment(text.substr(start, end - start));
    start = end + 1;
    if (shape_text.empty()) continue;
    try {
      Shape shape = space.parse_shape(shape_text);
      if (seen.insert(shape).second) shapes.push_back(std::move(shape));
    } catch (const InputError& error) {
      throw InputError(SourceLocation{file_name, line_number}, error.message());
    }
  }
  if (shapes.empty()) {
    std::vector<std::string> example;
    for (const std::string& name : space.shape_variables()) example.push_back(name + "=N");
    throw InputError(SourceLocation{file_name},
                     fmt::format("no shape in the file; expected one per line, as {}", fmt::join(example, ",")));
  }
  return shapes;
}

std::vector<Shape> read_shapes_file(const SearchSpace& space, const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    throw InputError(fmt::format("no shapes file {}", file.string()));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw EnvironmentError(fmt::format("cannot read the shapes file {}", file.string()));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw EnvironmentError(fmt::format("reading the shapes file {} failed", file.string()));
  return parse_shapes_text(space, text, file.string());
}

}  // namespace mlatune
