// Warm start from other shapes (tuner/strategies/warm_start.h): configs tuned
// at other shapes, repaired to be valid at this one, nearest shape first;
// configs of another version of the space, and the shape itself, left out.
#include "tuner/strategies/warm_start.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "core/space.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const SearchSpace& small_space() {
  static const SearchSpace space = SearchSpace::load(fs::path(MLATUNE_TEST_DATA_DIR) / "spaces" / "small.yaml");
  return space;
}

TEST(StrategyWarmStart, LogShapeDistanceWeighsRatios) {
  const Shape a = small_space().parse_shape("N=64,M=4");
  EXPECT_DOUBLE_EQ(strategies::log_shape_distance(a, a), 0.0);
  EXPECT_NEAR(strategies::log_shape_distance(a, small_space().parse_shape("N=128,M=4")), std::log(2.0), 1e-12);
  EXPECT_NEAR(strategies::log_shape_distance(small_space().parse_shape("N=1024,M=8"),
                                             small_space().parse_shape("N=2048,M=4")),
              2 * std::log(2.0), 1e-12);
}

TEST(StrategyWarmStart, NearestFirstRepairedDistinctAndOnlyOfThisSpace) {
  const Shape here = small_space().parse_shape("N=1000,M=3");  // M % 4 != 0: no VECTOR
  const std::vector<strategies::TunedText> tuned = {
      // far, valid here as it is
      {"N=64,M=16", "ALGORITHM=plain,THREADS=64,ITEMS=2,VECTOR=false", 5.0},
      // nearest, needs VECTOR off here
      {"N=1000,M=4", "ALGORITHM=tiled,THREADS=128,ITEMS=4,VECTOR=true", 9.0},
      // nearer than the far one, farther than the nearest
      {"N=1000,M=2", "ALGORITHM=unrolled,THREADS=32,ITEMS=2,VECTOR=false", 20.0},
      // the shape itself: not a hint
      {"N=1000,M=3", "ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false", 1.0},
      // another version of the space
      {"N=500,M=3", "ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false,SPLIT=2", 1.0},
      // repairs to the same config as the nearest one: once
      {"N=2000,M=4", "ALGORITHM=tiled,THREADS=128,ITEMS=4,VECTOR=true", 9.5},
  };
  const strategies::WarmStart warm = strategies::warm_start(small_space(), here, tuned);
  auto config = [](const char* text) { return small_space().parse_config(text); };
  ASSERT_EQ(warm.configs.size(), 3u);
  EXPECT_EQ(warm.configs[0], config("ALGORITHM=tiled,THREADS=128,ITEMS=4,VECTOR=false"));
  EXPECT_EQ(warm.configs[1], config("ALGORITHM=unrolled,THREADS=32,ITEMS=2,VECTOR=false"));
  EXPECT_EQ(warm.configs[2], config("ALGORITHM=plain,THREADS=64,ITEMS=2,VECTOR=false"));
  for (const Config& c : warm.configs) EXPECT_TRUE(small_space().check(c, here));
  EXPECT_EQ(warm.repaired, 1u);
  EXPECT_EQ(warm.unusable, 1u);

  // The limit keeps the nearest.
  const strategies::WarmStart one = strategies::warm_start(small_space(), here, tuned, 1);
  ASSERT_EQ(one.configs.size(), 1u);
  EXPECT_EQ(one.configs[0], warm.configs[0]);
}

TEST(StrategyWarmStart, RepairsWithinTheCandidatesOfARestrictedSpace) {
  // `tune --where THREADS <= 64`: a hint with THREADS=128 moves to 64.
  const SearchSpace restricted = small_space().restrict({"THREADS <= 64"});
  const Shape here = restricted.parse_shape("N=1000,M=16");
  const strategies::WarmStart warm = strategies::warm_start(
      restricted, here, {{"N=500,M=16", "ALGORITHM=plain,THREADS=128,ITEMS=1,VECTOR=true", 3.0}});
  ASSERT_EQ(warm.configs.size(), 1u);
  EXPECT_EQ(warm.configs[0], restricted.parse_config("ALGORITHM=plain,THREADS=64,ITEMS=1,VECTOR=true"));
  EXPECT_EQ(warm.repaired, 1u);
}

}  // namespace
}  // namespace mlatune
