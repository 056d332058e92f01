// `tune --time-budget` (tuner/time_budget.h): durations in hours, minutes
// and seconds, their canonical text, and errors that name the column.
#include "tuner/time_budget.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace mlatune {
namespace {

using std::chrono::milliseconds;

TEST(TuneTimeBudget, ParsesHoursMinutesSecondsAndFractions) {
  EXPECT_EQ(parse_time_budget("90s").limit, milliseconds(90'000));
  EXPECT_EQ(parse_time_budget("10m").limit, milliseconds(600'000));
  EXPECT_EQ(parse_time_budget("1h").limit, milliseconds(3'600'000));
  EXPECT_EQ(parse_time_budget("1h30m").limit, milliseconds(5'400'000));
  EXPECT_EQ(parse_time_budget("1h2m3s").limit, milliseconds(3'723'000));
  EXPECT_EQ(parse_time_budget("2.5m").limit, milliseconds(150'000));
  EXPECT_EQ(parse_time_budget("0.25s").limit, milliseconds(250));
}

TEST(TuneTimeBudget, CanonicalTextReadsBackTheSame) {
  for (const char* text : {"90s", "10m", "1h", "1h30m", "2.5m", "0.25s", "1h0m5s", "3600s"}) {
    const TimeBudget budget = parse_time_budget(text);
    EXPECT_EQ(parse_time_budget(to_string(budget)), budget) << text << " -> " << to_string(budget);
  }
  EXPECT_EQ(to_string(parse_time_budget("90s")), "1m30s");
  EXPECT_EQ(to_string(parse_time_budget("3600s")), "1h");
  EXPECT_EQ(to_string(parse_time_budget("2.5s")), "2.5s");
}

// The message names the column of the offending character.
std::string error_of(const std::string& text) {
  try {
    parse_time_budget(text);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "'" << text << "' parsed";
  return {};
}

TEST(TuneTimeBudget, BadTextIsAnInputErrorAtItsColumn) {
  EXPECT_NE(error_of("10x").find("column 3: unknown unit 'x'"), std::string::npos) << error_of("10x");
  EXPECT_NE(error_of("10").find("column 3: a unit must follow 10"), std::string::npos) << error_of("10");
  EXPECT_NE(error_of("m").find("column 1: expected a number"), std::string::npos) << error_of("m");
  EXPECT_NE(error_of("10m1h").find("column 5: unit 'h' after 'm'"), std::string::npos) << error_of("10m1h");
  EXPECT_NE(error_of("5s5s").find("column 4"), std::string::npos) << error_of("5s5s");
  EXPECT_NE(error_of("1.m").find("column 3: expected digits after the decimal point"), std::string::npos)
      << error_of("1.m");
  EXPECT_NE(error_of("-5m").find("column 1"), std::string::npos) << error_of("-5m");
  EXPECT_NE(error_of("0s").find("positive"), std::string::npos) << error_of("0s");
  EXPECT_NE(error_of("20000h").find("more than 10000 hours"), std::string::npos) << error_of("20000h");
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
  EXPECT_NE(error_of("10 m").find("column 3"), std::string::npos) << error_of("10 m");
}

}  // namespace
}  // namespace mlatune
