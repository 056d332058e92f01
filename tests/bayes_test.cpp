// The bayes strategy (tuner/strategies/bayes.h) beyond what every strategy
// must do (tests/strategy_test.cpp): spaces smaller than its design, nothing
// but failures, proposals made ahead of results, warm-start configs first,
// and learning where configs fail: on a space where half the configs fail,
// it proposes clearly fewer failures than random search once its design is
// done.  Also its tree ensemble (tuner/strategies/forest.h) on its own.
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <random>
#include <set>
#include <vector>

#include "core/space.h"
#include "tuner/strategies/forest.h"
#include "tuner/strategy.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
const fs::path spaces_dir = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";

StrategyKind bayes() { return parse_strategy_kind("bayes"); }

const SearchSpace& small_space() {
  static const SearchSpace space = SearchSpace::load(spaces_dir / "small.yaml");
  return space;
}

// 8 x 4 x 2 x 5 = 320 configs, all valid; those with A >= 4 fail (half of
// them), and the time falls towards A = 4, so the fastest configs border the
// failing region, as fast configs that use too many registers or too much
// shared memory do.
const SearchSpace& half_failing_space() {
  static const SearchSpace space = SearchSpace::parse(R"(kernel: half_failing
template: tiny.cu
entry: tiny
reference:
  template: tiny_reference.cu
  entry: tiny_reference
  grid: [1, 1, 1]
  block: [128, 1, 1]
shape:
  variables: [N]
  defaults:
    - {N: 1024}
arguments:
  - {name: x, type: float32, role: input,  shape: [N]}
  - {name: y, type: float32, role: output, shape: [N]}
parameters:
  A: [0, 1, 2, 3, 4, 5, 6, 7]
  B: [p, q, r, s]
  C: [false, true]
  D: [1, 2, 4, 8, 16]
default: {A: 0, B: p, C: false, D: 1}
launch:
  grid: [1, 1, 1]
  block: [128, 1, 1]
)",
                                                      "half_failing.yaml", spaces_dir);
  return space;
}

bool fails(const Config& c) { return c.choice[0] >= 4; }
double time_of(const Config& c) {
  return 100.0 - 10.0 * c.choice[0] + 3.0 * c.choice[1] + 2.0 * c.choice[2] + std::abs(2.0 - c.choice[3]);
}

/// Failures among the proposals after the first `skip`, of `total`.
int failures_after(Strategy& strategy, int skip, int total) {
  int failed = 0;
  for (int i = 0; i < total; ++i) {
    auto c = strategy.next();
    EXPECT_TRUE(c);
    if (!c) break;
    if (i >= skip) failed += fails(*c);
    strategy.observe(*c, fails(*c) ? std::nullopt : std::optional<double>(time_of(*c)));
  }
  return failed;
}

TEST(BayesStrategy, LearnsToAvoidAFailingRegion) {
  const Shape shape = half_failing_space().parse_shape("N=1024");
  ASSERT_EQ(half_failing_space().count(shape), 320u);
  // The design takes 8 configs here (2 per parameter); the next 60 are
  // chosen by the models.
  int bayes_failed = 0, random_failed = 0;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    auto b = make_strategy(bayes(), half_failing_space(), shape, seed);
    auto r = make_strategy(parse_strategy_kind("random"), half_failing_space(), shape, seed);
    bayes_failed += failures_after(*b, 8, 68);
    random_failed += failures_after(*r, 8, 68);
  }
  // Random proposes about half failures (300 of 600); the model a few, at
  // the boundary it must find.
  EXPECT_GT(random_failed, 200) << "the test space is not half failing";
  EXPECT_LT(bayes_failed, random_failed / 4) << "bayes " << bayes_failed << ", random " << random_failed;
}

TEST(BayesStrategy, FindsTheFastestConfigThatRunsNextToTheFailures) {
  // The fastest config that runs: A = 3 (the boundary), B = p, C = false, D = 4.
  const Shape shape = half_failing_space().parse_shape("N=1024");
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    auto b = make_strategy(bayes(), half_failing_space(), shape, seed);
    double best = 1e300;
    for (int i = 0; i < 64; ++i) {  // a fifth of the space
      auto c = b->next();
      ASSERT_TRUE(c);
      const std::optional<double> t = fails(*c) ? std::nullopt : std::optional<double>(time_of(*c));
      b->observe(*c, t);
      if (t) best = std::min(best, *t);
    }
    EXPECT_EQ(best, 70.0) << "seed " << seed;
  }
}

TEST(BayesStrategy, ExhaustsASpaceSmallerThanItsDesign) {
  // 3 valid configs at N=64,M=3: fewer than the design's 8.
  const SearchSpace tiny = small_space().restrict({"ALGORITHM == plain && VECTOR == 0 && THREADS <= 128", "ITEMS == 1"});
  const Shape shape = tiny.parse_shape("N=64,M=3");
  std::set<Config> valid;
  tiny.for_each_valid(shape, [&](const Config& c) {
    valid.insert(c);
    return true;
  });
  ASSERT_EQ(valid.size(), 3u);
  auto b = make_strategy(bayes(), tiny, shape, 1);
  std::set<Config> seen;
  while (auto c = b->next()) {
    ASSERT_TRUE(seen.insert(*c).second);
    b->observe(*c, 1.0 + static_cast<double>(seen.size()));
  }
  EXPECT_EQ(seen, valid);
}

TEST(BayesStrategy, WithNothingButFailuresItStillProposesEveryConfigOnce) {
  const Shape shape = small_space().parse_shape("N=1000,M=16");
  std::set<Config> valid;
  small_space().for_each_valid(shape, [&](const Config& c) {
    valid.insert(c);
    return true;
  });
  auto b = make_strategy(bayes(), small_space(), shape, 4);
  std::set<Config> seen;
  while (auto c = b->next()) {
    ASSERT_TRUE(small_space().check(*c, shape));
    ASSERT_TRUE(seen.insert(*c).second) << "proposed twice";
    b->observe(*c, std::nullopt);
  }
  EXPECT_EQ(seen, valid);
}

TEST(BayesStrategy, ProposesAheadOfResultsWithoutRepeatingAndDeterministically) {
  // As a GPU sweep asks: 8 proposals before the first result comes back.
  const Shape shape = half_failing_space().parse_shape("N=1024");
  auto run = [&](std::uint64_t seed) {
    auto b = make_strategy(bayes(), half_failing_space(), shape, seed);
    std::deque<Config> in_flight;
    std::vector<Config> order;
    while (order.size() < 200) {
      while (in_flight.size() < 8)
        if (auto c = b->next()) in_flight.push_back(*c); else break;
      if (in_flight.empty()) break;
      const Config c = in_flight.front();
      in_flight.pop_front();
      b->observe(c, fails(c) ? std::nullopt : std::optional<double>(time_of(c)));
      order.push_back(c);
    }
    return order;
  };
  const std::vector<Config> first = run(9);
  ASSERT_EQ(first.size(), 200u);
  EXPECT_EQ(std::set<Config>(first.begin(), first.end()).size(), first.size());
  EXPECT_EQ(run(9), first);
  EXPECT_NE(run(10), first);
}

TEST(BayesStrategy, ProposesTheWarmStartConfigsFirstInOrder) {
  const Shape shape = half_failing_space().parse_shape("N=1024");
  StrategyContext context;
  for (const char* text : {"A=3,B=q,C=true,D=4", "A=1,B=s,C=false,D=16", "A=3,B=q,C=true,D=4" /* again */})
    context.warm_start.push_back(half_failing_space().parse_config(text));
  auto b = make_strategy(bayes(), half_failing_space(), shape, 2, {}, context);
  std::vector<Config> proposed;
  for (int i = 0; i < 12; ++i) {
    auto c = b->next();
    ASSERT_TRUE(c);
    proposed.push_back(*c);
    b->observe(*c, fails(*c) ? std::nullopt : std::optional<double>(time_of(*c)));
  }
  EXPECT_EQ(proposed[0], context.warm_start[0]);
  EXPECT_EQ(proposed[1], context.warm_start[1]);
  // A config given twice is proposed once.
  EXPECT_EQ(std::set<Config>(proposed.begin(), proposed.end()).size(), proposed.size());
}

// Values a nearby shape found slow as a whole (StrategyContext::
// costly_values) stay out of the design, which is proposed blind (ahead of
// any result): only the warm start carries one.  Without them the design
// shows every value of B within its first proposals.
TEST(BayesStrategy, TheDesignLeavesOutCostlyValues) {
  const SearchSpace& space = half_failing_space();
  const Shape shape = space.parse_shape("N=1024");
  StrategyContext context;
  context.warm_start.push_back(space.parse_config("A=3,B=s,C=true,D=4"));
  auto blind = [&](const StrategyContext& given) {
    std::set<std::string> b;
    auto strategy = make_strategy(bayes(), space, shape, 5, {}, given);
    for (int i = 0; i < 20; ++i) {
      auto c = strategy->next();
      EXPECT_TRUE(c);
      if (!c) break;
      if (i > 0) b.insert(space.parameters()[1].text[c->choice[1]]);
    }
    return b;
  };
  EXPECT_EQ(blind(context), (std::set<std::string>{"p", "q", "r", "s"}));
  context.costly_values = {{1, 2}, {1, 3}};  // B = r, B = s
  EXPECT_EQ(blind(context), (std::set<std::string>{"p", "q"}));
}

TEST(BayesStrategy, ATinyBudgetShrinksTheDesign) {
  // Told 8 evaluations, the design takes 3 (a quarter, at least 3), so that
  // the model chooses most of them.  The model's proposals here know that A
  // = 3 is faster than A = 0.
  const Shape shape = half_failing_space().parse_shape("N=1024");
  StrategyContext context;
  context.max_evals = 8;
  int high_a = 0;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    auto b = make_strategy(bayes(), half_failing_space(), shape, seed, {}, context);
    for (int i = 0; i < 8; ++i) {
      auto c = b->next();
      ASSERT_TRUE(c);
      if (i >= 4 && c->choice[0] >= 2 && c->choice[0] <= 3) ++high_a;
      b->observe(*c, fails(*c) ? std::nullopt : std::optional<double>(time_of(*c)));
    }
  }
  // Random would give A in {2, 3} a quarter of the time: 10 of 40.
  EXPECT_GT(high_a, 20);
}

// ---- the tree ensemble ---------------------------------------------------------

TEST(StrategyForest, LearnsAStepAndIsUnsureWhereTheDataDisagree) {
  // y = 1 for x0 < 5, else 3; x1 is noise.  Leave a gap at x0 in [4, 6].
  strategies::FeatureRows rows{2, {}};
  std::vector<double> y;
  std::mt19937_64 noise(3);
  for (int x0 = 0; x0 < 10; ++x0) {
    if (x0 == 4 || x0 == 5 || x0 == 6) continue;
    for (int k = 0; k < 5; ++k) {
      rows.x.push_back(static_cast<float>(x0));
      rows.x.push_back(static_cast<float>(noise() % 7));
      y.push_back(x0 < 5 ? 1.0 : 3.0);
    }
  }
  strategies::TreeEnsemble forest;
  std::mt19937_64 rng(1);
  forest.fit(rows, y, rng);
  ASSERT_TRUE(forest.fitted());
  const float low[] = {1, 3}, high[] = {8, 3}, gap[] = {5, 3};
  EXPECT_NEAR(forest.predict(low).mean, 1.0, 1e-9);
  EXPECT_NEAR(forest.predict(high).mean, 3.0, 1e-9);
  EXPECT_LT(forest.predict(low).spread, 1e-9);
  // In the gap the trees split at random thresholds between 3 and 7: they
  // disagree.
  const auto in_gap = forest.predict(gap);
  EXPECT_GT(in_gap.spread, 0.3);
  EXPECT_GT(in_gap.mean, 1.0);
  EXPECT_LT(in_gap.mean, 3.0);

  // The same data and seed, the same model.
  strategies::TreeEnsemble again;
  std::mt19937_64 rng2(1);
  again.fit(rows, y, rng2);
  EXPECT_EQ(again.predict(gap).mean, in_gap.mean);
  EXPECT_EQ(again.predict(gap).spread, in_gap.spread);
}

}  // namespace
}  // namespace mlatune
