// Warm start from other shapes (tuner/strategies/warm_start.h): configs tuned
// at other shapes, repaired to be valid at this one, nearest shape first;
// configs of another version of the space, and the shape itself, left out.
#include "tuner/strategies/warm_start.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <utility>

#include "core/space.h"
#include "tuner/strategy.h"

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

TEST(StrategyWarmStart, TunedShapesNearestFirstEachOnceWithoutThisShape) {
  const Shape here = small_space().parse_shape("N=1000,M=4");
  const std::vector<strategies::TunedText> tuned = {{"N=64,M=4", "a", 1.0},    {"N=1000,M=8", "b", 1.0},
                                                    {"N=1000,M=4", "c", 1.0},  {"N=1000,M=8", "d", 2.0},
                                                    {"N=1000,X=8", "e", 1.0}};  // not this space's shape
  EXPECT_EQ(strategies::tuned_shapes_nearest_first(small_space(), here, tuned),
            (std::vector<std::string>{"N=1000,M=8", "N=64,M=4"}));
}

// A value whose configs took a median of costly_factor times the fastest or
// more, at the nearest shape that measured costly_min_configs of them, is
// costly; its fastest config there comes back, repaired to be valid here.
// Fewer configs than that at a shape defer the judgment to the next shape;
// failures count for nothing.
TEST(StrategyWarmStart, CostlyValuesAreJudgedAtTheNearestShapeThatMeasuredThem) {
  const SearchSpace& space = small_space();
  const Shape here = space.parse_shape("N=1000,M=3");  // M % 4 != 0: no VECTOR
  auto ms = [](double us) { return std::optional<double>(us); };
  strategies::MeasuredShape near{"N=1000,M=4",
                                 {// fastest: 1 us
                                  {"ALGORITHM=plain,THREADS=128,ITEMS=1,VECTOR=false", ms(1.0)},
                                  {"ALGORITHM=plain,THREADS=64,ITEMS=1,VECTOR=false", ms(2.0)},
                                  {"ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false", ms(30.0)},
                                  // tiled: median 12x: costly; its fastest needs VECTOR off here
                                  {"ALGORITHM=tiled,THREADS=128,ITEMS=4,VECTOR=true", ms(9.0)},
                                  {"ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=false", ms(12.0)},
                                  {"ALGORITHM=tiled,THREADS=32,ITEMS=4,VECTOR=false", ms(50.0)},
                                  {"ALGORITHM=tiled,THREADS=256,ITEMS=4,VECTOR=false", std::nullopt},
                                  // unrolled: two configs only here
                                  {"ALGORITHM=unrolled,THREADS=32,ITEMS=1,VECTOR=false", ms(100.0)},
                                  {"ALGORITHM=unrolled,THREADS=64,ITEMS=1,VECTOR=false", ms(100.0)},
                                  // another version of the space
                                  {"ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false,SPLIT=2", ms(0.1)}}};
  strategies::MeasuredShape far{"N=64,M=16",
                                {{"ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false", ms(2.0)},
                                 {"ALGORITHM=unrolled,THREADS=32,ITEMS=2,VECTOR=false", ms(30.0)},
                                 {"ALGORITHM=unrolled,THREADS=64,ITEMS=2,VECTOR=false", ms(40.0)},
                                 {"ALGORITHM=unrolled,THREADS=128,ITEMS=2,VECTOR=false", ms(50.0)}}};
  const strategies::CostlyValues costly = strategies::costly_values(space, here, {near, far});
  ASSERT_EQ(costly.values.size(), 2u);
  EXPECT_EQ(costly.values[0].parameter, 0u);
  EXPECT_EQ(space.parameters()[0].text[costly.values[0].value], "tiled");
  EXPECT_DOUBLE_EQ(costly.values[0].median_ratio, 12.0);
  EXPECT_EQ(costly.values[0].shape, "N=1000,M=4");
  EXPECT_EQ(space.parameters()[0].text[costly.values[1].value], "unrolled");
  EXPECT_DOUBLE_EQ(costly.values[1].median_ratio, 20.0);  // 40 over the far shape's 2
  EXPECT_EQ(costly.values[1].shape, "N=64,M=16");
  ASSERT_EQ(costly.best.size(), 2u);
  EXPECT_EQ(space.config_string(costly.best[0]), "ALGORITHM=tiled,THREADS=128,ITEMS=4,VECTOR=false");
  EXPECT_EQ(space.config_string(costly.best[1]), "ALGORITHM=unrolled,THREADS=32,ITEMS=2,VECTOR=false");
  for (const Config& c : costly.best) EXPECT_TRUE(space.check(c, here));

  // Told to a context: both values, and the one best config not already in
  // its warm start, after it.
  StrategyContext context;
  context.warm_start = {costly.best[1], space.parse_config("ALGORITHM=plain,THREADS=128,ITEMS=1,VECTOR=false")};
  EXPECT_EQ(strategies::add_costly_values(costly, context), 1u);
  ASSERT_EQ(context.costly_values.size(), 2u);
  EXPECT_EQ(context.costly_values[0], std::make_pair(costly.values[0].parameter, costly.values[0].value));
  EXPECT_EQ(context.costly_values[1], std::make_pair(costly.values[1].parameter, costly.values[1].value));
  ASSERT_EQ(context.warm_start.size(), 3u);
  EXPECT_EQ(context.warm_start[2], costly.best[0]);

  // Below the factor, or with nothing measured, nothing is costly.
  near.results["ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=false"] = ms(9.9);
  EXPECT_EQ(strategies::costly_values(space, here, {near}).values.size(), 0u);
  EXPECT_TRUE(strategies::costly_values(space, here, {}).values.empty());
}

}  // namespace
}  // namespace mlatune
