#include "cli/option_checks.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune::cli {
namespace {

// Digits only: CLI11 reads "-1" into an unsigned option as 2^64 - 1.
bool is_unsigned_text(const std::string& text) {
  return !text.empty() && text.size() <= 20 &&
         std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
}

}  // namespace

CLI::Validator whole_number(std::uint64_t minimum, std::uint64_t maximum) {
  std::string range = maximum == UINT64_MAX ? fmt::format("of at least {}", minimum)
                                            : fmt::format("from {} to {}", minimum, maximum);
  return CLI::Validator(
      [minimum, maximum, range](std::string& text) -> std::string {
        std::uint64_t value = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (!is_unsigned_text(text) || ec != std::errc() || end != text.data() + text.size() ||
            value < minimum || value > maximum)
          return fmt::format("'{}' is not a whole number {}", text, range);
        return {};
      },
      "N");
}

// CLI::PositiveNumber lets NaN through (every comparison with it is false).
CLI::Validator finite_positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        double value = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value) || value <= 0)
          return fmt::format("'{}' is not a finite number above 0", text);
        return {};
      },
      "MS");
}

Shape shape_option(const SearchSpace& space, const std::string& option, const std::string& text) {
  try {
    return space.parse_shape(text);
  } catch (const InputError& error) {
    throw InputError(fmt::format("{}: {}", option, error.message()));
  }
}

}  // namespace mlatune::cli
