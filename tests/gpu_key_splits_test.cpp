// KEY_SPLITS end to end on a GPU with clusters (label gpu; skips elsewhere):
// at shapes with few (batch, head group, query tile) blocks, a covering
// sample of each split algorithm's KEY_SPLITS > 1 configs, exact and
// bucketed, compiled and validated through the isolated worker against the
// float64 reference on every input kind (relative L2 <= 1e-5, no NaN, guards
// and inputs intact), beside the same config unsplit.  Prints one line per
// config (outcome, relative L2, median time split and unsplit), so that one
// run says which splits pay where.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "core/compiler.h"
#include "core/space.h"
#include "tests/covering_sample.h"
#include "tests/gpu_worker.h"
#include "tests/named_shape.h"
#include "tuner/compile_pool.h"
#include "tuner/worker/client.h"

namespace mlatune {
namespace {

const std::filesystem::path& space_file = flagship_space_file;

using SplitParam = std::tuple<const char*, NamedShape>;
class MlaKeySplitsGpu : public ::testing::TestWithParam<SplitParam> {};

TEST_P(MlaKeySplitsGpu, SplitConfigsMatchTheFloat64Reference) {
  Worker worker(worker_options());
  DeviceReport device = worker.probe_device();
  if (!device.usable) GTEST_SKIP() << "no GPU: " << device.reason;
  if (device.device.cc_major < 9) GTEST_SKIP() << "KEY_SPLITS needs clusters (sm_90); this GPU is "
                                                   << device.device.arch();
  const std::string algorithm = std::get<0>(GetParam());
  const NamedShape named = std::get<1>(GetParam());
  const SearchSpace space = SearchSpace::load(space_file).for_device(device.device.arch());
  const SearchSpace split = space.restrict({"ALGORITHM == " + algorithm, "KEY_SPLITS > 1"});
  const Shape shape = space.parse_shape(named.text);
  // (tf32x3_2k is tried only above T 256: where the algorithm has no config
  // at all, there is nothing to split.)
  if (space.restrict({"ALGORITHM == " + algorithm}).count(shape) == 0)
    GTEST_SKIP() << "the space has no " << algorithm << " config at " << named.text;
  std::mt19937_64 rng(20261206);
  const std::vector<Config> configs = covering_sample(split, shape, 8, rng);
  ASSERT_FALSE(configs.empty()) << "no " << algorithm << " config with KEY_SPLITS > 1 at " << named.text;
  std::size_t key_splits = 0;
  while (space.parameters()[key_splits].name != "KEY_SPLITS") ++key_splits;

  WorkloadRequest request;
  request.space_file = space_file;
  request.shape = space.shape_string(shape);
  request.seed = 23;
  request.timing.budget_ms = 5;
  request.timing.min_repetitions = 3;
  worker.set_workload(request);

  Compiler compiler;
  CompilePool pool(compiler);
  std::vector<std::shared_future<CompileResult>> compiled, unsplit;
  std::vector<Config> ones;
  for (const Config& config : configs) {
    compiled.push_back(pool.submit(compile_request(space, config, shape, device.device.arch())));
    Config one = config;
    one.choice[key_splits] = 0;
    ones.push_back(one);
    unsplit.push_back(pool.submit(compile_request(space, one, shape, device.device.arch())));
  }
  auto evaluate = [&](const Config& config, const CompileResult& result) {
    const std::string text = space.config_string(config);
    EXPECT_TRUE(result.ok()) << text << ": " << (result.ok() ? "" : result.failure().message);
    if (!result.ok()) return EvaluationResult{};
    const LaunchPlan plan = plan_launch(space, config, shape);
    EXPECT_TRUE(plan.ok()) << text << ": " << plan.refusal;
    return worker.evaluate(make_candidate(plan, text, result.binary().cubin));
  };
  int ok = 0;
  double worst = 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const std::string text = space.config_string(configs[i]);
    const EvaluationResult e = evaluate(configs[i], compiled[i].get());
    const EvaluationResult base = evaluate(ones[i], unsplit[i].get());
    const bool has = e.validation.has_value();
    fmt::print("{} {}: {} rel L2 {:.3g} nonfinite {} median {:.2f} us (unsplit: {} {:.2f} us) {}\n", named.name,
               text, to_string(e.outcome), has ? e.validation->relative_l2 : -1.0, has ? e.validation->nonfinite : 0,
               e.timing ? e.timing->median_us : -1.0, to_string(base.outcome),
               base.timing ? base.timing->median_us : -1.0, e.reason);
    EXPECT_EQ(e.outcome, Outcome::ok) << text << ": " << e.reason;
    if (e.outcome != Outcome::ok || !has) continue;
    EXPECT_LE(e.validation->relative_l2, 1e-5) << text;
    EXPECT_EQ(e.validation->nonfinite, 0u) << text;
    worst = std::max(worst, e.validation->relative_l2);
    ++ok;
  }
  fmt::print("{} {}: {} of {} {} KEY_SPLITS configs ok, worst relative L2 {:.3g}\n", named.name, named.text, ok,
             configs.size(), algorithm, worst);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaKeySplitsGpu,
    ::testing::Combine(::testing::Values("tf32x3", "tf32x3_2k", "tf32x3_kvgemm"),
                       ::testing::Values(NamedShape{"S1", "B=4,T=256,H=8,D=32,R=64"},
                                         NamedShape{"odd", "B=2,T=333,H=8,D=64,R=100"},
                                         NamedShape{"X2_oddT_R30", "B=3,T=129,H=12,D=20,R=30"},
                                         NamedShape{"D100_R77", "B=1,T=500,H=4,D=100,R=77"},
                                         NamedShape{"T40", "B=1,T=40,H=2,D=16,R=16"})),
    [](const ::testing::TestParamInfo<SplitParam>& info) {
      return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
    });

}  // namespace
}  // namespace mlatune
