#include "core/expression.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string_view>

#include <fmt/format.h>
#include <muParser.h>

#include "core/error.h"

namespace mlatune {
namespace {

double op_fmod(double a, double b) { return std::fmod(a, b); }
double op_not(double a) { return a == 0.0 ? 1.0 : 0.0; }
double op_negate(double a) { return -a; }
double fn_ceil(double a) { return std::ceil(a); }
double fn_floor(double a) { return std::floor(a); }
double fn_sqrt(double a) { return std::sqrt(a); }
double fn_abs(double a) { return std::fabs(a); }
double fn_min(const double* a, int n) { return *std::min_element(a, a + n); }
double fn_max(const double* a, int n) { return *std::max_element(a, a + n); }
// bucket(x, b1, ..., bn): the smallest b_i >= x, or NaN when every b_i < x
// (a value beyond the last bucket: the config cannot serve that shape).
double fn_bucket(const double* a, int n) {
  if (n < 2) throw mu::ParserError("bucket(x, b1, ...) needs x and at least one bucket");
  double best = std::nan("");
  for (int i = 1; i < n; ++i)
    if (a[i] >= a[0] && !(a[i] >= best)) best = a[i];
  return best;
}

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// mu::Parser minus its default functions, constants and operators (sin, pi,
// unary +, ...), plus the ones the search-space format defines.
void configure(mu::Parser& parser, const ExpressionSymbols& symbols) {
  parser.ClearFun();
  parser.ClearConst();
  parser.ClearInfixOprt();
  parser.ClearPostfixOprt();
  parser.ClearOprt();
  parser.DefineInfixOprt("-", op_negate);
  parser.DefineInfixOprt("!", op_not);
  parser.DefineOprt("%", op_fmod, mu::prMUL_DIV, mu::oaLEFT, true);
  parser.DefineFun("ceil", fn_ceil);
  parser.DefineFun("floor", fn_floor);
  parser.DefineFun("sqrt", fn_sqrt);
  parser.DefineFun("abs", fn_abs);
  parser.DefineFun("min", fn_min);
  parser.DefineFun("max", fn_max);
  parser.DefineFun("bucket", fn_bucket);
  for (const auto& [name, value] : symbols.constants) parser.DefineConst(name, value);
}

// The identifier that ends just before `offset` (skipping blanks), if any.
std::string identifier_before(const std::string& text, std::size_t offset, std::size_t* start) {
  std::size_t end = std::min(offset, text.size());
  while (end > 0 && text[end - 1] == ' ') --end;
  std::size_t begin = end;
  while (begin > 0 && is_name_char(text[begin - 1])) --begin;
  *start = begin;
  if (begin == end || std::isdigit(static_cast<unsigned char>(text[begin]))) return {};
  return text.substr(begin, end - begin);
}

bool is_function(const std::string& name) {
  const auto& functions = expression_function_names();
  return std::find(functions.begin(), functions.end(), name) != functions.end();
}

// A muParser error as "what is wrong; what is expected", at the offending
// character.  muParser's own messages end in " at position N", which the
// caller replaces by a file:line:col.
ExpressionSyntaxError translate(const mu::ParserError& error, const std::string& text) {
  std::size_t offset = std::min<std::size_t>(std::max(error.GetPos(), 0), text.size());
  std::string token = error.GetToken();
  const std::string functions = fmt::format("{}", fmt::join(expression_function_names(), " "));
  switch (error.GetCode()) {
    case mu::ecUNEXPECTED_PARENS: {
      std::size_t start = 0;
      std::string name = identifier_before(text, offset, &start);
      if (token == "(" && !name.empty() && !is_function(name))
        return {start, fmt::format("unknown function '{}'; expected one of: {}", name, functions)};
      return {offset, fmt::format("unexpected '{}'; expected a number, a name or an operator "
                                  "before it",
                                  token)};
    }
    case mu::ecUNEXPECTED_OPERATOR:
      return {offset, fmt::format("unexpected operator '{}'; expected a number, a name or '(' "
                                  "before it",
                                  token)};
    case mu::ecUNEXPECTED_EOF:
    case mu::ecEMPTY_EXPRESSION:
      return {offset, "unexpected end of expression; expected a number, a name or '('"};
    case mu::ecUNEXPECTED_VAL:
    case mu::ecUNEXPECTED_VAR:
      return {offset, fmt::format("unexpected '{}'; expected an operator before it", token)};
    case mu::ecMISSING_PARENS:
      return {offset,
              "missing ')'; expected every '(' to be closed (an expression that contains "
              "commas inside a flow list [..] must be quoted)"};
    case mu::ecUNEXPECTED_ARG_SEP:
      return {offset, "unexpected ','; expected commas only between function arguments"};
    case mu::ecTOO_MANY_PARAMS:
    case mu::ecTOO_FEW_PARAMS:
      return {offset, fmt::format("wrong number of arguments to '{}'", token)};
    case mu::ecUNASSIGNABLE_TOKEN: {
      // muParser's token is the whole rest of the expression: name only its
      // first name or character.
      std::size_t length = 1;
      while (length < token.size() && is_name_char(token[0]) && is_name_char(token[length]))
        ++length;
      std::string first = token.substr(0, length);
      if (!first.empty() && std::string("+-*/%^<>=!&|?:").find(first[0]) != std::string::npos)
        return {offset, fmt::format("unexpected operator '{}'; expected a number, a name or '(' "
                                    "before it",
                                    first)};
      return {offset, fmt::format("unexpected '{}'; expected a number, a name, an operator or one "
                                  "of the functions {}",
                                  first, functions)};
    }
    case mu::ecMISPLACED_COLON:
    case mu::ecUNEXPECTED_CONDITIONAL:
    case mu::ecMISSING_ELSE_CLAUSE:
      // muParser reports these at the start of the expression: point at the '?'.
      if (offset == 0 && text.find('?') != std::string::npos) offset = text.find('?');
      return {offset, "malformed conditional; expected 'condition ? value : value'"};
    default: {
      std::string message = error.GetMsg();
      if (auto at = message.find(" at position"); at != std::string::npos) message.resize(at);
      if (auto at = message.find(" found"); at != std::string::npos) message.resize(at);
      if (!message.empty()) message[0] = static_cast<char>(std::tolower(message[0]));
      return {offset, fmt::format("malformed expression: {}", message)};
    }
  }
}

// muParser reads `a = b` as an assignment that rewrites `a` on every
// evaluation, and `a, b` as two expressions of which only `b` counts: both
// silently change the space.  An '=' that is not part of == <= >= != is one.
void reject_assignment(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '=') continue;
    if (i + 1 < text.size() && text[i + 1] == '=') {
      ++i;  // "==": a comparison
      continue;
    }
    if (i > 0 && (text[i - 1] == '<' || text[i - 1] == '>' || text[i - 1] == '!')) continue;
    throw ExpressionSyntaxError(i, "'=' is an assignment, which expressions do not allow; "
                                   "expected '==' to compare");
  }
}

// A comma outside any parenthesis separates two expressions.  Called once
// muParser has accepted the text, so the parentheses are balanced.
void reject_expression_list(const std::string& text) {
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')') --depth;
    if (text[i] == ',' && depth == 0)
      throw ExpressionSyntaxError(i, "unexpected ','; expected one expression (commas only "
                                     "between function arguments)");
  }
}

}  // namespace

const std::vector<std::string>& expression_function_names() {
  static const std::vector<std::string> names = {"min", "max", "ceil", "floor",
                                                     "sqrt", "abs", "bucket"};
  return names;
}

std::size_t find_identifier(const std::string& text, const std::string& name) {
  for (std::size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    bool starts = at == 0 || !is_name_char(text[at - 1]);
    bool ends = at + name.size() == text.size() || !is_name_char(text[at + name.size()]);
    if (starts && ends) return at;
  }
  return 0;
}

std::vector<std::string> analyze_expression(const std::string& text,
                                            const ExpressionSymbols& symbols) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f)
      throw ExpressionSyntaxError(i,
                                  "unexpected non-ASCII or control character; expected a "
                                  "number, a name, an operator or a parenthesis");
  }
  reject_assignment(text);
  mu::Parser parser;
  configure(parser, symbols);
  std::vector<std::string> used;
  try {
    parser.SetExpr(text);
    // With no variables defined, muParser reports every name it reads as a
    // variable, known or not: the caller decides which names are allowed.
    for (const auto& entry : parser.GetUsedVar()) used.push_back(entry.first);
    // Evaluate once with every used name bound, so that errors muParser only
    // finds when it builds its byte code surface here too.
    std::vector<double> dummy(used.size(), 1.0);
    for (std::size_t i = 0; i < used.size(); ++i) parser.DefineVar(used[i], &dummy[i]);
    parser.SetExpr(text);
    parser.Eval();
  } catch (const mu::ParserError& error) {
    throw translate(error, text);
  }
  reject_expression_list(text);
  std::sort(used.begin(), used.end(), [&](const std::string& a, const std::string& b) {
    return find_identifier(text, a) < find_identifier(text, b);
  });
  return used;
}

struct ExpressionEvaluator::Parsers {
  std::vector<std::unique_ptr<mu::Parser>> parsers;
};

ExpressionEvaluator::ExpressionEvaluator(const ExpressionSymbols& symbols,
                                         const std::vector<std::string>& texts)
    : variables_(new double[std::max<std::size_t>(symbols.variables.size(), 1)]()),
      parsers_(std::make_unique<Parsers>()) {
  parsers_->parsers.reserve(texts.size());
  for (const std::string& text : texts) {
    auto parser = std::make_unique<mu::Parser>();
    try {
      configure(*parser, symbols);
      for (std::size_t i = 0; i < symbols.variables.size(); ++i)
        parser->DefineVar(symbols.variables[i], &variables_[i]);
      parser->SetExpr(text);
      parser->Eval();  // compiles to byte code now, not on the first real use
    } catch (const mu::ParserError& error) {
      // Every text was checked by analyze_expression when the space was read.
      throw InternalError(
          fmt::format("expression '{}' no longer compiles: {}", text, error.GetMsg()));
    }
    parsers_->parsers.push_back(std::move(parser));
  }
}

ExpressionEvaluator::~ExpressionEvaluator() = default;

double ExpressionEvaluator::evaluate(std::size_t expression) const {
  try {
    return parsers_->parsers[expression]->Eval();
  } catch (const mu::ParserError&) {
    return std::nan("");
  }
}

}  // namespace mlatune
