// Compiled shape values (`shape.compiled`): the list form (SHAPE_<v> = v) and
// the map form (SHAPE_<name> = an expression over shape variables and
// parameters, e.g. a bucket), what definitions() gives for shapes of one
// bucket, how other expressions read SHAPE_<name>, and the definition hash.
// The error corpus for the map form is tests/spaces/bad/compiled_map_*.yaml.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/space.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
const fs::path spaces_dir = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";

std::string small_text() {
  std::ifstream in(spaces_dir / "small.yaml", std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// small.yaml with M compiled to a bucket when VECTOR is on, and the
// vector constraint and the shared memory reading the compiled value.
SearchSpace bucketed_space() {
  std::string text = small_text();
  text = replaced(text, "  compiled: [M]\n",
                  "  compiled:\n    M: \"VECTOR ? bucket(M, 4, 8, 16, 32) : M\"\n");
  text = replaced(text, "VECTOR == 0 || M % 4 == 0", "VECTOR == 0 || SHAPE_M % 4 == 0");
  text = replaced(text, "ALGORITHM == tiled ? THREADS * 4 : 0", "ALGORITHM == tiled ? SHAPE_M * 4 : 0");
  return SearchSpace::parse(text, "bucketed.yaml", spaces_dir);
}

std::string shape_m(const SearchSpace& s, const Config& c, const char* shape) {
  for (const auto& [name, value] : s.definitions(c, s.parse_shape(shape)))
    if (name == "SHAPE_M") return value;
  return "absent";
}

TEST(CompiledShape, ShapesOfOneBucketGetTheSameDefinitions) {
  SearchSpace s = bucketed_space();
  EXPECT_EQ(s.compiled_shape_variables(), (std::vector<std::string>{"M"}));
  const Config vector = s.parse_config("ALGORITHM=tiled,THREADS=64,ITEMS=1,VECTOR=true");
  const Config exact = s.parse_config("ALGORITHM=tiled,THREADS=64,ITEMS=1,VECTOR=false");
  EXPECT_EQ(shape_m(s, vector, "N=1000,M=9"), "16");
  EXPECT_EQ(s.definitions(vector, s.parse_shape("N=1000,M=9")),
            s.definitions(vector, s.parse_shape("N=77,M=16")));
  EXPECT_NE(s.definitions(vector, s.parse_shape("N=1000,M=16")),
            s.definitions(vector, s.parse_shape("N=1000,M=17")));
  EXPECT_EQ(shape_m(s, vector, "N=1000,M=17"), "32");
  EXPECT_EQ(shape_m(s, exact, "N=1000,M=9"), "9");
  // The reference is always exact.
  EXPECT_EQ(s.reference_definitions(s.parse_shape("N=1000,M=9")),
            (std::vector<std::pair<std::string, std::string>>{{"SHAPE_M", "9"}}));
}

TEST(CompiledShape, OtherExpressionsReadTheCompiledValue) {
  SearchSpace s = bucketed_space();
  const Config vector = s.parse_config("ALGORITHM=tiled,THREADS=64,ITEMS=1,VECTOR=true");
  const Config exact = s.parse_config("ALGORITHM=tiled,THREADS=64,ITEMS=1,VECTOR=false");
  // shared_memory is SHAPE_M * 4: the capacity, not the run-time M.
  EXPECT_EQ(s.geometry(vector, s.parse_shape("N=1000,M=9")).shared_bytes, 64);
  EXPECT_EQ(s.geometry(exact, s.parse_shape("N=1000,M=9")).shared_bytes, 36);
  // A vector config is valid at M = 9 only through its bucket (16 % 4 == 0).
  EXPECT_TRUE(s.check(vector, s.parse_shape("N=1000,M=9")));
  EXPECT_TRUE(s.check(exact, s.parse_shape("N=1000,M=9")));
  // What the constraint depends on, as enumeration sees it.
  EXPECT_EQ(s.constraints()[1].variables(), (std::vector<std::string>{"VECTOR", "M"}));
}

TEST(CompiledShape, AShapePastTheLastBucketIsInvalidNotAnError) {
  SearchSpace s = bucketed_space();
  const Shape big = s.parse_shape("N=1000,M=33");
  const Config vector = s.parse_config("ALGORITHM=plain,THREADS=64,ITEMS=1,VECTOR=true");
  Validity v = s.check(vector, big);
  EXPECT_FALSE(v.valid);
  EXPECT_NE(v.failed_constraint.find("SHAPE_M"), std::string::npos) << v.failed_constraint;
  EXPECT_EQ(v.where.line, 16);  // the compiled value's line
  EXPECT_THROW(s.definitions(vector, big), InputError);
  // Enumeration agrees with check(): no vector config at M = 33.
  std::uint64_t visited = 0;
  s.for_each_valid(big, [&](const Config& c) {
    EXPECT_TRUE(s.check(c, big)) << s.config_string(c);
    EXPECT_EQ(c.choice[3], 0u) << s.config_string(c);
    ++visited;
    return true;
  });
  EXPECT_EQ(visited, s.count(big));
  EXPECT_GT(visited, 0u);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(big, rng)->choice[3], 0u);
}

TEST(CompiledShape, ConstraintsFromTheCommandLineMayReadCompiledValues) {
  SearchSpace s = bucketed_space();
  EXPECT_NO_THROW(s.check_constraint("SHAPE_M <= 24"));
  SearchSpace small = s.restrict({"SHAPE_M <= 24"});
  const Shape shape = small.parse_shape("N=1000,M=20");
  small.for_each_valid(shape, [&](const Config& c) {
    EXPECT_EQ(c.choice[3], 0u) << "a vector config compiles M = 20 to 32";
    return true;
  });
  EXPECT_GT(small.count(shape), 0u);
  EXPECT_THROW(s.check_constraint("SHAPE_N <= 16"), InputError);
}

TEST(CompiledShape, TheListFormKeepsItsHashAndTheMapFormHasItsOwn) {
  SearchSpace list = SearchSpace::load(spaces_dir / "small.yaml");
  // The list form's canonical text is what it was before the map form
  // existed: results stored for such spaces stay theirs.
  EXPECT_EQ(list.definition_hash(), "d07ef465ae2c1c7957f16022cadc350f");  // as before the map form
  std::string same_as_map = replaced(small_text(), "  compiled: [M]\n", "  compiled:\n    M: M\n");
  SearchSpace map = SearchSpace::parse(same_as_map, "map.yaml", spaces_dir);
  EXPECT_NE(map.definition_hash(), list.definition_hash());
  const Config c = list.default_config();
  EXPECT_EQ(map.definitions(c, map.parse_shape("N=10,M=3")),
            list.definitions(c, list.parse_shape("N=10,M=3")));
  EXPECT_NE(bucketed_space().definition_hash(), map.definition_hash());
  // The list form's values are visible to expressions too.
  EXPECT_NO_THROW(list.check_constraint("SHAPE_M == M"));
}

}  // namespace
}  // namespace mlatune
