// The expression language (core/expression.h): operators and functions of
// the search-space format on top of muParser, the names an expression reads,
// and the offset of the offending character when it does not parse.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "core/expression.h"

namespace mlatune {
namespace {

const ExpressionSymbols symbols{{"A", "B", "C"}, {{"fast", 1.0}, {"slow", 0.0}}};

double value_of(const std::string& text, double a = 7, double b = 2, double c = 0) {
  ExpressionEvaluator evaluator(symbols, {text});
  evaluator.variables()[0] = a;
  evaluator.variables()[1] = b;
  evaluator.variables()[2] = c;
  return evaluator.evaluate(0);
}

std::size_t error_offset(const std::string& text, std::string* message = nullptr) {
  try {
    analyze_expression(text, symbols);
  } catch (const ExpressionSyntaxError& e) {
    if (message) *message = e.what();
    return e.offset;
  }
  ADD_FAILURE() << "'" << text << "' was accepted";
  return std::string::npos;
}

// bucket(x, b1, ...): the smallest bucket that holds x, NaN past the last
// one (the compiled capacity of a shape-bucketed config).
TEST(Expression, BucketIsTheSmallestBucketThatHoldsX) {
  EXPECT_EQ(value_of("bucket(A, 4, 8, 16)"), 8.0);            // A = 7
  EXPECT_EQ(value_of("bucket(A, 4, 7, 16)"), 7.0);            // equal is enough
  EXPECT_EQ(value_of("bucket(A, 16, 8, 32)"), 8.0);           // order does not matter
  EXPECT_EQ(value_of("bucket(B, 16, 32)"), 16.0);             // B = 2: the first
  EXPECT_TRUE(std::isnan(value_of("bucket(A, 2, 4, 6)")));    // past the last
  EXPECT_EQ(value_of("bucket(A, 2, 4, 6) >= 0"), 0.0);       // NaN compares false
  EXPECT_EQ(value_of("C == 0 ? A : bucket(A, 16)", 7, 2, 1), 16.0);
  std::string message;
  EXPECT_EQ(error_offset("bucket(A)", &message), 0u);
  EXPECT_NE(message.find("at least one bucket"), std::string::npos) << message;
}

TEST(Expression, ArithmeticIsRealAndPercentIsFmod) {
  EXPECT_DOUBLE_EQ(value_of("A / B"), 3.5);
  EXPECT_DOUBLE_EQ(value_of("A % B"), 1.0);
  EXPECT_DOUBLE_EQ(value_of("A % B * 3"), 3.0);  // same precedence as *, left to right
  EXPECT_DOUBLE_EQ(value_of("A + B % 4"), 9.0);  // binds tighter than +
  EXPECT_DOUBLE_EQ(value_of("7.5 % 2"), 1.5);
  EXPECT_TRUE(std::isnan(value_of("A % C")));
  EXPECT_DOUBLE_EQ(value_of("B ^ 3"), 8.0);
  EXPECT_DOUBLE_EQ(value_of("-A + 1"), -6.0);
  EXPECT_DOUBLE_EQ(value_of("1e-5 * 2"), 2e-5);
}

TEST(Expression, LogicComparisonsAndConditional) {
  EXPECT_EQ(value_of("!C"), 1.0);
  EXPECT_EQ(value_of("!A"), 0.0);
  EXPECT_EQ(value_of("!(A == 7) || B != 2"), 0.0);
  EXPECT_EQ(value_of("A > B && !C"), 1.0);
  EXPECT_EQ(value_of("A <= B || A >= 7"), 1.0);
  EXPECT_EQ(value_of("A < B"), 0.0);
  EXPECT_EQ(value_of("A == 7 ? 10 : 20"), 10.0);
  EXPECT_EQ(value_of("C ? 10 : 20"), 20.0);
  EXPECT_EQ(value_of("A == fast"), 0.0);
  EXPECT_EQ(value_of("fast + slow"), 1.0);
}

TEST(Expression, Functions) {
  EXPECT_EQ(value_of("min(A, B, 5)"), 2.0);
  EXPECT_EQ(value_of("max(A, B)"), 7.0);
  EXPECT_EQ(value_of("ceil(A / B)"), 4.0);
  EXPECT_EQ(value_of("floor(A / B)"), 3.0);
  EXPECT_EQ(value_of("sqrt(B * 8)"), 4.0);
  EXPECT_EQ(value_of("abs(B - A)"), 5.0);
}

TEST(Expression, ReportsTheNamesItReadsInOrderOfUse) {
  EXPECT_EQ(analyze_expression("B * A + B", symbols), (std::vector<std::string>{"B", "A"}));
  EXPECT_EQ(analyze_expression("fast + 1", symbols), std::vector<std::string>{});
  // Unknown names are reported too: the caller decides what is allowed.
  EXPECT_EQ(analyze_expression("A + WIDTH", symbols), (std::vector<std::string>{"A", "WIDTH"}));
  // muParser's built-in constants are gone: 'pi' is just an unknown name.
  EXPECT_EQ(analyze_expression("pi * A", symbols), (std::vector<std::string>{"pi", "A"}));
}

TEST(Expression, ErrorsPointAtTheOffendingCharacter) {
  std::string message;
  EXPECT_EQ(error_offset("A +* B", &message), 3u);
  EXPECT_NE(message.find("unexpected operator '*'"), std::string::npos) << message;
  EXPECT_EQ(error_offset("A B"), 2u);
  EXPECT_EQ(error_offset("sin(A)", &message), 0u);
  EXPECT_NE(message.find("unknown function 'sin'"), std::string::npos) << message;
  EXPECT_EQ(error_offset("(A + 1", &message), 6u);
  EXPECT_NE(message.find("missing ')'"), std::string::npos) << message;
  EXPECT_EQ(error_offset("A % % B", &message), 4u);
  EXPECT_NE(message.find("'%'"), std::string::npos) << message;
  EXPECT_EQ(error_offset("A + ", &message), 4u);
  EXPECT_NE(message.find("unexpected end"), std::string::npos) << message;
  EXPECT_EQ(error_offset(""), 0u);
  EXPECT_EQ(error_offset("A + \xc3\xa9"), 4u);  // non-ASCII
  EXPECT_EQ(error_offset("A ? 1", &message), 2u);
  EXPECT_NE(message.find("conditional"), std::string::npos) << message;
}

// muParser would read these as an assignment (rewriting A on every
// evaluation) or as two expressions of which only the last counts.
TEST(Expression, AssignmentsAndExpressionListsAreRejected) {
  std::string message;
  EXPECT_EQ(error_offset("A = 4", &message), 2u);
  EXPECT_NE(message.find("'=' is an assignment"), std::string::npos) << message;
  EXPECT_NE(message.find("'=='"), std::string::npos) << message;
  EXPECT_EQ(error_offset("A == 1 || B = 2"), 12u);
  EXPECT_EQ(error_offset("A=B"), 1u);
  EXPECT_EQ(error_offset("A += 1"), 3u);
  EXPECT_EQ(error_offset("A, B", &message), 1u);
  EXPECT_NE(message.find("expected one expression"), std::string::npos) << message;
  EXPECT_EQ(error_offset("min(A, B), C"), 9u);
  // Comparisons and function arguments stay allowed.
  EXPECT_NO_THROW(analyze_expression("A == B && A <= B && A >= B && A != B", symbols));
  EXPECT_NO_THROW(analyze_expression("max(A, min(B, C))", symbols));
}

TEST(Expression, FindIdentifierMatchesWholeWordsOnly) {
  EXPECT_EQ(find_identifier("AB + A", "A"), 5u);
  EXPECT_EQ(find_identifier("A_1 + A", "A"), 6u);
  EXPECT_EQ(find_identifier("B", "A"), 0u);
}

TEST(Expression, EvaluatorsOnSeparateThreadsDoNotInterfere) {
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      ExpressionEvaluator evaluator(symbols, {"A * 1000 + B", "A % 3"});
      for (int i = 0; i < 20000; ++i) {
        evaluator.variables()[0] = i;
        evaluator.variables()[1] = t;
        if (evaluator.evaluate(0) != i * 1000.0 + t) ++wrong;
        if (evaluator.evaluate(1) != i % 3) ++wrong;
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace mlatune
