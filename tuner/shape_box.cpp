#include "tuner/shape_box.h"

#include <charconv>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace mlatune {

namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

std::int64_t positive_integer(std::string_view text, std::string_view item) {
  text = trim(text);
  std::int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 1)
    throw InputError(fmt::format("range item '{}': '{}' is not a positive integer", item, text));
  return value;
}

}  // namespace

bool ShapeBox::contains(const Shape& shape) const {
  if (shape.values.size() != low.size()) return false;
  for (std::size_t i = 0; i < low.size(); ++i)
    if (shape.values[i] < low[i] || shape.values[i] > high[i]) return false;
  return true;
}

std::uint64_t ShapeBox::size() const {
  std::uint64_t total = 1;
  for (std::size_t i = 0; i < low.size(); ++i) {
    auto extent = static_cast<std::uint64_t>(high[i] - low[i] + 1);
    if (total > std::numeric_limits<std::uint64_t>::max() / extent) return std::numeric_limits<std::uint64_t>::max();
    total *= extent;
  }
  return total;
}

std::string ShapeBox::text(const SearchSpace& space) const {
  std::string result;
  for (std::size_t i = 0; i < low.size(); ++i) {
    if (i) result += ';';
    result += low[i] == high[i] ? fmt::format("{}={}", space.shape_variables()[i], low[i])
                                : fmt::format("{}={}..{}", space.shape_variables()[i], low[i], high[i]);
  }
  return result;
}

ShapeBox parse_shape_box(const SearchSpace& space, std::string_view text) {
  const std::vector<std::string>& names = space.shape_variables();
  ShapeBox box;
  box.low.assign(names.size(), 0);
  box.high.assign(names.size(), 0);
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find_first_of(";,", start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = trim(text.substr(start, end - start));
    start = end + 1;
    if (item.empty()) continue;
    std::size_t equals = item.find('=');
    if (equals == std::string_view::npos)
      throw InputError(fmt::format("range item '{}': expected NAME=LOW..HIGH or NAME=VALUE", item));
    std::string name(trim(item.substr(0, equals)));
    std::size_t index = 0;
    while (index < names.size() && names[index] != name) ++index;
    if (index == names.size())
      throw InputError(fmt::format("range item '{}': {} is not a shape variable of {} ({})", item, name,
                                   space.kernel_name(), fmt::join(names, ", ")));
    if (box.low[index] != 0) throw InputError(fmt::format("range: {} is given twice", name));
    std::string_view bounds = item.substr(equals + 1);
    std::size_t dots = bounds.find("..");
    box.low[index] = positive_integer(bounds.substr(0, dots), item);
    box.high[index] = dots == std::string_view::npos ? box.low[index] : positive_integer(bounds.substr(dots + 2), item);
    if (box.high[index] < box.low[index])
      throw InputError(fmt::format("range item '{}': the high end is below the low end", item));
  }
  for (std::size_t i = 0; i < names.size(); ++i)
    if (box.low[i] == 0) throw InputError(fmt::format("range: no range for shape variable {}", names[i]));
  return box;
}

}  // namespace mlatune
