// A wall-time budget for a sweep's search at one shape (`tune
// --time-budget`): the sweep stops proposing at a shape once it is spent.
// Parsed once, where it enters, from text such as "90s", "10m", "1h",
// "1h30m" or "2.5m".
#pragma once
#include <chrono>
#include <string>
#include <string_view>

namespace mlatune {

struct TimeBudget {
  std::chrono::milliseconds limit{0};  // positive
  bool operator==(const TimeBudget&) const = default;
};

/// One or more terms NUMBER UNIT, units h, m and s, each at most once and in
/// that order ("1h30m", "2.5m", "90s"); positive, at most 10000 h.  Anything
/// else is an InputError "'<text>': column N: <what is wrong>" (column
/// 1-based, without a file location: the text comes from a command line).
TimeBudget parse_time_budget(std::string_view text);

/// The canonical text: "1h30m", "10m", "1m30s", "2.5s".
std::string to_string(const TimeBudget& budget);

}  // namespace mlatune
