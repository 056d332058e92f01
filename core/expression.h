// The muParser wrapper behind mlatune::Expression (internal to tuner/).
//
// An expression language is a symbol table (variable names and named
// constants) plus a fixed grammar: + - * / % ^, unary - and !, comparisons,
// && ||, ?:, and the functions min max ceil floor sqrt abs bucket (bucket(x,
// b1, ..., bn): the smallest b_i >= x, NaN when there is none).  muParser objects
// bind variables by address and keep an evaluation stack, so they are neither
// copyable nor safe to share between threads: an ExpressionEvaluator owns one
// parser per expression over its own variable array, and callers give each
// thread its own evaluator.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mlatune {

/// The names an expression may refer to.
struct ExpressionSymbols {
  std::vector<std::string> variables;                     // bound to slots 0..n-1
  std::vector<std::pair<std::string, double>> constants;  // named values
};

/// A malformed expression: what is wrong and the 0-based offset of the
/// offending character inside the expression text.
class ExpressionSyntaxError : public std::runtime_error {
 public:
  ExpressionSyntaxError(std::size_t offset, const std::string& message)
      : std::runtime_error(message), offset(offset) {}
  std::size_t offset;
};

/// The function names of the expression language (reserved identifiers).
const std::vector<std::string>& expression_function_names();

/// Checks the syntax of `text` against `symbols` and returns the variables it
/// reads (in order of first use).  Throws ExpressionSyntaxError.
std::vector<std::string> analyze_expression(const std::string& text,
                                            const ExpressionSymbols& symbols);

/// Offset of the first whole-word occurrence of identifier `name` in `text`,
/// or 0 when absent.
std::size_t find_identifier(const std::string& text, const std::string& name);

/// A set of compiled expressions evaluated over one array of variables.  Not
/// thread-safe; cheap to evaluate, costly to build.
class ExpressionEvaluator {
 public:
  ExpressionEvaluator(const ExpressionSymbols& symbols, const std::vector<std::string>& texts);
  ~ExpressionEvaluator();
  ExpressionEvaluator(const ExpressionEvaluator&) = delete;
  ExpressionEvaluator& operator=(const ExpressionEvaluator&) = delete;

  /// The variable slots, in the order of ExpressionSymbols::variables.
  double* variables() { return variables_.get(); }
  double evaluate(std::size_t expression) const;

 private:
  struct Parsers;
  std::unique_ptr<double[]> variables_;
  std::unique_ptr<Parsers> parsers_;
};

}  // namespace mlatune
