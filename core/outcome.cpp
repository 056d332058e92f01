#include "core/outcome.h"

#include <array>
#include <utility>

namespace mlatune {
namespace {
constexpr std::array<std::pair<Outcome, std::string_view>, 7> names = {{
    {Outcome::ok, "ok"},
    {Outcome::compile_error, "compile_error"},
    {Outcome::launch_error, "launch_error"},
    {Outcome::wrong_result, "wrong_result"},
    {Outcome::crashed, "crashed"},
    {Outcome::timeout, "timeout"},
    {Outcome::skipped_by_constraint, "skipped_by_constraint"},
}};
}  // namespace

std::string_view to_string(Outcome outcome) {
  for (const auto& [o, name] : names)
    if (o == outcome) return name;
  return "unknown";
}

std::optional<Outcome> parse_outcome(std::string_view text) {
  for (const auto& [o, name] : names)
    if (name == text) return o;
  return std::nullopt;
}

}  // namespace mlatune
