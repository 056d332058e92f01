// UNROLL 2 of the flagship's tf32x3: the K and V operands split into TF32
// hi and lo parts once per key tile, by the expansion that stores them in
// shared memory, instead of in every warp that reads them.
// What the space allows and what the configs compile to, with real NVRTC
// compilations and no GPU (on a GPU the tuner validates them, and
// gpu_key_splits_test's covering sample draws them among its split configs).
#include <gtest/gtest.h>

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

// D as compiled into the kernel (SHAPE_D: the bucket when bucketed).
int compiled_d(const SearchSpace& space, const Config& config, const Shape& shape) {
  for (const auto& [name, value] : space.definitions(config, shape))
    if (name == "SHAPE_D") return std::stoi(value);
  ADD_FAILURE() << "no SHAPE_D";
  return 0;
}

// UNROLL 2 is valid in tf32x3, tf32x3_wgmma_ws and f16x3_wgmma_ws (their schedules) among the
// tensor-core algorithms, and wherever tf32x3 has it, its UNROLL 1 twin is
// valid too, with the same grid and block and exactly the lo parts of one K
// and one V tile per head more shared memory.
TEST(MlaSplitOnceSpace, UnrollTwoAddsTheLoPartsOfAKAndAVTile) {
  const SearchSpace space = SearchSpace::load(space_file);
  const std::size_t unroll = parameter_index(space, "UNROLL");
  for (const NamedShape& named : target_shapes_and({{"odd", "B=2,T=333,H=8,D=64,R=100"},
                                                    {"decode", "B=16,T=1,H=16,D=64,R=512"},
                                                    {"D20_R30", "B=3,T=129,H=12,D=20,R=30"}})) {
    const Shape shape = space.parse_shape(named.text);
    std::size_t twins = 0;
    space.restrict({"UNROLL == 2", "ALGORITHM >= tf32x3"}).for_each_valid(shape, [&](const Config& config) {
      const std::string text = space.config_string(config);
      const std::string algorithm = text_of(space, config, "ALGORITHM");
      EXPECT_TRUE(algorithm == "tf32x3" || algorithm == "tf32x3_wgmma_ws" || algorithm == "f16x3_wgmma_ws") << text;
      if (algorithm != "tf32x3") return true;  // (the ws ones: their UNROLL is their schedule)
      Config one = config;
      one.choice[unroll] = 0;
      EXPECT_EQ(space.parameters()[unroll].text[0], "1");
      const Validity validity = space.check(one, shape);
      EXPECT_TRUE(validity.valid) << text << ": " << validity.failed_constraint;
      if (!validity.valid) return true;
      const LaunchPlan plan = plan_launch(space, config, shape);
      const LaunchPlan plan_one = plan_launch(space, one, shape);
      EXPECT_TRUE(plan.ok() && plan_one.ok()) << text << ": " << plan.refusal << plan_one.refusal;
      EXPECT_EQ(plan.steps.geometry.grid[0], plan_one.steps.geometry.grid[0]) << text;
      EXPECT_EQ(plan.steps.geometry.block[0], plan_one.steps.geometry.block[0]) << text;
      // D as compiled, padded to 8, in rows of 4 floats more.
      const int d = compiled_d(space, config, shape);
      const std::uint64_t lo = 4ull * 2 * value_of(space, config, "HEADS_PER_BLOCK") *
                               value_of(space, config, "KEY_TILE") * ((d + 7) / 8 * 8 + 4);
      EXPECT_EQ(plan.steps.geometry.shared_bytes, plan_one.steps.geometry.shared_bytes + lo) << text;
      ++twins;
      return true;
    });
    fmt::print("{} {}: {} valid tf32x3 configs with UNROLL 2\n", named.name, named.text, twins);
    // (Decode's one key allows no UNROLL above 1: "UNROLL <= T".)
    if (std::string(named.name) == "decode") {
      EXPECT_EQ(twins, 0u);
    } else {
      EXPECT_GT(twins, 0u) << named.name;
    }
  }
}

// Compiled: both twins compile without a spill the other lacks, with the
// same barriers, and the UNROLL 2 attention splits fewer values (each split
// rounds with a mask of the 13 low bits, and.b32 with -8192): the per-warp
// splits of K and V in Q K^T and P V are gone, and only the expansion's
// store splits them.
TEST(MlaSplitOnceTemplates, TheAttentionSplitsKAndVOnce) {
  const SearchSpace space = SearchSpace::load(space_file);
  const SearchSpace twos = space.restrict({"UNROLL == 2", "ALGORITHM == tf32x3"});
  const std::size_t unroll = parameter_index(space, "UNROLL");
  Compiler compiler;
  CompilePool pool(compiler);
  std::mt19937_64 rng(20261207);
  const std::vector<CompiledTwins> jobs =
      compile_twins(pool, space, twos,
                    {{"S0", "B=2,T=32,H=4,D=16,R=24"},
                     {"S1", "B=4,T=256,H=8,D=32,R=64"},
                     {"D20_R30", "B=3,T=129,H=12,D=20,R=30"},
                     {"D100_R77", "B=1,T=500,H=4,D=100,R=77"}},
                    5, unroll, 0, rng);
  ASSERT_GE(jobs.size(), 16u);
  for (const CompiledTwins& job : jobs) {
    const CompileResult& two = job.compiled.get();
    ASSERT_TRUE(two.ok()) << job.text << ": " << two.failure().log;
    const CompileResult& one = job.twin.get();
    ASSERT_TRUE(one.ok()) << job.text << " with UNROLL 1: " << one.failure().log;
    EXPECT_TRUE(!two.binary().usage.spills() || one.binary().usage.spills())
        << job.shape_name << " " << job.text << ": " << two.binary().log;
    const std::string body_two = entry_body(two.binary().ptx, "fused_mla_attention");
    const std::string body_one = entry_body(one.binary().ptx, "fused_mla_attention");
    const std::size_t masks_two = count_of(body_two, "-8192;");
    const std::size_t masks_one = count_of(body_one, "-8192;");
    EXPECT_GT(masks_one, 0u) << job.text;
    EXPECT_LT(masks_two, masks_one) << job.shape_name << " " << job.text;
    EXPECT_EQ(count_of(body_two, "bar.sync"), count_of(body_one, "bar.sync")) << job.text;
    fmt::print("{} {}: {} registers and {} TF32 roundings in the PTX, UNROLL 1 {} and {}\n", job.shape_name, job.text,
               two.binary().usage.registers, masks_two, one.binary().usage.registers, masks_one);
  }
}

}  // namespace
}  // namespace mlatune
