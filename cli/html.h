// Text for the HTML report (`mlatune report`): escaping, so that no string
// from a database (kernel, device, shape and config names, messages) can
// become markup, and the few number formats the page uses.
#pragma once
#include <string>
#include <string_view>

namespace mlatune::cli {

/// `text` with & < > " ' replaced by character references: safe as element
/// content and as a quoted attribute value, in HTML and in XML.
std::string escape_html(std::string_view text);

/// A time in microseconds with three significant digits or more ("6.59",
/// "26.3", "511", "12345").
std::string format_us(double us);

/// A coordinate for SVG: one decimal, no exponent.
std::string svg_number(double value);

}  // namespace mlatune::cli
