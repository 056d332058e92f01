#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cache/config_repair.h"
#include "core/space.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path tests_dir = fs::path(MLATUNE_TEST_DATA_DIR);
const fs::path spaces_dir = tests_dir / "spaces";

// tests/spaces/small.yaml with more constraints (or other replacements).
SearchSpace small_space(const std::string& extra_constraints = "",
                        std::pair<std::string, std::string> replace = {}) {
  std::string text = SearchSpace::load(spaces_dir / "small.yaml").text();
  if (!replace.first.empty()) {
    auto at = text.find(replace.first);
    EXPECT_NE(at, std::string::npos) << replace.first;
    text.replace(at, replace.first.size(), replace.second);
  }
  return SearchSpace::parse(text + extra_constraints, "small_repair.yaml", spaces_dir);
}

std::string config_after(const SearchSpace& space, const Repair& repair) {
  return repair.ok() ? space.config_string(*repair.config) : "(none)";
}

TEST(ConfigRepair, AValidConfigIsKept) {
  SearchSpace space = small_space();
  ConfigRepairer repairer(space);
  Config config = space.parse_config("ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=true");
  Repair repair = repairer.repair(config, space.parse_shape("N=1000,M=16"));
  ASSERT_TRUE(repair.ok());
  EXPECT_EQ(*repair.config, config);
  EXPECT_TRUE(repair.changes.empty());
  EXPECT_TRUE(repair.rejection.empty());
  EXPECT_EQ(repair.evaluations, 1u);
}

TEST(ConfigRepair, OneParameterAtFaultIsSwitched) {
  SearchSpace space = small_space();
  ConfigRepairer repairer(space);
  Config config = space.parse_config("ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=true");
  Repair repair = repairer.repair(config, space.parse_shape("N=1000,M=15"));
  ASSERT_TRUE(repair.ok());
  EXPECT_EQ(config_after(space, repair), "ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=false");
  ASSERT_EQ(repair.changes.size(), 1u);
  EXPECT_EQ(repair.rejection, "constraint 'VECTOR == 0 || M % 4 == 0' fails at M=15");
  EXPECT_EQ(repairer.describe(repair.changes),
            "VECTOR true -> false (constraint 'VECTOR == 0 || M % 4 == 0' fails at M=15)");
  // Only the parameter the failing constraint reads was tried.
  EXPECT_EQ(repair.evaluations, 2u);
}

TEST(ConfigRepair, FewestChangesBeforeSmallestIndexChange) {
  // THREADS * ITEMS <= N: at N=64, THREADS 256 -> 32 (one change, three
  // steps of index) beats THREADS 256 -> 64 with ITEMS 2 -> 1 (two changes).
  SearchSpace space = small_space("  - THREADS * ITEMS <= N\n");
  ConfigRepairer repairer(space);
  Config config = space.parse_config("ALGORITHM=plain,THREADS=256,ITEMS=2,VECTOR=false");
  Repair repair = repairer.repair(config, space.parse_shape("N=64,M=4"));
  EXPECT_EQ(config_after(space, repair), "ALGORITHM=plain,THREADS=32,ITEMS=2,VECTOR=false");
  EXPECT_EQ(repair.changes.size(), 1u);
}

TEST(ConfigRepair, SmallestIndexChangeAmongEqualCounts) {
  // At N=128: THREADS 256 -> 64 (two steps) rather than -> 32 (three).
  SearchSpace space = small_space("  - THREADS * ITEMS <= N\n");
  ConfigRepairer repairer(space);
  Config config = space.parse_config("ALGORITHM=plain,THREADS=256,ITEMS=2,VECTOR=false");
  Repair repair = repairer.repair(config, space.parse_shape("N=128,M=4"));
  EXPECT_EQ(config_after(space, repair), "ALGORITHM=plain,THREADS=64,ITEMS=2,VECTOR=false");
}

TEST(ConfigRepair, TiesGoToTheSmallerConfig) {
  // At N=128, THREADS 128 -> 64 and ITEMS 2 -> 1 are both one step: the
  // config with the smaller choice indices (THREADS=64 before THREADS=128) wins.
  SearchSpace space = small_space("  - THREADS * ITEMS <= N\n");
  ConfigRepairer repairer(space);
  Config config = space.parse_config("ALGORITHM=plain,THREADS=128,ITEMS=2,VECTOR=false");
  Repair repair = repairer.repair(config, space.parse_shape("N=128,M=4"));
  EXPECT_EQ(config_after(space, repair), "ALGORITHM=plain,THREADS=64,ITEMS=2,VECTOR=false");
}

TEST(ConfigRepair, AChangeThatBreaksAnotherConstraintTakesASecond) {
  // tiled needs VECTOR here; at M=15 VECTOR must go, so ALGORITHM goes too
  // (plain and unrolled are one step away; plain is the smaller config).
  SearchSpace space = small_space("  - VECTOR == 1 || ALGORITHM != tiled\n");
  ConfigRepairer repairer(space);
  Config config = space.parse_config("ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=true");
  Repair repair = repairer.repair(config, space.parse_shape("N=1000,M=15"));
  EXPECT_EQ(config_after(space, repair), "ALGORITHM=plain,THREADS=64,ITEMS=4,VECTOR=false");
  ASSERT_EQ(repair.changes.size(), 2u);
  EXPECT_EQ(repairer.describe(repair.changes),
            "VECTOR true -> false (constraint 'VECTOR == 0 || M % 4 == 0' fails at M=15); "
            "ALGORITHM tiled -> plain (constraint 'VECTOR == 1 || ALGORITHM != tiled' fails)");
}

TEST(ConfigRepair, TheSearchIsBounded) {
  SearchSpace space = small_space("  - VECTOR == 1 || ALGORITHM != tiled\n");
  ConfigRepairer repairer(space);
  Config config = space.parse_config("ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=true");
  const Shape shape = space.parse_shape("N=1000,M=15");

  Repair one_change = repairer.repair(config, shape, RepairLimits{1, 2000});
  EXPECT_FALSE(one_change.ok());
  EXPECT_FALSE(one_change.exhausted);
  EXPECT_EQ(one_change.rejection, "constraint 'VECTOR == 0 || M % 4 == 0' fails at M=15");

  Repair few_checks = repairer.repair(config, shape, RepairLimits{3, 2});
  EXPECT_FALSE(few_checks.ok());
  EXPECT_TRUE(few_checks.exhausted);
  EXPECT_EQ(few_checks.evaluations, 2u);
}

TEST(ConfigRepair, AShapeNothingCanRunEndsAtOnce) {
  // A constraint over the shape alone: no parameter to change.
  SearchSpace space = small_space("  - N <= 100000\n");
  ConfigRepairer repairer(space);
  Repair repair = repairer.repair(space.default_config(), space.parse_shape("N=200000,M=4"));
  EXPECT_FALSE(repair.ok());
  EXPECT_EQ(repair.evaluations, 1u);
  EXPECT_EQ(repair.rejection, "constraint 'N <= 100000' fails at N=200000");
}

TEST(ConfigRepair, AnInvalidLaunchIsRepairedThroughTheLaunchParameters) {
  // Shared memory THREADS * 4 - M is negative for tiled at M=200 with 32
  // threads: ALGORITHM plain (no shared memory) and THREADS 64 are both one
  // step; plain is the smaller config.
  SearchSpace space = small_space(
      "", {"shared_memory: \"ALGORITHM == tiled ? THREADS * 4 : 0\"",
           "shared_memory: \"ALGORITHM == tiled ? THREADS * 4 - M : 0\""});
  ConfigRepairer repairer(space);
  Config config = space.parse_config("ALGORITHM=tiled,THREADS=32,ITEMS=1,VECTOR=false");
  const Shape shape = space.parse_shape("N=1000,M=200");
  ASSERT_TRUE(space.check(config, shape));
  ASSERT_FALSE(space.geometry(config, shape).valid());
  Repair repair = repairer.repair(config, shape);
  EXPECT_EQ(config_after(space, repair), "ALGORITHM=plain,THREADS=32,ITEMS=1,VECTOR=false");
  ASSERT_EQ(repair.changes.size(), 1u);
  EXPECT_EQ(repair.changes[0].why.rfind("geometry: ", 0), 0u) << repair.changes[0].why;
}

TEST(ConfigRepair, TheIssuesFirstShapeLosesOnlyFloat4) {
  SearchSpace space = SearchSpace::load(tests_dir.parent_path() / "search_spaces" / "fused_mla_attention.yaml");
  ConfigRepairer repairer(space);
  // S0's best on the H200 (docs/performance/side_by_side.md).
  Config tuned = space.parse_config(
      "ALGORITHM=tf32x3,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=32,HEADS_PER_BLOCK=1,STAGE_LATENT=true,"
      "KEY_TILE=32,FLOAT4=true,UNROLL=1,STAGE_WEIGHTS=true,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1");
  Repair repair = repairer.repair(tuned, space.parse_shape("B=4,T=300,H=16,D=64,R=131"));
  ASSERT_TRUE(repair.ok()) << repair.rejection;
  EXPECT_EQ(repairer.describe(repair.changes),
            "FLOAT4 true -> false (constraint 'FLOAT4 == 0 || (R % 4 == 0 && D % 4 == 0)' fails at D=64,R=131)");
  Config expected = tuned;
  expected.choice[6] = 0;  // FLOAT4 false
  EXPECT_EQ(*repair.config, expected);
}

}  // namespace
}  // namespace mlatune
