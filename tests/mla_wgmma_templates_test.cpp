// tf32x3_wgmma, tf32x3_wgmma_ws and f16x3_wgmma_ws compile everywhere the space says they
// are valid, for sm_90a (the only target with wgmma), with no spills and no
// wgmma that ptxas serialized, and their PTX holds wgmma (and,
// warp-specialized, the named-barrier hand-off):
// every valid config at S0-S4, three odd shapes and the largest D bucket,
// with FLOAT4 and STAGE_WEIGHTS off and the mma.sync expansion (they change
// only the prologue, which MlaTemplates compiles for every config at S0 and
// S4 and MlaExpandTemplates at odd shapes).  No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
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

SearchSpace wgmma_space(const std::string& algorithm = "tf32x3_wgmma") {
  return SearchSpace::load(space_file)
      .restrict({"ALGORITHM == " + algorithm, "!FLOAT4", "!STAGE_WEIGHTS", "EXPAND_GEMM == mma_sync"});
}

// ptxas's remark that it serialized the kernel's wgmma ("Potential
// Performance Loss: wgmma.mma_async instructions are serialized due to
// ..."), whatever its code: empty when the log has none.
std::string wgmma_serialized_remark(const std::string& log) {
  const std::size_t at = log.find("wgmma.mma_async instructions are serialized");
  if (at == std::string::npos) return {};
  const std::size_t newline = log.rfind('\n', at);
  const std::size_t begin = newline == std::string::npos ? 0 : newline + 1;
  const std::size_t end = std::min(log.find('\n', at), log.size());  // npos: to the end
  return log.substr(begin, end - begin);
}
bool wgmma_serialized(const std::string& log) { return !wgmma_serialized_remark(log).empty(); }

TEST(WgmmaSerializedRemark, MatchesEveryCodeAndNothingElse) {
  // Both remarks as ptxas 13.0 printed them for variants of tf32x3_wgmma_ws
  // tried in the twenty-sixth session (docs/performance.md): C7518 for one
  // whose every config then ran 9-43% slower on an H100, C7520 for the
  // bucketed configs of another.
  const std::string c7518 =
      "ptxas info    : (C7518) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
      "program dependence on compiler-inserted WG.DP in divergent path in the function 'fused_mla_attention'\n"
      "ptxas info    : Used 166 registers, used 16 barriers";
  const std::string c7520 =
      "ptxas info    : 330 bytes gmem\nptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async "
      "instructions are serialized due to program dependence on compiler-inserted WG.AR in divergent path in the "
      "function 'fused_mla_attention'";
  EXPECT_TRUE(wgmma_serialized(c7518));
  EXPECT_TRUE(wgmma_serialized(c7520));
  EXPECT_EQ(wgmma_serialized_remark(c7518).rfind("ptxas info    : (C7518)", 0), 0u) << wgmma_serialized_remark(c7518);
  EXPECT_EQ(wgmma_serialized_remark(c7518).find("registers"), std::string::npos);
  EXPECT_FALSE(wgmma_serialized("ptxas info    : Used 166 registers, used 16 barriers\n"));
  EXPECT_FALSE(wgmma_serialized(""));
}

// (algorithm, shape)
using WgmmaParam = std::tuple<const char*, NamedShape>;
class MlaWgmmaTemplates : public ::testing::TestWithParam<WgmmaParam> {};

TEST_P(MlaWgmmaTemplates, EveryValidConfigCompilesForSm90aWithoutSpills) {
  const std::string algorithm = std::get<0>(GetParam());
  const NamedShape named = std::get<1>(GetParam());
  const SearchSpace space = wgmma_space(algorithm);
  const Shape shape = space.parse_shape(named.text);
  Compiler compiler;
  CompilePool pool(compiler);
  std::vector<std::pair<std::string, std::shared_future<CompileResult>>> jobs;
  std::vector<CompileRequest> requests;
  space.for_each_valid(shape, [&](const Config& config) {
    requests.push_back(compile_request(space, config, shape, "sm_90a"));
    jobs.emplace_back(space.config_string(config), pool.submit(requests.back()));
    return true;
  });
  ASSERT_FALSE(jobs.empty()) << "no " << algorithm << " config is valid at " << named.text;
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
    // ptxas serializes every wgmma of the kernel (a wait after each) when it
    // cannot prove a branch uniform over the warpgroup; its remark names the
    // reason by code (C7518, C7520, ...), so the text is what is matched.
    if (wgmma_serialized(result.log())) {
      ++serialized;
      fmt::print("    wgmma serialized: {}\n", wgmma_serialized_remark(result.log()));
    }
  }
  fmt::print("{} {}: {} {} configs for sm_90a, {} failed, {} spill, {} serialized\n", named.name, named.text,
             jobs.size(), algorithm, failures, spills, serialized);
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(spills, 0);
  EXPECT_EQ(serialized, 0) << "ptxas serialized the wgmma of " << serialized << " config(s)";

  // The first config's PTX: the S product (3 per 8 columns of D) and the O
  // product are wgmma, and nothing falls back to mma.sync.
  const std::string ptx = ptx_of(requests.front());
  const std::size_t wgmma = count_of(ptx, "wgmma.mma_async");
  fmt::print("{}: {} wgmma.mma_async and {} mma.sync in the PTX of {}\n", named.name, wgmma,
             count_of(ptx, "mma.sync"), jobs.front().first);
  EXPECT_GE(wgmma, 6u);
  EXPECT_EQ(count_of(ptx, "wgmma.mma_async.sync.aligned.m64n"), wgmma);
  if (algorithm == "f16x3_wgmma_ws") {
    // Every product is FP16 (k16), none TF32.
    EXPECT_EQ(count_of(ptx, "k16.f32.f16.f16"), wgmma);
    EXPECT_EQ(count_of(ptx, "k8.f32.tf32.tf32"), 0u);  // a TF32 wgmma (the prologue's mma.sync may be TF32)
  }
  if (algorithm == "tf32x3_wgmma_ws" || algorithm == "f16x3_wgmma_ws") {
    // The producer's arrivals and the consumers' waits on the ring's named
    // barriers (ids 1-4; 0 is __syncthreads).
    EXPECT_GE(count_of(ptx, "bar.arrive"), 2u) << "no named-barrier arrival in the PTX";
  }
}

std::string wgmma_param_name(const ::testing::TestParamInfo<WgmmaParam>& info) {
  return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaWgmmaTemplates,
    ::testing::Combine(::testing::Values("tf32x3_wgmma"),
                       ::testing::ValuesIn(target_shapes_and({{"X1_oddT_D40", "B=2,T=333,H=5,D=40,R=100"},
                                                             {"X4_D100", "B=2,T=333,H=8,D=100,R=64"},
                                                             {"D256", "B=1,T=300,H=3,D=256,R=129"}}))),
    wgmma_param_name);
// tf32x3_wgmma_ws's two K/V buffers do not fit 227 KB at D 256 (see
// MlaWgmmaWsSpace below).
INSTANTIATE_TEST_SUITE_P(
    WarpSpecialized, MlaWgmmaTemplates,
    ::testing::Combine(::testing::Values("tf32x3_wgmma_ws"),
                       ::testing::ValuesIn(target_shapes_and({{"X1_oddT_D40", "B=2,T=333,H=5,D=40,R=100"},
                                                             {"X4_D100", "B=2,T=333,H=8,D=100,R=64"},
                                                             {"D128_T1", "B=3,T=1,H=2,D=128,R=40"}}))),
    wgmma_param_name);
// f16x3_wgmma_ws's FP16 buffers do fit at D 256 (164 KB at the smallest
// tiles), and D 24 pads Q K^T's k to 16 past the workspace's 8.
INSTANTIATE_TEST_SUITE_P(
    F16Split, MlaWgmmaTemplates,
    ::testing::Combine(::testing::Values("f16x3_wgmma_ws"),
                       ::testing::ValuesIn(target_shapes_and({{"X1_oddT_D40", "B=2,T=333,H=5,D=40,R=100"},
                                                             {"X4_D100", "B=2,T=333,H=8,D=100,R=64"},
                                                             {"D24", "B=2,T=70,H=3,D=24,R=40"},
                                                             {"D256", "B=1,T=300,H=3,D=256,R=129"}}))),
    wgmma_param_name);

// A parameter's numeric value in a config.
std::int64_t value_of(const SearchSpace& space, const Config& config, const std::string& name) {
  const std::vector<Parameter>& parameters = space.parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i)
    if (parameters[i].name == name) return parameters[i].numeric[config.choice[i]];
  ADD_FAILURE() << "no parameter " << name;
  return -1;
}

// Where the space admits tf32x3_wgmma_ws: whole consumer warpgroups of one
// head, and Q plus two K/V buffers within 227 KB, so none at D 256 (4 bytes
// x 256 x (2 x 64 + 8 x 16) floats is 256 KiB at the smallest tiles); its
// block is tf32x3_wgmma's plus the producer's 128 threads.
TEST(MlaWgmmaWsSpace, ValidWhereItsRingFitsAndTheBlockHasAProducer) {
  const SearchSpace ws = SearchSpace::load(space_file).restrict({"ALGORITHM == tf32x3_wgmma_ws"});
  std::size_t at_d256 = 0, at_s2 = 0;
  ws.for_each_valid(ws.parse_shape("B=1,T=300,H=3,D=256,R=129"), [&](const Config&) {
    ++at_d256;
    return true;
  });
  const Shape s2 = ws.parse_shape("B=4,T=1024,H=16,D=64,R=128");
  ws.for_each_valid(s2, [&](const Config& config) {
    ++at_s2;
    const std::string text = ws.config_string(config);
    const std::int64_t qpb = value_of(ws, config, "QUERIES_PER_BLOCK");
    EXPECT_EQ(value_of(ws, config, "HEADS_PER_BLOCK"), 1) << text;
    EXPECT_EQ(qpb % 64, 0) << text;
    const LaunchGeometry g = ws.geometry(config, s2);
    EXPECT_TRUE(g.valid()) << text << ": " << g.invalid_reason;
    EXPECT_EQ(g.block[0], 2 * qpb + 128) << text;
    EXPECT_LE(g.shared_bytes, 232448) << text;
    EXPECT_TRUE(ws.prologue_runs(config, s2)) << text;
    return true;
  });
  EXPECT_EQ(at_d256, 0u);
  EXPECT_GE(at_s2, 8u);
}

// tf32x3_wgmma_ws's UNROLL is its consumers' schedule (mla_wgmma_ws.cuh):
// the PTX of one config per value at S3 (128 query rows, two consumers,
// KEY_TILE 32) says which: 1 waits for all of a tile's products at once and
// keeps the block's registers as launched; 2 and 4 wait for S with a
// product still in flight (wait_group 1) and hand the producer's registers
// to the consumers (setmaxnreg); 4 alone feeds S's Q hi products from
// registers, so more of its wgmma take A from registers (P V's always do).
TEST(MlaWgmmaWsSchedule, UnrollPicksTheConsumersSchedule) {
  const SearchSpace space = SearchSpace::load(space_file);
  const Shape s3 = space.parse_shape("B=2,T=2048,H=32,D=64,R=256");
  std::map<int, std::string> ptx;
  for (int unroll : {1, 2, 4}) {
    const Config config = space.parse_config(fmt::format(
        "ALGORITHM=tf32x3_wgmma_ws,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=128,HEADS_PER_BLOCK=1,STAGE_LATENT=true,"
        "KEY_TILE=32,FLOAT4=false,UNROLL={},STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=wgmma_m128,KEY_SPLITS=1",
        unroll));
    const Validity validity = space.check(config, s3);
    ASSERT_TRUE(validity.valid) << "UNROLL " << unroll << ": " << validity.failed_constraint;
    ptx[unroll] = ptx_of(compile_request(space, config, s3, "sm_90a"));
    ASSERT_FALSE(ptx[unroll].empty());
  }
  // A from registers: "{%f..}, {%r" (an A fragment) rather than "{%f..}, %rd" (a descriptor).
  auto register_a = [](const std::string& text) {
    std::size_t n = 0;
    for (std::size_t at = text.find("wgmma.mma_async"); at != std::string::npos;
         at = text.find("wgmma.mma_async", at + 1)) {
      const std::size_t close = text.find('}', at);
      if (close != std::string::npos && text.compare(close, 4, "}, {") == 0) ++n;
    }
    return n;
  };
  EXPECT_EQ(count_of(ptx[1], "wgmma.wait_group.sync.aligned 1"), 0u);
  EXPECT_EQ(count_of(ptx[1], "setmaxnreg"), 0u);
  for (int unroll : {2, 4}) {
    EXPECT_GE(count_of(ptx[unroll], "wgmma.wait_group.sync.aligned 1"), 1u) << "UNROLL " << unroll;
    EXPECT_EQ(count_of(ptx[unroll], "setmaxnreg.dec"), 1u) << "UNROLL " << unroll;
    EXPECT_EQ(count_of(ptx[unroll], "setmaxnreg.inc"), 1u) << "UNROLL " << unroll;
  }
  // P V's 12 (3 products x 4 groups of 8 keys, D 64 in one N = 64 chunk),
  // which UNROLL 2 issues in two places (in the loop and after it); UNROLL 4
  // adds S's Q hi products, 2 per 8 columns of D, in both of its S sites.
  EXPECT_EQ(register_a(ptx[1]), 12u);
  EXPECT_EQ(register_a(ptx[2]), 2 * register_a(ptx[1]));
  EXPECT_EQ(register_a(ptx[4]), register_a(ptx[2]) + 2 * 2 * (64 / 8));
  fmt::print("wgmma with A from registers: UNROLL 1 {}, 2 {}, 4 {}\n", register_a(ptx[1]), register_a(ptx[2]),
             register_a(ptx[4]));

  // Bucketed and, above D 40, the tiles that spilled are UNROLL 1 only.
  std::size_t scheduled = 0;
  space.restrict({"ALGORITHM == tf32x3_wgmma_ws", "UNROLL > 1"}).for_each_valid(s3, [&](const Config& config) {
    const std::string text = space.config_string(config);
    EXPECT_NE(text.find("SHAPE_BUCKETS=exact"), std::string::npos) << text;
    EXPECT_EQ(text.find("QUERIES_PER_BLOCK=256"), std::string::npos) << text;
    EXPECT_FALSE(text.find("QUERIES_PER_BLOCK=128") != std::string::npos &&
                 text.find("KEY_TILE=64") != std::string::npos)
        << text;
    ++scheduled;
    return true;
  });
  EXPECT_GT(scheduled, 0u);
}

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
