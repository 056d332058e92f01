// Fuzzes the expression language (core/expression.cpp): the first 8 bytes set
// the variables A, B, C and D (signed 16-bit each), the rest is the
// expression text.
//
// analyze_expression must either accept the text or throw
// ExpressionSyntaxError with an offset inside the text.  Text it accepts over
// known names must compile in an ExpressionEvaluator (which throws
// std::logic_error otherwise) and evaluate to a number or NaN, never crash.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/expression.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

const mlatune::ExpressionSymbols& symbols() {
  static const mlatune::ExpressionSymbols s{{"A", "B", "C", "D"},
                                            {{"true", 1.0}, {"false", 0.0}, {"fast", 0.0},
                                             {"slow", 1.0}}};
  return s;
}

bool known(const std::string& name) {
  for (const std::string& v : symbols().variables)
    if (v == name) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t values = 4;
  if (size < 2 * values) return 0;
  std::int16_t raw[values];
  std::memcpy(raw, data, sizeof raw);
  const std::string text(mlatune::fuzz::as_text(data + sizeof raw, size - sizeof raw));

  std::vector<std::string> used;
  try {
    used = mlatune::analyze_expression(text, symbols());
  } catch (const mlatune::ExpressionSyntaxError& error) {
    if (error.offset > text.size()) mlatune::fuzz::violated("error offset past the end");
    return 0;
  }
  for (const std::string& name : used)
    if (!known(name)) return 0;  // the space reader rejects unknown names
  mlatune::ExpressionEvaluator evaluator(symbols(), {text});
  for (std::size_t i = 0; i < values; ++i) evaluator.variables()[i] = raw[i];
  (void)evaluator.evaluate(0);
  return 0;
}
