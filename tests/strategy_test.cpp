// Search strategies: valid and distinct proposals that exhaust a space exactly,
// determinism per seed, and, on replayed H200 measurements of the flagship
// space, the search quality the issue asks for: brute force finds the
// optimum; annealing and the model-based strategy come within 3 % of it in
// fewer evaluations than random search, on average over seeds; bayes with a
// fixed seed within 3 % in a tenth of the space; the default strategy meets
// the target on every exhaustive fixture; and auto's rule.
#include "tuner/strategy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <ostream>
#include <set>

#include "core/error.h"
#include "core/space.h"
#include "tests/run_program.h"
#include "tests/replay_fixtures.h"
#include "tuner/replay.h"
#include "tuner/shard.h"
#include "tuner/strategies/registry.h"
#include "tests/h200_sweeps_where.h"

namespace mlatune {

// Readable failures: the choice indices, not the vector's bytes.
void PrintTo(const Config& config, std::ostream* out) {
  *out << "{";
  for (std::size_t p = 0; p < config.choice.size(); ++p) *out << (p ? "," : "") << config.choice[p];
  *out << "}";
}

namespace {

namespace fs = std::filesystem;
const fs::path tests_dir = fs::path(MLATUNE_TEST_DATA_DIR);

const SearchSpace& small_space() {
  static const SearchSpace space = SearchSpace::load(tests_dir / "spaces" / "small.yaml");
  return space;
}
// The flagship's exact configs: the recorded sweeps measured no shape-bucketed
// config (replay serves exhaustive data only).
const SearchSpace& flagship() {
  static const SearchSpace space =
      SearchSpace::load(tests_dir.parent_path() / "search_spaces" / "fused_mla_attention.yaml")
          .restrict({kH200SweepsWhere});
  return space;
}
const ReplayData& h200() {
  static const ReplayData data =
      ReplayData::load(tests_dir / "data" / "h200_sweeps.csv", flagship());
  return data;
}

// Runs a strategy to exhaustion, feeding it a made-up but deterministic time
// per config, and returns its proposals.
std::vector<Config> exhaust(Strategy& strategy, std::size_t limit) {
  std::vector<Config> out;
  while (out.size() < limit) {
    auto c = strategy.next();
    if (!c) break;
    double time = 1.0;
    for (std::size_t p = 0; p < c->choice.size(); ++p) time += (p + 1) * c->choice[p];
    // Some configs fail, to exercise that path.
    strategy.observe(
        *c, c->choice[0] == 1 && c->choice[2] == 0 ? std::nullopt : std::optional<double>(time));
    out.push_back(*c);
  }
  return out;
}

StrategyKind named(const char* name) { return parse_strategy_kind(name); }

// How the help text shows one registry entry.
std::string help_entry(const StrategyEntry& entry) {
  return std::string(entry.name) + ": " + std::string(entry.description);
}

std::vector<Config> proposals(StrategyKind kind, std::uint64_t seed, std::size_t n,
                              const char* shape_text = "N=1000,M=16") {
  const Shape shape = small_space().parse_shape(shape_text);
  auto strategy = make_strategy(kind, small_space(), shape, seed);
  return exhaust(*strategy, n);
}

class EveryStrategy : public ::testing::TestWithParam<StrategyKind> {};

TEST_P(EveryStrategy, ProposesEveryValidConfigExactlyOnce) {
  // Held whole, reached by sampling only (with the enumeration of what is
  // left once sampling keeps hitting tried configs), and in between.
  for (std::uint64_t held : {std::uint64_t{1} << 16, std::uint64_t{0}, std::uint64_t{7}})
    for (const char* text : {"N=1000,M=16", "N=64,M=3"}) {
      const Shape shape = small_space().parse_shape(text);
      std::set<Config> valid;
      small_space().for_each_valid(shape, [&](const Config& c) {
        valid.insert(c);
        return true;
      });
      ASSERT_GT(valid.size(), 10u);
      ASSERT_LT(valid.size(), small_space().raw_count());  // constraints do remove some

      auto strategy = make_strategy(GetParam(), small_space(), shape, 7, StrategyMemory{held});
      auto seen = exhaust(*strategy, 10'000);
      for (const auto& c : seen) EXPECT_TRUE(small_space().check(c, shape)) << text;
      std::set<Config> distinct(seen.begin(), seen.end());
      EXPECT_EQ(distinct.size(), seen.size())
          << text << " held " << held << ": a config proposed twice";
      EXPECT_EQ(distinct, valid) << text << " held " << held;
      EXPECT_FALSE(strategy->next()) << "still proposing after exhausting the space";
    }
}

TEST_P(EveryStrategy, SamplesALargeSpaceDeterministically) {
  const SearchSpace large = SearchSpace::load(tests_dir / "spaces" / "large.yaml");
  const Shape shape = large.parse_shape("M=4096,N=4096,K=4096");
  ASSERT_GT(large.count(shape), StrategyMemory{}.max_held_configs);
  auto run = [&](std::uint64_t seed) {
    auto strategy = make_strategy(GetParam(), large, shape, seed);
    return exhaust(*strategy, 150);
  };
  auto first = run(5);
  ASSERT_EQ(first.size(), 150u);
  for (const auto& c : first) EXPECT_TRUE(large.check(c, shape));
  EXPECT_EQ(std::set<Config>(first.begin(), first.end()).size(), first.size());
  EXPECT_EQ(run(5), first);
}

TEST_P(EveryStrategy, SameSeedSameSequence) {
  EXPECT_EQ(proposals(GetParam(), 42, 30), proposals(GetParam(), 42, 30));
}

TEST_P(EveryStrategy, ProposesOnlyValidDistinctConfigsOnTheFlagship) {
  const Shape shape = flagship().parse_shape("B=4,T=256,H=8,D=32,R=64");
  auto strategy = make_strategy(GetParam(), flagship(), shape, 3);
  std::set<Config> seen;
  for (int i = 0; i < 300; ++i) {
    auto c = strategy->next();
    ASSERT_TRUE(c);
    ASSERT_TRUE(flagship().check(*c, shape));
    ASSERT_TRUE(seen.insert(*c).second) << flagship().config_string(*c);
    strategy->observe(*c, h200().time(shape, *c));
  }
}

INSTANTIATE_TEST_SUITE_P(All, EveryStrategy, ::testing::ValuesIn(all_strategy_kinds()),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(Strategy, DifferentSeedsDifferentSequences) {
  for (StrategyKind kind : {named("random"), named("annealing"), named("model"), named("bayes")})
    EXPECT_NE(proposals(kind, 1, 30), proposals(kind, 2, 30)) << to_string(kind);
}

TEST(Strategy, BruteForceFollowsEnumerationOrder) {
  const Shape shape = small_space().parse_shape("N=64,M=3");
  std::vector<Config> order;
  small_space().for_each_valid(shape, [&](const Config& c) {
    order.push_back(c);
    return true;
  });
  EXPECT_EQ(proposals(named("brute_force"), 9, 10'000, "N=64,M=3"), order);
}

TEST(Strategy, KindsParseAndUnknownNamesListTheValidOnes) {
  for (StrategyKind kind : all_strategy_kinds())
    EXPECT_EQ(parse_strategy_kind(to_string(kind)), kind);
  try {
    parse_strategy_kind("genetic");
    FAIL() << "no error for an unknown strategy";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("genetic"), std::string::npos) << message;
    for (const char* name : {"auto", "brute_force", "random", "annealing", "model", "bayes"})
      EXPECT_NE(message.find(name), std::string::npos) << message;
  }
}

// ---- the registry ------------------------------------------------------------

TEST(StrategyRegistry, ListsExactlyTheStrategiesInOrderAutoFirst) {
  std::vector<std::string> names;
  for (const StrategyEntry& entry : strategy_registry()) names.emplace_back(entry.name);
  EXPECT_EQ(names, (std::vector<std::string>{"auto", "brute_force", "random", "annealing", "model", "bayes"}));
  EXPECT_EQ(to_string(StrategyKind{}), "auto");
  EXPECT_EQ(StrategyKind{}, named("auto"));
  ASSERT_EQ(all_strategy_kinds().size(), strategy_registry().size());
  for (std::size_t i = 0; i < strategy_registry().size(); ++i)
    EXPECT_EQ(to_string(all_strategy_kinds()[i]), strategy_registry()[i].name);
}

TEST(StrategyRegistry, EveryEntryHasAOneLineDescriptionThatTheHelpTextCarries) {
  const std::string help = describe_strategies();
  for (const StrategyEntry& entry : strategy_registry()) {
    EXPECT_FALSE(entry.description.empty()) << entry.name;
    EXPECT_EQ(entry.description.find('\n'), std::string_view::npos) << entry.name;
    EXPECT_NE(help.find(help_entry(entry)), std::string::npos) << help;
  }
}

TEST(StrategyRegistry, EveryFactoryMakesAStrategyThatProposesValidDistinctConfigs) {
  const Shape shape = small_space().parse_shape("N=1000,M=16");
  for (const StrategyEntry& entry : strategy_registry()) {
    ASSERT_NE(entry.create, nullptr) << entry.name;
    auto strategy = entry.create(small_space(), shape, 11, StrategyMemory{}, StrategyContext{});
    ASSERT_NE(strategy, nullptr) << entry.name;
    std::set<Config> seen;
    for (const Config& c : exhaust(*strategy, 25)) {
      EXPECT_TRUE(small_space().check(c, shape)) << entry.name;
      EXPECT_TRUE(seen.insert(c).second) << entry.name << ": a config proposed twice";
    }
    EXPECT_EQ(seen.size(), 25u) << entry.name;
  }
}

// The CLI's --strategy help is generated from the registry: every entry
// appears in `mlatune tune --help` without an edit of the CLI.
TEST(StrategyRegistry, TuneHelpListsEveryEntry) {
  const fs::path cli = fs::path(MLATUNE_BINARY_DIR) / "mlatune";
  if (!fs::exists(cli)) GTEST_SKIP() << "the mlatune program is not built at " << cli;
  const fs::path scratch = fs::temp_directory_path() / ("mlatune_strategy_help_" + std::to_string(getpid()));
  fs::create_directories(scratch);
  const auto result = test_support::run_program(cli, {"tune", "--help"}, scratch);
  fs::remove_all(scratch);
  EXPECT_EQ(result.code, 0) << result.err;
  for (const StrategyEntry& entry : strategy_registry())
    EXPECT_NE(result.out.find(help_entry(entry)), std::string::npos) << result.out;
}

// ---- search quality on replayed H200 measurements -----------------------------

// Proposes the valid configs slowest first, by the replayed times: the worst
// possible ordering, used to show that the quality criterion can fail.
class WorstFirst final : public Strategy {
 public:
  WorstFirst(const SearchSpace& space, const ReplayData& data, const Shape& shape) {
    space.for_each_valid(shape, [&](const Config& c) {
      auto t = data.time(shape, c);
      order_.push_back({t ? *t : std::numeric_limits<double>::infinity(), c});
      return true;
    });
    std::sort(order_.begin(), order_.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
  }
  std::optional<Config> next() override {
    if (position_ == order_.size()) return std::nullopt;
    return order_[position_++].second;
  }
  void observe(const Config&, std::optional<double>) override {}

 private:
  std::vector<std::pair<double, Config>> order_;
  std::size_t position_ = 0;
};

constexpr int kSeeds = 10;
const char* const kExhaustiveShapes[] = {"B=2,T=32,H=4,D=16,R=24", "B=4,T=256,H=8,D=32,R=64"};

// Evaluations to come within 3 % of the optimum; a run that never does
// counts as the whole space.
double evaluations_to_3_percent(Strategy& strategy, const Shape& shape) {
  const std::size_t space = flagship().count(shape);
  const double optimum = h200().optimum(shape);
  auto trace = replay(strategy, h200(), shape, space, optimum * 1.03);
  auto n = trace.evaluations_to_within(optimum, 0.03);
  return static_cast<double>(n ? *n : space);
}

double mean_evaluations_to_3_percent(StrategyKind kind, const Shape& shape,
                                     StrategyMemory memory = {}) {
  double sum = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    auto strategy =
        make_strategy(kind, flagship(), shape, static_cast<std::uint64_t>(seed), memory);
    sum += evaluations_to_3_percent(*strategy, shape);
  }
  return sum / kSeeds;
}

TEST(ReplayedSearch, RecordedShapesAreExhaustive) {
  for (const char* text : kExhaustiveShapes) {
    const Shape shape = flagship().parse_shape(text);
    EXPECT_EQ(h200().size(shape), flagship().count(shape)) << text;
  }
}

TEST(ReplayedSearch, BruteForceFindsTheOptimum) {
  for (const char* text : kExhaustiveShapes) {
    const Shape shape = flagship().parse_shape(text);
    auto strategy = make_strategy(named("brute_force"), flagship(), shape, 0);
    auto trace = replay(*strategy, h200(), shape, std::numeric_limits<std::size_t>::max());
    EXPECT_EQ(trace.best_after.size(), flagship().count(shape)) << text;
    EXPECT_EQ(trace.best_after.back(), h200().optimum(shape)) << text;
  }
}

TEST(ReplayedSearch, AnnealingAndModelBeatRandomToWithin3Percent) {
  for (const char* text : kExhaustiveShapes) {
    const Shape shape = flagship().parse_shape(text);
    const double random = mean_evaluations_to_3_percent(named("random"), shape);
    const double annealing = mean_evaluations_to_3_percent(named("annealing"), shape);
    const double model = mean_evaluations_to_3_percent(named("model"), shape);
    // As on a space too large to hold: candidates from a sampled pool.
    const double sampled_model =
        mean_evaluations_to_3_percent(named("model"), shape, StrategyMemory{0});
    EXPECT_LT(annealing, random) << text << ": annealing " << annealing << ", random " << random;
    EXPECT_LT(model, random) << text << ": model " << model << ", random " << random;
    EXPECT_LT(sampled_model, random)
        << text << ": model (sampled pool) " << sampled_model << ", random " << random;
    std::printf(
        "%s: mean evaluations to 3%%: random %.1f, annealing %.1f, model %.1f, "
        "model with a sampled pool %.1f\n",
        text, random, annealing, model, sampled_model);
  }
}

TEST(ReplayedSearch, TheCriterionRejectsABadStrategy) {
  for (const char* text : kExhaustiveShapes) {
    const Shape shape = flagship().parse_shape(text);
    const double random = mean_evaluations_to_3_percent(named("random"), shape);
    WorstFirst worst(flagship(), h200(), shape);
    const double bad = evaluations_to_3_percent(worst, shape);
    EXPECT_FALSE(bad < random) << text << ": worst-first " << bad << ", random " << random;
  }
}

TEST(ReplayedSearch, BayesWithAFixedSeedComesWithin3PercentInATenthOfTheSpace) {
  for (const char* text : kExhaustiveShapes) {
    const Shape shape = flagship().parse_shape(text);
    const double tenth = 0.10 * static_cast<double>(flagship().count(shape));
    for (std::uint64_t held : {StrategyMemory{}.max_held_configs, std::uint64_t{0}}) {
      auto strategy = make_strategy(named("bayes"), flagship(), shape, 1, StrategyMemory{held});
      const double n = evaluations_to_3_percent(*strategy, shape);
      EXPECT_LE(n, tenth) << text << (held ? "" : " (sampled pool)") << ": " << n << " evaluations";
    }
  }
}

// The target, on every exhaustively recorded fixture shape (tests/
// replay_fixtures.h): the default strategy, told a budget of a quarter of
// the space (so that it searches), median over 10 seeds: within 3 % of the
// optimum with at most 10 % of the evaluations, also with the 32 proposals
// ahead of the results that a GPU sweep makes, and better than random search
// at every budget.
TEST(ReplayedSearch, TheDefaultStrategyMeetsTheTargetOnEveryExhaustiveFixture) {
  const test_support::FixtureSet set(test_support::default_fixture_files());
  int judged = 0;
  for (const test_support::Fixture& f : set.fixtures()) {
    if (!f.exhaustive()) continue;
    ++judged;
    StrategyContext context;
    context.max_evals = f.searchable() / 4;
    ASSERT_EQ(resolve_strategy(StrategyKind{}, f.valid, context), named("bayes")) << f.name;
    std::vector<double> to_3[3], above[3][3];  // [auto, auto ahead 32, random]
    for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
      const test_support::SearchRecord runs[3] = {test_support::judge(StrategyKind{}, f, seed, context),
                                                  test_support::judge(StrategyKind{}, f, seed, context, 32),
                                                  test_support::judge(named("random"), f, seed, {})};
      for (int k = 0; k < 3; ++k) {
        to_3[k].push_back(static_cast<double>(runs[k].evaluations_to_3_percent));
        for (int b = 0; b < 3; ++b) above[k][b].push_back(runs[k].above_at[b]);
      }
    }
    const double tenth = 0.10 * static_cast<double>(f.searchable());
    using test_support::median;
    EXPECT_LE(median(to_3[0]), tenth) << f.name;
    EXPECT_LE(median(to_3[1]), tenth) << f.name << " (32 ahead)";
    EXPECT_LT(median(to_3[0]), median(to_3[2])) << f.name;
    for (int b = 0; b < 3; ++b)
      EXPECT_LE(median(above[0][b]), median(above[2][b]))
          << f.name << " at " << test_support::kBudgetFractions[b] * 100 << " % of the space";
    std::printf("%s: median evaluations to 3%%: auto %.1f, auto 32 ahead %.1f, random %.1f (10%% = %.0f)\n",
                f.name.c_str(), median(to_3[0]), median(to_3[1]), median(to_3[2]), tenth);
  }
  EXPECT_GE(judged, 5) << "S0, S1, S2, S3 and S4 are exhaustive";
}

// ---- auto ----------------------------------------------------------------------

TEST(StrategyAuto, BruteForceWhenTheBudgetCoversTheSpaceElseBayes) {
  StrategyContext unbounded;
  EXPECT_EQ(resolve_strategy(StrategyKind{}, 1354, unbounded), named("brute_force"));
  StrategyContext covering;
  covering.max_evals = 1354;
  EXPECT_EQ(resolve_strategy(StrategyKind{}, 1354, covering), named("brute_force"));
  StrategyContext short_of_it;
  short_of_it.max_evals = 1353;
  EXPECT_EQ(resolve_strategy(StrategyKind{}, 1354, short_of_it), named("bayes"));
  StrategyContext timed;  // the clock may stop it before the space is done
  timed.time_limited = true;
  EXPECT_EQ(resolve_strategy(StrategyKind{}, 1354, timed), named("bayes"));
  timed.max_evals = 5000;
  EXPECT_EQ(resolve_strategy(StrategyKind{}, 1354, timed), named("bayes"));
  // Strategies that choose nothing stand for themselves.
  for (StrategyKind kind : all_strategy_kinds())
    if (kind != StrategyKind{}) {
      EXPECT_EQ(resolve_strategy(kind, 10, short_of_it), kind) << to_string(kind);
    }
}

TEST(StrategyAuto, ProposesWhatItChose) {
  const Shape shape = small_space().parse_shape("N=1000,M=16");
  const std::uint64_t valid = small_space().count(shape);
  auto sequence = [&](StrategyKind kind, const StrategyContext& context) {
    auto strategy = make_strategy(kind, small_space(), shape, 5, {}, context);
    return exhaust(*strategy, 40);
  };
  const StrategyContext everything;
  EXPECT_EQ(sequence(StrategyKind{}, everything), sequence(named("brute_force"), everything));
  StrategyContext some;
  some.max_evals = valid / 2;
  EXPECT_EQ(sequence(StrategyKind{}, some), sequence(named("bayes"), some));
  EXPECT_NE(sequence(StrategyKind{}, some), sequence(named("brute_force"), some));
}

TEST(StrategyAuto, ShardsSplitAShapeAsItsChoiceThereDoes) {
  // auto itself counts as adaptive (tuner/shard.h); a sweep asks what it
  // chose at each shape.
  EXPECT_EQ(shard_split(StrategyKind{}), ShardSplit::shapes);
  EXPECT_FALSE(strategy_registry().front().choose == nullptr);
  EXPECT_EQ(shard_split(resolve_strategy(StrategyKind{}, 100, {})), ShardSplit::configs);
  StrategyContext some;
  some.max_evals = 10;
  EXPECT_EQ(shard_split(resolve_strategy(StrategyKind{}, 100, some)), ShardSplit::shapes);
}

}  // namespace
}  // namespace mlatune
