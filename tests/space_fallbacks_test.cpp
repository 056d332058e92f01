// The `fallbacks:` key of a space file (search_spaces/README.md): parsed into
// configs in file order; malformed entries are refused by the files under
// tests/spaces/bad (space_test's EveryMalformedFileFailsAtItsExpectedLocation).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/space.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path tests_dir = fs::path(MLATUNE_TEST_DATA_DIR);
const fs::path spaces_dir = tests_dir / "spaces";
const fs::path shipped_dir = tests_dir.parent_path() / "search_spaces";

SearchSpace small_with(const std::string& block) {
  SearchSpace base = SearchSpace::load(spaces_dir / "small.yaml");
  return SearchSpace::parse(base.text() + block, "small_fallbacks.yaml", spaces_dir);
}

TEST(SpaceFallbacks, AbsentMeansNone) {
  EXPECT_TRUE(SearchSpace::load(spaces_dir / "small.yaml").fallbacks().empty());
}

TEST(SpaceFallbacks, ParsedInFileOrder) {
  SearchSpace space = small_with(
      "fallbacks:\n"
      "  - {ALGORITHM: tiled, THREADS: 64, ITEMS: 4, VECTOR: true}\n"
      "  - {VECTOR: false, ITEMS: 2, THREADS: 256, ALGORITHM: unrolled}\n");
  ASSERT_EQ(space.fallbacks().size(), 2u);
  EXPECT_EQ(space.config_string(space.fallbacks()[0]), "ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=true");
  EXPECT_EQ(space.config_string(space.fallbacks()[1]),
            "ALGORITHM=unrolled,THREADS=256,ITEMS=2,VECTOR=false");
}

TEST(SpaceFallbacks, AnEmptyListIsAllowed) {
  EXPECT_TRUE(small_with("fallbacks: []\n").fallbacks().empty());
}

TEST(SpaceFallbacks, AFallbackInvalidAtSomeShapesIsAccepted) {
  // VECTOR needs M % 4 == 0: invalid at the default shape M=3, still a fallback.
  SearchSpace space = small_with("fallbacks:\n  - {ALGORITHM: tiled, THREADS: 64, ITEMS: 4, VECTOR: true}\n");
  ASSERT_EQ(space.fallbacks().size(), 1u);
  EXPECT_FALSE(space.check(space.fallbacks()[0], space.parse_shape("N=64,M=3")));
  EXPECT_TRUE(space.check(space.fallbacks()[0], space.parse_shape("N=64,M=4")));
}

TEST(SpaceFallbacks, NotPartOfTheDefinitionHash) {
  SearchSpace base = SearchSpace::load(spaces_dir / "small.yaml");
  SearchSpace with = small_with("fallbacks:\n  - {ALGORITHM: tiled, THREADS: 64, ITEMS: 4, VECTOR: true}\n");
  EXPECT_EQ(base.definition_hash(), with.definition_hash());
}

TEST(SpaceFallbacks, TheLastFlagshipFallbackRunsTheIssuesShapes) {
  SearchSpace space = SearchSpace::load(shipped_dir / "fused_mla_attention.yaml");
  // Two tiles, each with its expansion on wgmma (sm_90a) and then on
  // mma.sync: the second of each pair runs everywhere.
  ASSERT_EQ(space.fallbacks().size(), 4u);
  for (const Config& wide : {space.fallbacks()[1], space.fallbacks()[3]}) {
    SCOPED_TRACE(space.config_string(wide));
    for (const char* shape : {"B=4,T=300,H=16,D=64,R=131", "B=2,T=1000,H=12,D=72,R=96",
                              "B=1,T=777,H=20,D=56,R=200", "B=2,T=32,H=4,D=16,R=24",
                              "B=1,T=4096,H=16,D=128,R=512", "B=8,T=1,H=64,D=256,R=1024",
                              "B=1,T=4096,H=1,D=8,R=16"}) {
      SCOPED_TRACE(shape);
      Shape s = space.parse_shape(shape);
      Validity validity = space.check(wide, s);
      EXPECT_TRUE(validity) << validity.failed_constraint;
      EXPECT_TRUE(space.geometry(wide, s).valid()) << space.geometry(wide, s).invalid_reason;
    }
  }
}

TEST(SpaceFallbacks, RmsNormFallbacksRunCommonHiddenSizes) {
  SearchSpace space = SearchSpace::load(shipped_dir / "rms_norm.yaml");
  ASSERT_EQ(space.fallbacks().size(), 2u);
  for (const char* shape : {"ROWS=1,COLS=4096", "ROWS=333,COLS=5120", "ROWS=8192,COLS=16384"})
    EXPECT_TRUE(space.check(space.fallbacks()[0], space.parse_shape(shape))) << shape;
  // An odd hidden size takes the second (no float4).
  EXPECT_FALSE(space.check(space.fallbacks()[0], space.parse_shape("ROWS=7,COLS=1001")));
  EXPECT_TRUE(space.check(space.fallbacks()[1], space.parse_shape("ROWS=7,COLS=1001")));
}

}  // namespace
}  // namespace mlatune
