#include "core/error.h"

#include <fmt/format.h>

namespace mlatune {

std::string SourceLocation::str() const {
  if (line <= 0) return file;
  if (column <= 0) return fmt::format("{}:{}", file, line);
  return fmt::format("{}:{}:{}", file, line, column);
}

namespace {
std::string with_location(const SourceLocation& where, const std::string& message) {
  if (where.file.empty() && where.line <= 0) return message;
  return fmt::format("{}: {}", where.str(), message);
}
}  // namespace

InputError::InputError(const std::string& message) : Error(message), message_(message) {}

InputError::InputError(SourceLocation where, const std::string& message)
    : Error(with_location(where, message)), where_(std::move(where)), message_(message) {}

}  // namespace mlatune
