// tf32x3_wgmma compiles everywhere the space says it is valid, for sm_90a
// (the only target with wgmma), with no spills, and its PTX holds wgmma:
// every valid config at S0-S4, three odd shapes and the largest D bucket,
// with FLOAT4 and STAGE_WEIGHTS off and the mma.sync expansion (they change
// only the prologue, which MlaTemplates compiles for every config at S0 and
// S4 and MlaExpandTemplates at odd shapes).  No GPU needed.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nvrtc.h>

#include "core/compiler.h"
#include "core/space.h"
#include "tests/named_shape.h"
#include "tests/nvrtc_ptx.h"
#include "tuner/compile_pool.h"

namespace mlatune {
namespace {

const std::filesystem::path& space_file = flagship_space_file;

SearchSpace wgmma_space() {
  return SearchSpace::load(space_file)
      .restrict({"ALGORITHM == tf32x3_wgmma", "!FLOAT4", "!STAGE_WEIGHTS", "EXPAND_GEMM == mma_sync"});
}

class MlaWgmmaTemplates : public ::testing::TestWithParam<NamedShape> {};

TEST_P(MlaWgmmaTemplates, EveryValidConfigCompilesForSm90aWithoutSpills) {
  const SearchSpace space = wgmma_space();
  const Shape shape = space.parse_shape(GetParam().text);
  Compiler compiler;
  CompilePool pool(compiler);
  std::vector<std::pair<std::string, std::shared_future<CompileResult>>> jobs;
  std::vector<CompileRequest> requests;
  space.for_each_valid(shape, [&](const Config& config) {
    requests.push_back(compile_request(space, config, shape, "sm_90a"));
    jobs.emplace_back(space.config_string(config), pool.submit(requests.back()));
    return true;
  });
  ASSERT_FALSE(jobs.empty()) << "no tf32x3_wgmma config is valid at " << GetParam().text;
  int failures = 0, spills = 0, serialized = 0;
  for (auto& [config, future] : jobs) {
    const CompileResult& result = future.get();
    if (!result.ok()) {
      if (failures++ < 2) ADD_FAILURE() << result.failure().message;
      continue;
    }
    const ResourceUsage& u = result.binary().usage;
    fmt::print("  {}: {} registers, stack {} B, spills {} / {} B\n", config, u.registers, u.stack_frame_bytes,
               u.spill_store_bytes, u.spill_load_bytes);
    if (u.spills()) ++spills;
    // ptxas serializes every wgmma when it cannot prove a branch uniform.
    if (result.log().find("C7520") != std::string::npos) {
      ++serialized;
      fmt::print("    wgmma serialized (C7520)\n");
    }
  }
  fmt::print("{} {}: {} tf32x3_wgmma configs for sm_90a, {} failed, {} spill, {} serialized\n",
             GetParam().name, GetParam().text, jobs.size(), failures, spills, serialized);
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(spills, 0);

  // The first config's PTX: the S product (3 per 8 columns of D) and the O
  // product are wgmma, and nothing falls back to mma.sync.
  const std::string ptx = ptx_of(requests.front());
  const std::size_t wgmma = count_of(ptx, "wgmma.mma_async");
  fmt::print("{}: {} wgmma.mma_async and {} mma.sync in the PTX of {}\n", GetParam().name, wgmma,
             count_of(ptx, "mma.sync"), jobs.front().first);
  EXPECT_GE(wgmma, 6u);
  EXPECT_EQ(count_of(ptx, "wgmma.mma_async.sync.aligned.m64n"), wgmma);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaWgmmaTemplates,
    ::testing::ValuesIn(target_shapes_and({{"X1_oddT_D40", "B=2,T=333,H=5,D=40,R=100"},
                                         {"X4_D100", "B=2,T=333,H=8,D=100,R=64"},
                                         {"D256", "B=1,T=300,H=3,D=256,R=129"}})),
    shape_name);

// The space's `requires:` makes a tf32x3_wgmma config compile for sm_90a
// even when sm_90 is asked for.  Below that, the template's own guard: for
// anything but sm_90a the kernel traps at once instead of failing to
// compile, so a request forced to plain sm_90 still compiles, and its PTX
// holds no wgmma.
TEST(MlaWgmmaTemplatesSm90, PlainSm90CompilesToATrap) {
  const SearchSpace space = wgmma_space();
  const Shape shape = space.parse_shape("B=4,T=256,H=8,D=32,R=64");
  std::mt19937_64 rng(7);
  std::optional<Config> config = space.sample(shape, rng);
  ASSERT_TRUE(config.has_value());
  CompileRequest request = compile_request(space, *config, shape, "sm_90");
  EXPECT_EQ(request.arch, "sm_90a");
  request.arch = "sm_90";
  const CompileResult result = Compiler().compile(request);
  ASSERT_TRUE(result.ok()) << result.failure().message;
  const std::string ptx = ptx_of(request);
  EXPECT_EQ(count_of(ptx, "wgmma.mma_async") + count_of(ptx, "wgmma.fence"), 0u);
  EXPECT_GE(count_of(ptx, "trap;"), 1u);
}

}  // namespace
}  // namespace mlatune
