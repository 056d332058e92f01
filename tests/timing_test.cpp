#include "tuner/timing.h"

#include <gtest/gtest.h>

#include "tuner/error.h"

namespace mlatune {
namespace {

TEST(Timing, SummaryOfKnownSamples) {
  // Order must not matter: the summary sorts.
  std::vector<double> samples = {10, 3, 7, 1, 5, 9, 2, 8, 4, 6};
  TimingStats stats = summarize_times(samples, CacheMode::rotate, "test method");
  EXPECT_DOUBLE_EQ(stats.median_us, 5.5);
  EXPECT_DOUBLE_EQ(stats.min_us, 1.0);
  EXPECT_DOUBLE_EQ(stats.p90_us, 9.1);  // rank 8.1 of 0..9
  EXPECT_DOUBLE_EQ(stats.spread, (9.1 - 1.0) / 5.5);
  EXPECT_EQ(stats.count, 10);
  EXPECT_EQ(stats.cache, CacheMode::rotate);
  EXPECT_EQ(stats.method, "test method");
}

TEST(Timing, SingleSample) {
  TimingStats stats = summarize_times({4.25}, CacheMode::cold, "");
  EXPECT_DOUBLE_EQ(stats.median_us, 4.25);
  EXPECT_DOUBLE_EQ(stats.p90_us, 4.25);
  EXPECT_DOUBLE_EQ(stats.spread, 0.0);
}

TEST(Timing, NoSamplesIsAnError) {
  EXPECT_THROW(summarize_times({}, CacheMode::hot, ""), EnvironmentError);
}

TEST(Timing, CacheModeNames) {
  for (CacheMode mode : {CacheMode::cold, CacheMode::rotate, CacheMode::hot})
    EXPECT_EQ(parse_cache_mode(to_string(mode)), mode);
  EXPECT_EQ(to_string(CacheMode::cold), "cold");
  EXPECT_FALSE(parse_cache_mode("warm").has_value());
}

}  // namespace
}  // namespace mlatune
