// tf32x3_wgmma, tf32x3_wgmma_ws and f16x3_wgmma_ws end to end on an sm_90 GPU (label gpu;
// skips elsewhere): a covering sample of each one's configs at S0-S4, odd
// shapes and T = 1, compiled for sm_90a and validated through the isolated
// worker against the float64 reference (relative L2 <= 1e-5, no NaN, guards
// and inputs intact), with its prologue (fused_mla_expand_kv) before it.
// Prints one line per config
// (outcome, relative L2, max abs error, median time) so that one run says
// which tile shapes fail and how.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "tests/covering_sample.h"
#include "tests/gpu_worker.h"
#include "core/compiler.h"
#include "core/space.h"
#include "tests/named_shape.h"
#include "tuner/compile_pool.h"
#include "tuner/worker/client.h"

namespace mlatune {
namespace {

const std::filesystem::path& space_file = flagship_space_file;

// (algorithm, shape)
using WgmmaParam = std::tuple<const char*, NamedShape>;
class MlaWgmmaGpu : public ::testing::TestWithParam<WgmmaParam> {};

TEST_P(MlaWgmmaGpu, SampledConfigsMatchTheFloat64Reference) {
  Worker worker(worker_options());
  DeviceReport device = worker.probe_device();
  if (!device.usable) GTEST_SKIP() << "no GPU: " << device.reason;
  if (device.device.arch() != "sm_90") GTEST_SKIP() << "wgmma needs sm_90 (sm_90a code); this GPU is "
                                                    << device.device.arch();
  const std::string algorithm = std::get<0>(GetParam());
  const NamedShape named = std::get<1>(GetParam());
  const SearchSpace space = SearchSpace::load(space_file);
  const SearchSpace wgmma = space.restrict({"ALGORITHM == " + algorithm});
  const Shape shape = space.parse_shape(named.text);
  std::mt19937_64 rng(20261215);
  const std::vector<Config> configs = covering_sample(wgmma, shape, 12, rng);
  ASSERT_FALSE(configs.empty()) << "no " << algorithm << " config at " << named.text;

  WorkloadRequest request;
  request.space_file = space_file;
  request.shape = space.shape_string(shape);
  request.seed = 17;
  request.timing.budget_ms = 5;
  request.timing.min_repetitions = 3;
  worker.set_workload(request);

  Compiler compiler;
  CompilePool pool(compiler);
  std::vector<std::shared_future<CompileResult>> compiled;
  for (const Config& config : configs)
    compiled.push_back(pool.submit(compile_request(space, config, shape, "sm_90a")));
  int ok = 0;
  double worst = 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const std::string text = space.config_string(configs[i]);
    const CompileResult& result = compiled[i].get();
    ASSERT_TRUE(result.ok()) << text << ": " << result.failure().message;
    const LaunchPlan plan = plan_launch(space, configs[i], shape);
    ASSERT_TRUE(plan.ok()) << text << ": " << plan.refusal;
    // K and V come from the prologue's workspace: without it the kernel
    // reads NaN (the prologue's `when:` must hold for tf32x3_wgmma).
    EXPECT_TRUE(plan.steps.prologue.has_value())
        << text << ": no prologue planned; the space's prologue `when:` must be ALGORITHM >= tf32x3_2k";
    const EvaluationResult e = worker.evaluate(make_candidate(plan, text, result.binary().cubin));
    const bool has = e.validation.has_value();
    fmt::print("{} {}: {} rel L2 {:.3g} max abs {:.3g} nonfinite {} median {:.1f} us {}\n", named.name, text,
               to_string(e.outcome), has ? e.validation->relative_l2 : -1.0, has ? e.validation->max_abs : -1.0,
               has ? e.validation->nonfinite : 0, e.timing ? e.timing->median_us : -1.0, e.reason);
    EXPECT_EQ(e.outcome, Outcome::ok) << text << ": " << e.reason;
    if (e.outcome != Outcome::ok || !has) continue;
    EXPECT_LE(e.validation->relative_l2, 1e-5) << text;
    EXPECT_EQ(e.validation->nonfinite, 0u) << text;
    worst = std::max(worst, e.validation->relative_l2);
    ++ok;
  }
  fmt::print("{} {}: {} of {} {} configs ok, worst relative L2 {:.3g}\n", named.name, named.text, ok,
             configs.size(), algorithm, worst);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaWgmmaGpu,
    ::testing::Combine(::testing::Values("tf32x3_wgmma", "tf32x3_wgmma_ws", "f16x3_wgmma_ws"),
                       ::testing::ValuesIn(target_shapes_and({{"X1_oddT_D40", "B=2,T=333,H=5,D=40,R=100"},
                                                             {"X2_oddT_R30", "B=3,T=129,H=12,D=20,R=30"},
                                                             {"X5_issue", "B=2,T=333,H=8,D=64,R=100"},
                                                             {"D100_R77", "B=1,T=500,H=4,D=100,R=77"},
                                                             {"T1", "B=3,T=1,H=2,D=64,R=40"},
                                                             // D not a multiple of 4: Q's rows are not
                                                             // 16-byte aligned (f16x3_wgmma_ws loads
                                                             // them one float at a time)
                                                             {"D30_R50", "B=2,T=200,H=3,D=30,R=50"}}))),
    [](const ::testing::TestParamInfo<WgmmaParam>& info) {
      return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
    });

}  // namespace
}  // namespace mlatune
