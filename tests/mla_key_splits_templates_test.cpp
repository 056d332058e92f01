// KEY_SPLITS of the flagship (tf32x3, tf32x3_2k, tf32x3_kvgemm): what the
// space allows and what the configs compile to, with real NVRTC
// compilations and no GPU (gpu_key_splits_test validates them on a GPU).
// A config with KEY_SPLITS k > 1 launches k times the blocks, as clusters of
// k (the kernel's __cluster_dims__, so the launch itself is the usual one),
// merges through distributed shared memory and spills no more than the
// unsplit config; with
// KEY_SPLITS 1 the attention has no cluster instruction at all.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/compiler.h"
#include "core/launch_plan.h"
#include "core/space.h"
#include "tests/compiled_twins.h"
#include "tests/named_shape.h"
#include "tests/nvrtc_ptx.h"
#include "tests/space_parameter.h"
#include "tuner/compile_pool.h"

namespace mlatune {
namespace {

const std::filesystem::path& space_file = flagship_space_file;

int key_splits(const SearchSpace& space, const Config& config) {
  return static_cast<int>(value_of(space, config, "KEY_SPLITS"));
}

// Which configs may split: the mma.sync attention only, where the unsplit
// grid is small and every split of the last query tile has a key tile; and
// only on a device with clusters (sm_90 and later).
TEST(MlaKeySplitsSpace, OnlyTheMmaSyncAttentionAtFewBlocksSplits) {
  const SearchSpace space = SearchSpace::load(space_file);
  const std::size_t algorithm = parameter_index(space, "ALGORITHM");
  for (const NamedShape& named : target_shapes_and({{"odd", "B=2,T=333,H=8,D=64,R=100"},
                                                    {"decode", "B=16,T=1,H=16,D=64,R=512"},
                                                    {"T40", "B=1,T=40,H=2,D=16,R=16"}})) {
    const Shape shape = space.parse_shape(named.text);
    std::size_t split = 0;
    space.restrict({"KEY_SPLITS > 1"}).for_each_valid(shape, [&](const Config& config) {
      const std::string text = space.config_string(config);
      const std::string& name = space.parameters()[algorithm].text[config.choice[algorithm]];
      EXPECT_TRUE(name == "tf32x3" || name == "tf32x3_2k" || name == "tf32x3_kvgemm") << named.name << " " << text;
      const LaunchPlan plan = plan_launch(space, config, shape);
      EXPECT_TRUE(plan.ok()) << text << ": " << plan.refusal;
      const int k = key_splits(space, config);
      EXPECT_EQ(plan.steps.geometry.grid[0] % k, 0) << text;
      EXPECT_LE(plan.steps.geometry.grid[0] / k, 512) << text;
      EXPECT_LT(k * value_of(space, config, "KEY_TILE"), shape.values[1]) << text;
      // The same config unsplit: the same plan but for a k times smaller grid.
      Config one = config;
      one.choice[parameter_index(space, "KEY_SPLITS")] = 0;
      EXPECT_TRUE(space.check(one, shape).valid) << text;
      const LaunchPlan unsplit = plan_launch(space, one, shape);
      EXPECT_EQ(unsplit.steps.geometry.grid[0] * k, plan.steps.geometry.grid[0]) << text;
      EXPECT_EQ(unsplit.steps.geometry.block[0], plan.steps.geometry.block[0]) << text;
      EXPECT_EQ(unsplit.steps.geometry.shared_bytes, plan.steps.geometry.shared_bytes) << text;
      // Clusters need sm_90: elsewhere the config is not valid.
      EXPECT_FALSE(space.for_device("sm_80").check(config, shape).valid) << text;
      ++split;
      return true;
    });
    fmt::print("{} {}: {} valid configs with KEY_SPLITS > 1\n", named.name, named.text, split);
    // S1 and the odd shape have few blocks; S0's 32 keys leave no second key
    // tile of 16 to split; decode (T 1) has one key.
    const std::string name = named.name;
    if (name == "S1" || name == "odd") {
      EXPECT_GT(split, 0u) << name;
    }
    if (name == "S0" || name == "decode") {
      EXPECT_EQ(split, 0u) << name;
    }
  }
}

// Compiled: k-block clusters, the merge's cluster barriers and remote
// loads, no spill that the unsplit twin does not have; the twin has none of
// the cluster code.
TEST(MlaKeySplitsTemplates, SplitConfigsCompileToClustersThatMerge) {
  const SearchSpace space = SearchSpace::load(space_file);
  const SearchSpace split = space.restrict({"KEY_SPLITS > 1"});
  const std::size_t key_splits_index = parameter_index(space, "KEY_SPLITS");
  Compiler compiler;
  CompilePool pool(compiler);
  std::mt19937_64 rng(20261206);
  const std::vector<CompiledTwins> jobs =
      compile_twins(pool, space, split,
                    {{"S1", "B=4,T=256,H=8,D=32,R=64"},
                     {"odd", "B=2,T=333,H=8,D=64,R=100"},
                     {"X2_D20_R30", "B=3,T=129,H=12,D=20,R=30"},
                     {"D100_R77", "B=1,T=500,H=4,D=100,R=77"}},
                    6, key_splits_index, 0, rng);
  ASSERT_GE(jobs.size(), 24u);
  for (const CompiledTwins& job : jobs) {
    const int k = key_splits(space, job.config);
    const CompileResult& result = job.compiled.get();
    ASSERT_TRUE(result.ok()) << job.text << ": " << result.failure().log;
    const CompiledBinary& binary = result.binary();
    const std::string body = entry_body(binary.ptx, "fused_mla_attention");
    ASSERT_FALSE(body.empty()) << job.text;
    EXPECT_NE(body.find(fmt::format(".reqnctapercluster {}, 1, 1", k)), std::string::npos) << job.text;
    // Two meetings (after the states are written; before any block leaves).
    EXPECT_EQ(count_of(body, "barrier.cluster.arrive"), 2u) << job.text;
    EXPECT_GE(count_of(body, "mapa.shared::cluster"), 1u) << job.text;
    EXPECT_GE(count_of(body, "ld.shared::cluster.v4.f32"), 1u) << job.text;

    const CompileResult& one = job.twin.get();
    ASSERT_TRUE(one.ok()) << job.text << " unsplit: " << one.failure().log;
    // The split adds no spill (the space lets a few tf32x3 tiles of 512
    // threads spill at the 128 registers their launch bounds leave, split
    // or not).
    EXPECT_TRUE(!binary.usage.spills() || one.binary().usage.spills())
        << job.shape_name << " " << job.text << ": " << binary.log;
    const std::string one_body = entry_body(one.binary().ptx, "fused_mla_attention");
    EXPECT_EQ(one_body.find("reqnctapercluster"), std::string::npos) << job.text;
    EXPECT_EQ(count_of(one_body, "barrier.cluster"), 0u) << job.text;
    EXPECT_EQ(count_of(one_body, "shared::cluster"), 0u) << job.text;
    fmt::print("{} {}: {} registers, unsplit {}\n", job.shape_name, job.text, binary.usage.registers,
               one.binary().usage.registers);
  }
}

}  // namespace
}  // namespace mlatune
