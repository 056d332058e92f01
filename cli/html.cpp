#include "cli/html.h"

#include <cmath>

#include <fmt/format.h>

namespace mlatune::cli {

std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // Control characters other than tab and newline are not allowed in
        // XML 1.0 at all, so a page with one would not parse; show them.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n')
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  return out;
}

std::string format_us(double us) {
  if (!std::isfinite(us)) return "-";
  if (std::abs(us) >= 100) return fmt::format("{:.0f}", us);
  if (std::abs(us) >= 10) return fmt::format("{:.1f}", us);
  return fmt::format("{:.2f}", us);
}

std::string svg_number(double value) {
  if (!std::isfinite(value)) return "0";
  return fmt::format("{:.1f}", value);
}

}  // namespace mlatune::cli
