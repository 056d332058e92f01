// The expansion GEMMs of tf32x3_kvgemm, tf32x3_wgmma and tf32x3_wgmma_ws
// (EXPAND_GEMM wgmma_m64, wgmma_m128, fma and fma_cluster) compile where the
// space says they are valid, for sm_90a where they use wgmma, with no
// spills in either kernel and no serialized wgmma, and each one's prologue
// is what it claims: wgmma of the tile's width for wgmma_*, no tensor-core
// instruction at all for fma and fma_cluster, and for fma_cluster a cluster
// of 8 blocks that reads the other blocks' shared memory.  Per shape
// (S0-S4, odd D and R, the scalar-copy paths, decode, the largest buckets)
// and per EXPAND_GEMM, SHAPE_BUCKETS and attention algorithm, the first valid
// config in enumeration order.  No GPU needed.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nvrtc.h>

#include "core/compiler.h"
#include "core/resource_usage.h"
#include "core/space.h"
#include "tests/named_shape.h"
#include "tests/nvrtc_ptx.h"
#include "tests/space_parameter.h"
#include "tuner/compile_pool.h"

namespace mlatune {
namespace {

std::int64_t shape_value(const SearchSpace& space, const Shape& shape, const std::string& name) {
  const std::vector<std::string>& names = space.shape_variables();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return shape.values[i];
  ADD_FAILURE() << "the flagship space has no shape variable " << name;
  return 0;
}

class MlaExpandTemplates : public ::testing::TestWithParam<NamedShape> {};

TEST_P(MlaExpandTemplates, EveryExpansionCompilesWithoutSpillsAndIsWhatItClaims) {
  const SearchSpace space = SearchSpace::load(flagship_space_file);
  const Shape shape = space.parse_shape(GetParam().text);
  const std::size_t expand = parameter_index(space, "EXPAND_GEMM");
  const std::size_t buckets = parameter_index(space, "SHAPE_BUCKETS");
  const std::size_t algorithm = parameter_index(space, "ALGORITHM");
  const std::vector<std::string>& expand_names = space.parameters()[expand].text;
  // First valid config per (EXPAND_GEMM, SHAPE_BUCKETS, ALGORITHM), the
  // prologue GEMMs other than mma_sync only.
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>, Config> chosen;
  space.for_each_valid(shape, [&](const Config& config) {
    if (expand_names[config.choice[expand]] != "mma_sync")
      chosen.try_emplace({config.choice[expand], config.choice[buckets], config.choice[algorithm]}, config);
    return true;
  });
  Compiler compiler;
  CompilePool pool(compiler);
  struct Job {
    std::string config, expand;
    CompileRequest request;
    std::shared_future<CompileResult> result;
  };
  std::vector<Job> jobs;
  for (const auto& [key, config] : chosen) {
    CompileRequest request = compile_request(space, config, shape, "sm_90");
    // wgmma (in the prologue or the attention) needs sm_90a; fma and
    // fma_cluster under the mma.sync attention run on any sm_90 and later GPU.
    const std::string& expand_name = expand_names[std::get<0>(key)];
    const std::string& algorithm_name = space.parameters()[algorithm].text[std::get<2>(key)];
    const bool needs_wgmma = (expand_name != "fma" && expand_name != "fma_cluster") ||
                             algorithm_name == "tf32x3_wgmma" || algorithm_name == "tf32x3_wgmma_ws" ||
                             algorithm_name == "f16x3_wgmma_ws";
    EXPECT_EQ(request.arch, needs_wgmma ? "sm_90a" : "sm_90") << space.config_string(config);
    jobs.push_back(Job{space.config_string(config), expand_names[std::get<0>(key)], request, {}});
    jobs.back().result = pool.submit(jobs.back().request);
  }
  std::map<std::string, int> per_expansion;
  for (Job& job : jobs) {
    const CompileResult& result = job.result.get();
    ASSERT_TRUE(result.ok()) << job.config << ": " << result.failure().message;
    ++per_expansion[job.expand];
    // Both kernels: the attention (the binary's entry) and the prologue.
    const std::map<std::string, ResourceUsage> report = parse_ptxas_report(result.log());
    ASSERT_TRUE(report.count("fused_mla_expand_kv")) << job.config << ": no ptxas report of the prologue\n"
                                                      << result.log();
    for (const auto& [function, usage] : report) {
      fmt::print("  {} {}: {} registers, stack {} B, spills {} / {} B\n", job.config, function, usage.registers,
                 usage.stack_frame_bytes, usage.spill_store_bytes, usage.spill_load_bytes);
      EXPECT_FALSE(usage.spills()) << job.config << ": " << function << " spills";
    }
    EXPECT_EQ(result.log().find("C7520"), std::string::npos) << job.config << ": wgmma serialized";
    const std::string prologue = entry_body(ptx_of(job.request), "fused_mla_expand_kv");
    ASSERT_FALSE(prologue.empty()) << job.config;
    if (job.expand == "fma" || job.expand == "fma_cluster") {
      EXPECT_EQ(count_of(prologue, "mma"), 0u) << job.config << ": " << job.expand
                                               << "'s prologue uses the tensor cores";
      EXPECT_GE(count_of(prologue, "fma.rn.f32"), 64u) << job.config;
      // The cluster: 8 blocks, two cluster barriers per chunk of latent
      // rows, the partial sums read from the 8 ranks' shared memory.
      const bool cluster = job.expand == "fma_cluster";
      EXPECT_EQ(count_of(prologue, "barrier.cluster.arrive"), cluster ? 2u : 0u) << job.config;
      EXPECT_EQ(count_of(prologue, "ld.shared::cluster"), cluster ? 8u : 0u) << job.config;
      const std::string directives = prologue.substr(0, prologue.find('{'));
      EXPECT_EQ(count_of(directives, ".reqnctapercluster 8, 1, 1"), cluster ? 1u : 0u) << job.config;
    } else {
      // K and V side by side: m64n64 (wgmma_m64) or m64n128 (wgmma_m128),
      // three products for each of the 4 k steps of a stage.
      const std::string shape_of = job.expand == "wgmma_m128" ? "m64n128k8" : "m64n64k8";
      EXPECT_GE(count_of(prologue, "wgmma.mma_async.sync.aligned." + shape_of), 12u) << job.config;
      EXPECT_EQ(count_of(prologue, "mma.sync"), 0u) << job.config;
    }
  }
  fmt::print("{} {}: fma {}, fma_cluster {}, wgmma_m64 {}, wgmma_m128 {} configs compiled\n", GetParam().name,
             GetParam().text, per_expansion["fma"], per_expansion["fma_cluster"], per_expansion["wgmma_m64"],
             per_expansion["wgmma_m128"]);
  // The tensor-core tiles are valid at every shape; fma where B*T <= 64,
  // fma_cluster where B*T <= 128.
  EXPECT_GE(per_expansion["wgmma_m64"], 2);
  EXPECT_GE(per_expansion["wgmma_m128"], 2);
  const std::int64_t rows = shape_value(space, shape, "B") * shape_value(space, shape, "T");
  if (rows <= 64)
    EXPECT_GE(per_expansion["fma"], 2);
  else
    EXPECT_EQ(per_expansion["fma"], 0);
  if (rows <= 128)
    EXPECT_GE(per_expansion["fma_cluster"], 2);
  else
    EXPECT_EQ(per_expansion["fma_cluster"], 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlaExpandTemplates,
                         ::testing::ValuesIn(target_shapes_and({{"OddDR", "B=3,T=50,H=7,D=61,R=101"},
                                                                {"OddR", "B=4,T=300,H=16,D=64,R=131"},
                                                                {"Decode", "B=8,T=1,H=33,D=82,R=547"},
                                                                {"Rows66_R911", "B=6,T=11,H=40,D=12,R=911"},
                                                                {"R16", "B=3,T=5,H=3,D=9,R=16"},
                                                                {"LargestBuckets", "B=1,T=40,H=2,D=256,R=1024"}})),
                         shape_name);

}  // namespace
}  // namespace mlatune
