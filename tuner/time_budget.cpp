#include "tuner/time_budget.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace mlatune {
namespace {

constexpr double kMaxHours = 10000;  // more is a typo, not a budget

[[noreturn]] void fail(std::string_view text, std::size_t at, const std::string& what) {
  throw InputError(fmt::format("'{}': column {}: {}", text, at + 1, what));
}

}  // namespace

TimeBudget parse_time_budget(std::string_view text) {
  static constexpr const char* kExamples = "e.g. 90s, 10m, 1h or 1h30m";
  if (text.empty()) throw InputError(fmt::format("'': column 1: empty; give a duration, {}", kExamples));
  double milliseconds = 0;
  int last_unit = -1;  // index into "hms" of the previous term's unit
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t start = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    if (i == start) fail(text, i, fmt::format("expected a number, found '{}' ({})", text[i], kExamples));
    if (i < text.size() && text[i] == '.') {
      ++i;
      const std::size_t fraction = i;
      while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
      if (i == fraction) fail(text, i, "expected digits after the decimal point");
    }
    if (i - start > 12) fail(text, start, "number too long");
    double number = 0;  // from_chars: the C locale's decimal point whatever the program's locale
    const auto [end, error] = std::from_chars(text.data() + start, text.data() + i, number);
    if (error != std::errc() || end != text.data() + i) fail(text, start, "not a number");
    if (i == text.size()) fail(text, i, fmt::format("a unit must follow {}: h, m or s ({})", text.substr(start), kExamples));
    static constexpr std::string_view kUnits = "hms";
    const std::size_t unit = kUnits.find(text[i]);
    if (unit == std::string_view::npos)
      fail(text, i, fmt::format("unknown unit '{}' (h, m or s; {})", text[i], kExamples));
    if (static_cast<int>(unit) <= last_unit)
      fail(text, i, fmt::format("unit '{}' after '{}': give hours, minutes and seconds once each, in that order",
                                text[i], kUnits[static_cast<std::size_t>(last_unit)]));
    last_unit = static_cast<int>(unit);
    static constexpr double kMillisecondsPer[] = {3'600'000.0, 60'000.0, 1000.0};
    milliseconds += number * kMillisecondsPer[unit];
    ++i;
  }
  if (milliseconds > kMaxHours * 3'600'000.0)
    fail(text, 0, fmt::format("more than {:g} hours", kMaxHours));
  const auto limit = std::chrono::milliseconds(std::llround(milliseconds));
  if (limit.count() <= 0) fail(text, 0, "the budget must be positive (at least 1 ms)");
  return TimeBudget{limit};
}

std::string to_string(const TimeBudget& budget) {
  std::int64_t ms = budget.limit.count();
  std::string out;
  if (const std::int64_t hours = ms / 3'600'000; hours > 0) out += fmt::format("{}h", hours), ms %= 3'600'000;
  if (const std::int64_t minutes = ms / 60'000; minutes > 0) out += fmt::format("{}m", minutes), ms %= 60'000;
  if (ms > 0) out += ms % 1000 == 0 ? fmt::format("{}s", ms / 1000) : fmt::format("{:g}s", static_cast<double>(ms) / 1000);
  return out;
}

}  // namespace mlatune
