// Checks of numeric command-line options, for CLI11's ->check().  CLI11's own
// are too lax here: an unsigned option reads "-1" as 2^64 - 1, PositiveNumber
// lets NaN through, and its range message prints DBL_MAX in 300 digits.
#pragma once
#include <cstdint>

#include <string>

#include <CLI/CLI.hpp>

#include "core/space.h"

namespace mlatune::cli {

/// Digits only (no sign), from `minimum` to `maximum`.
CLI::Validator whole_number(std::uint64_t minimum, std::uint64_t maximum);
/// A finite number above 0.
CLI::Validator finite_positive_number();

/// The shape given as `option` (e.g. "--shape"); an InputError that names
/// the option, not the space file.
Shape shape_option(const SearchSpace& space, const std::string& option, const std::string& text);

}  // namespace mlatune::cli
