#include <gtest/gtest.h>

#include <set>

#include "core/hash.h"
#include "core/outcome.h"

namespace mlatune {
namespace {

TEST(Outcome, EveryOutcomeRoundTripsThroughItsName) {
  for (Outcome o : {Outcome::ok, Outcome::compile_error, Outcome::launch_error, Outcome::wrong_result,
                    Outcome::crashed, Outcome::timeout, Outcome::skipped_by_constraint}) {
    auto parsed = parse_outcome(to_string(o));
    ASSERT_TRUE(parsed.has_value()) << to_string(o);
    EXPECT_EQ(*parsed, o);
  }
  EXPECT_FALSE(parse_outcome("OK").has_value());
  EXPECT_FALSE(parse_outcome("").has_value());
}

TEST(ContentHash, PartsAreLengthPrefixedAndHashesAreStable) {
  EXPECT_NE(content_hash({"ab", "c"}), content_hash({"a", "bc"}));
  EXPECT_EQ(content_hash({"x", "y"}), content_hash({"x", "y"}));
  EXPECT_EQ(content_hash("x").size(), 32u);
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(content_hash(std::to_string(i)));
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace mlatune
