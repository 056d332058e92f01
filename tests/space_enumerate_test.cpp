// Lazy enumeration: count() and for_each_valid() against a brute force over
// the raw product (through check()), and sample() and sample_many() against
// a chi-square test of uniformity that is shown to catch a biased sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/space.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
const fs::path spaces_dir = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";

// A space over shape variables N, M with the given parameters ("NAME: [..]"
// lines) and constraints.
SearchSpace make_space(const std::vector<std::string>& parameters,
                       const std::vector<std::string>& constraints,
                       const std::string& default_shape = "{N: 64, M: 8}") {
  std::ostringstream yaml;
  yaml << "kernel: generated\ntemplate: tiny.cu\nentry: tiny\n"
       << "reference: {template: tiny_reference.cu, entry: tiny_reference, grid: [N, 1, 1], "
          "block: [1, 1, 1]}\n"
       << "shape: {variables: [N, M], defaults: [" << default_shape << "]}\n"
       << "arguments:\n  - {name: y, type: float32, role: output, shape: [N]}\n"
       << "parameters:\n";
  std::ostringstream defaults;
  for (const std::string& p : parameters) {
    yaml << "  " << p << "\n";
    std::string name = p.substr(0, p.find(':'));
    std::string first = p.substr(p.find('[') + 1);
    first = first.substr(0, first.find_first_of(",]"));
    defaults << (defaults.tellp() > 0 ? ", " : "") << name << ": " << first;
  }
  const std::string head = yaml.str();
  auto text = [&](const std::string& default_map, bool with_constraints) {
    std::ostringstream out;
    out << head << "default: {" << default_map << "}\n";
    if (with_constraints && !constraints.empty()) {
      out << "constraints:\n";
      for (const std::string& c : constraints) out << "  - \"" << c << "\"\n";
    }
    out << "launch: {grid: [1, 1, 1], block: [1, 1, 1]}\n";
    return out.str();
  };
  // The default must be valid at the default shape: the first valid config
  // there, found on the space restricted by the constraints (which does not
  // check its default).  With none valid, parsing fails as it should.
  std::string default_map = defaults.str();
  SearchSpace free = SearchSpace::parse(text(default_map, false), "generated.yaml", spaces_dir);
  SearchSpace restricted = free.restrict(constraints);
  restricted.for_each_valid(free.default_shapes().front(), [&](const Config& c) {
    default_map.clear();
    for (std::size_t i = 0; i < c.choice.size(); ++i) {
      const Parameter& p = free.parameters()[i];
      default_map += (i ? ", " : "") + p.name + ": " + p.text[c.choice[i]];
    }
    return false;
  });
  return SearchSpace::parse(text(default_map, true), "generated.yaml", spaces_dir);
}

// Every raw config in lexicographic order of choice indices.
std::vector<Config> raw_product(const SearchSpace& s) {
  std::vector<Config> out;
  Config c;
  c.choice.assign(s.parameters().size(), 0);
  for (;;) {
    out.push_back(c);
    std::size_t i = c.choice.size();
    while (i > 0) {
      --i;
      if (++c.choice[i] < s.parameters()[i].numeric.size()) break;
      c.choice[i] = 0;
      if (i == 0) return out;
    }
    if (c.choice.empty()) return out;
  }
}

std::vector<Config> brute_force_valid(const SearchSpace& s, const Shape& shape) {
  std::vector<Config> out;
  for (const Config& c : raw_product(s))
    if (s.check(c, shape)) out.push_back(c);
  return out;
}

std::vector<Config> enumerated(const SearchSpace& s, const Shape& shape) {
  std::vector<Config> out;
  s.for_each_valid(shape, [&](const Config& c) {
    out.push_back(c);
    return true;
  });
  return out;
}

struct Case {
  std::vector<std::string> parameters;
  std::vector<std::string> constraints;
};

// Constraints attached at every depth, on parameters in and out of order, on
// shape variables only, and none at all.
const std::vector<Case> cases = {
    {{"A: [1, 2, 3, 4]", "B: [1, 2, 4, 8, 16]", "C: [false, true]"}, {}},
    {{"A: [1, 2, 3, 4]", "B: [1, 2, 4, 8, 16]", "C: [false, true]"}, {"A * B <= 16"}},
    {{"A: [1, 2, 3, 4]", "B: [1, 2, 4, 8, 16]", "C: [false, true]"}, {"C || A % 2 == 0", "B >= A"}},
    {{"K: [x, y, z]", "A: [1, 2, 3, 4, 5, 6]", "B: [0, 1, 2]", "C: [2, 4, 8]"},
     {"K == y || A != 3", "B < C", "A + B + C <= N / 4", "K != z || M % 2 == 0"}},
    {{"A: [1, 2, 3]", "B: [1, 2, 3]", "C: [1, 2, 3]", "D: [1, 2, 3]", "E: [1, 2, 3]"},
     {"E >= A", "min(B, D) == 2 || max(B, D) == 3", "!(C == 2) || N > 100"}},
    {{"A: [1, 2, 3]", "B: [5, 6]"}, {"N >= 32", "M <= 64"}},  // shape-only constraints
    {{"A: [-2, -1, 0, 1, 2]", "B: [1, 2, 3]"}, {"abs(A) * B <= 4", "A ? 1 : B == 1 || B == 3"}},
};

const std::vector<Shape> shapes = {{{64, 8}}, {{1000, 7}}, {{16, 128}}, {{512, 2}}};

TEST(Enumeration, CountEqualsBruteForce) {
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    SearchSpace s = make_space(cases[i].parameters, cases[i].constraints);
    std::uint64_t raw = 1;
    for (const Parameter& p : s.parameters()) raw *= p.numeric.size();
    EXPECT_EQ(s.raw_count(), raw);
    for (const Shape& shape : shapes)
      EXPECT_EQ(s.count(shape), brute_force_valid(s, shape).size()) << s.shape_string(shape);
  }
}

TEST(Enumeration, ForEachValidVisitsExactlyTheValidConfigsInOrder) {
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    SearchSpace s = make_space(cases[i].parameters, cases[i].constraints);
    for (const Shape& shape : shapes) {
      std::vector<Config> visited = enumerated(s, shape);
      EXPECT_EQ(visited, brute_force_valid(s, shape)) << s.shape_string(shape);
      EXPECT_TRUE(std::is_sorted(visited.begin(), visited.end()));
    }
  }
}

TEST(Enumeration, SmallSpaceFileCountsMatchBruteForce) {
  SearchSpace s = SearchSpace::load(spaces_dir / "small.yaml");
  for (const Shape& shape : {Shape{{1000, 16}}, Shape{{64, 3}}, Shape{{1, 1}}}) {
    std::vector<Config> valid = brute_force_valid(s, shape);
    EXPECT_EQ(s.count(shape), valid.size());
    EXPECT_EQ(enumerated(s, shape), valid);
  }
  EXPECT_EQ(s.count(Shape{{1000, 16}}), 70u);
}

TEST(Enumeration, ForEachValidStopsWhenAsked) {
  SearchSpace s = make_space(cases[0].parameters, {});
  int visits = 0;
  s.for_each_valid(shapes[0], [&](const Config&) { return ++visits < 5; });
  EXPECT_EQ(visits, 5);
}

TEST(Enumeration, AShapeWithNoValidConfig) {
  SearchSpace s = make_space({"A: [1, 2, 4]", "B: [1, 2]"}, {"A * B <= N", "B <= 2"});
  Shape none{{1, 1}};
  EXPECT_EQ(s.count(none), 1u);  // only A=1, B=1 fits N=1
  SearchSpace tight = make_space({"A: [2, 4]", "B: [1, 2]"}, {"A * B <= N", "B <= 2"});
  EXPECT_EQ(tight.count(none), 0u);
  EXPECT_TRUE(enumerated(tight, none).empty());
  std::mt19937_64 rng(1);
  EXPECT_FALSE(tight.sample(none, rng).has_value());
  EXPECT_EQ(tight.most_restrictive_constraint(none), "A * B <= N");
  EXPECT_EQ(make_space({"A: [2, 4]"}, {}).most_restrictive_constraint(none), "");
}

TEST(Enumeration, NoValidConfigForADefaultShapeIsAnErrorNamingTheWorstConstraint) {
  try {
    make_space({"A: [2, 4]", "B: [1, 2, 3]"}, {"B <= 2", "A > N"}, "{N: 4, M: 1}");
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(e.message().find("'A > N' removes the most (6 of 6)"), std::string::npos) << e.what();
    EXPECT_EQ(e.where().file, "generated.yaml");
  }
}

TEST(Enumeration, RawCountSaturates) {
  std::vector<std::string> parameters;
  for (int i = 0; i < 20; ++i)
    parameters.push_back("P" + std::to_string(i) +
                         ": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]");
  SearchSpace s = make_space(parameters, {});
  EXPECT_EQ(s.raw_count(), UINT64_MAX);  // 16^20 = 2^80
  EXPECT_EQ(s.count(shapes[0]), UINT64_MAX);
  std::mt19937_64 rng(3);
  EXPECT_TRUE(s.sample(shapes[0], rng).has_value());
}

// ---- uniformity of sample() ----------------------------------------------------

// Upper critical value of chi-square with `df` degrees of freedom at
// significance 1e-3 (Wilson-Hilferty; z = 3.090).
double chi_square_critical(double df) {
  double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + 3.090 * std::sqrt(a), 3.0);
}

double chi_square(const std::map<Config, int>& observed, std::size_t categories, int draws) {
  const double expected = static_cast<double>(draws) / static_cast<double>(categories);
  double sum = 0.0;
  std::size_t seen = 0;
  for (const auto& [config, n] : observed) {
    sum += (n - expected) * (n - expected) / expected;
    ++seen;
  }
  sum += static_cast<double>(categories - seen) * expected;  // categories never drawn
  return sum;
}

template <typename Sampler>
double sampled_chi_square(const SearchSpace& s, const Shape& shape, Sampler&& draw, int draws,
                          bool* only_valid) {
  const std::vector<Config> valid = enumerated(s, shape);
  std::map<Config, int> observed;
  *only_valid = true;
  for (int i = 0; i < draws; ++i) {
    std::optional<Config> c = draw();
    if (!c || !s.check(*c, shape)) {
      *only_valid = false;
      continue;
    }
    ++observed[*c];
  }
  return chi_square(observed, valid.size(), draws);
}

TEST(Sampling, UniformOverValidConfigsWithHighAcceptance) {
  // 70 of 96 valid: rejection sampling succeeds nearly always.
  SearchSpace s = SearchSpace::load(spaces_dir / "small.yaml");
  Shape shape{{1000, 16}};
  std::mt19937_64 rng(12345);
  const int draws = 70 * 300;
  bool only_valid = false;
  double chi2 = sampled_chi_square(
      s, shape, [&] { return s.sample(shape, rng); }, draws, &only_valid);
  EXPECT_TRUE(only_valid);
  EXPECT_LT(chi2, chi_square_critical(69)) << "chi2 " << chi2;
}

TEST(Sampling, UniformOverValidConfigsWithTinyAcceptance) {
  // 20 valid of 8000 raw: rejection almost always gives up, so this exercises
  // the exact walk that skips subtrees by their counts.
  SearchSpace s =
      make_space({"A: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]",
                  "B: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]",
                  "C: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]"},
                 {"A + B == 19", "C == A % 4"});
  Shape shape{{64, 8}};
  ASSERT_EQ(s.count(shape), 20u);
  std::mt19937_64 rng(777);
  const int draws = 20 * 500;
  bool only_valid = false;
  double chi2 = sampled_chi_square(
      s, shape, [&] { return s.sample(shape, rng); }, draws, &only_valid);
  EXPECT_TRUE(only_valid);
  EXPECT_LT(chi2, chi_square_critical(19)) << "chi2 " << chi2;
}

TEST(Sampling, TheTestCatchesABiasedSampler) {
  // The same statistic on a sampler that favours the first valid config a
  // little (5% extra) must exceed the critical value: the test above can fail.
  SearchSpace s = SearchSpace::load(spaces_dir / "small.yaml");
  Shape shape{{1000, 16}};
  const std::vector<Config> valid = enumerated(s, shape);
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  bool only_valid = false;
  double chi2 = sampled_chi_square(
      s, shape,
      [&]() -> std::optional<Config> {
        if (coin(rng) < 0.05) return valid.front();
        return s.sample(shape, rng);
      },
      70 * 300, &only_valid);
  EXPECT_GT(chi2, chi_square_critical(69)) << "chi2 " << chi2;

  // And one that never draws the last valid config (rejection from a list
  // missing one element) is caught too.
  std::uniform_int_distribution<std::size_t> pick(0, valid.size() - 2);
  chi2 = sampled_chi_square(
      s, shape, [&]() -> std::optional<Config> { return valid[pick(rng)]; }, 70 * 300, &only_valid);
  EXPECT_GT(chi2, chi_square_critical(69)) << "chi2 " << chi2;
}

// sample_many: the same statistic, the draws made in batches.
TEST(Sampling, SampleManyIsUniformWithHighAndTinyAcceptance) {
  SearchSpace small = SearchSpace::load(spaces_dir / "small.yaml");
  const Shape small_shape{{1000, 16}};
  SearchSpace tiny =
      make_space({"A: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]",
                  "B: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]",
                  "C: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]"},
                 {"A + B == 19", "C == A % 4"});
  const Shape tiny_shape{{64, 8}};
  for (auto [space, shape, valid] :
       {std::tuple{&small, small_shape, 70}, std::tuple{&tiny, tiny_shape, 20}}) {
    std::mt19937_64 rng(4242);
    std::vector<Config> batch;
    std::size_t used = 0;
    bool only_valid = false;
    const double chi2 = sampled_chi_square(
        *space, shape,
        [&]() -> std::optional<Config> {
          if (used == batch.size()) {
            batch = space->sample_many(shape, rng, 997);
            EXPECT_EQ(batch.size(), 997u);
            used = 0;
          }
          return batch[used++];
        },
        valid * 300, &only_valid);
    EXPECT_TRUE(only_valid);
    EXPECT_LT(chi2, chi_square_critical(valid - 1)) << valid << " valid: chi2 " << chi2;
  }
}

// The order of a batch is random too: its first draw alone is uniform (a
// batch left in the walk's order would favour the first valid configs).
TEST(Sampling, SampleManysFirstDrawIsUniform) {
  SearchSpace s = SearchSpace::load(spaces_dir / "small.yaml");
  const Shape shape{{1000, 16}};
  std::mt19937_64 rng(8);
  bool only_valid = false;
  double chi2 = sampled_chi_square(
      s, shape, [&]() -> std::optional<Config> { return s.sample_many(shape, rng, 8).front(); }, 70 * 300,
      &only_valid);
  EXPECT_TRUE(only_valid);
  EXPECT_LT(chi2, chi_square_critical(69)) << "chi2 " << chi2;
  // Left in the walk's order (the smallest config first), batches fail it.
  chi2 = sampled_chi_square(
      s, shape,
      [&]() -> std::optional<Config> {
        std::vector<Config> batch = s.sample_many(shape, rng, 8);
        return *std::min_element(batch.begin(), batch.end());
      },
      70 * 300, &only_valid);
  EXPECT_GT(chi2, chi_square_critical(69)) << "chi2 " << chi2;
}

TEST(Sampling, SampleManyWithNothingValidOrNothingAskedIsEmptyAndSaturatedStillDraws) {
  std::mt19937_64 rng(5);
  SearchSpace tight = make_space({"A: [2, 4]", "B: [1, 2]"}, {"A * B <= N", "B <= 2"});
  EXPECT_TRUE(tight.sample_many(Shape{{1, 1}}, rng, 10).empty());
  EXPECT_TRUE(tight.sample_many(Shape{{8, 1}}, rng, 0).empty());
  EXPECT_EQ(tight.sample_many(Shape{{8, 1}}, rng, 10).size(), 10u);
  std::vector<std::string> parameters;
  for (int i = 0; i < 20; ++i)
    parameters.push_back("P" + std::to_string(i) +
                         ": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]");
  SearchSpace huge = make_space(parameters, {"P0 + P1 <= 20"});
  ASSERT_EQ(huge.count(shapes[0]), UINT64_MAX);
  const std::vector<Config> drawn = huge.sample_many(shapes[0], rng, 50);
  EXPECT_EQ(drawn.size(), 50u);
  for (const Config& c : drawn) EXPECT_TRUE(huge.check(c, shapes[0]));
}

TEST(Sampling, SampleIsReproducibleForAFixedSeed) {
  SearchSpace s = SearchSpace::load(spaces_dir / "small.yaml");
  Shape shape{{1000, 16}};
  std::mt19937_64 a(99), b(99);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(shape, a), s.sample(shape, b));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample_many(shape, a, 100), s.sample_many(shape, b, 100));
}

}  // namespace
}  // namespace mlatune
