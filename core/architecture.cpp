#include "core/architecture.h"

#include <cctype>
#include <charconv>

#include <fmt/format.h>

namespace mlatune {

std::optional<Architecture> Architecture::parse(std::string_view text) {
  if (!text.starts_with("sm_")) return std::nullopt;
  text.remove_prefix(3);
  Architecture arch;
  if (!text.empty() && (text.back() == 'a' || text.back() == 'f')) {
    arch.variant = text.back();
    text.remove_suffix(1);
  }
  if (text.empty() || text.size() > 4 || !std::isdigit(static_cast<unsigned char>(text.front())))
    return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), arch.number);
  if (ec != std::errc() || end != text.data() + text.size() || arch.number < 10) return std::nullopt;
  return arch;
}

std::string Architecture::str() const {
  return variant ? fmt::format("sm_{}{}", number, variant) : fmt::format("sm_{}", number);
}

namespace {

std::string capability(int number) { return fmt::format("{}.{}", number / 10, number % 10); }

}  // namespace

std::string missing_architecture(const Architecture& needed, const Architecture& device) {
  const std::string here = fmt::format("this device is sm_{}", device.number);
  switch (needed.variant) {
    case 'a':
      if (device.number == needed.number) return {};
      return fmt::format("needs {} (compute capability {} exactly); {}", needed.str(),
                         capability(needed.number), here);
    case 'f':
      if (device.number / 10 == needed.number / 10 && device.number >= needed.number) return {};
      return fmt::format("needs {} (compute capability {} or a later {}.x); {}", needed.str(),
                         capability(needed.number), needed.number / 10, here);
    default:
      if (device.number >= needed.number) return {};
      return fmt::format("needs {} (compute capability {} or later); {}", needed.str(),
                         capability(needed.number), here);
  }
}

std::string compile_target(std::string_view base, const std::optional<Architecture>& needed) {
  if (!needed) return std::string(base);
  const std::optional<Architecture> given = Architecture::parse(base);
  if (needed->variant || !given || given->number < needed->number) return needed->str();
  return std::string(base);
}

bool runs_binary(std::string_view binary, std::string_view device) {
  const std::optional<Architecture> code = Architecture::parse(binary);
  const std::optional<Architecture> here = Architecture::parse(device);
  if (!code || !here) return binary == device;
  if (code->variant == 'f') return missing_architecture(*code, *here).empty();
  return code->number == here->number;
}

}  // namespace mlatune
