// GPU tests of the flagship family (label gpu; each skips with the reason
// where there is no GPU):
//  - a sample of at least 50 configs per shape, covering every parameter value
//    valid at that shape and both algorithms, at S0-S4 and three shapes with
//    odd T and T*H > 1024, each validated against the float64 reference kernel
//    (relative L2 <= 1e-5, no NaN) through the isolated worker;
//  - the float64 reference kernel against the CPU reference at S0 and S1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>

#include "tests/covering_sample.h"
#include "tests/gpu_worker.h"
#include "tuner/compile_pool.h"
#include "core/compiler.h"
#include "core/cuda.h"
#include "tuner/mla_cpu_reference.h"
#include "core/space.h"
#include "tuner/worker/client.h"
#include "tuner/workload.h"

namespace mlatune {
namespace {

const std::filesystem::path space_file =
    std::filesystem::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";

struct NamedShape {
  const char* name;
  const char* text;
};

class MlaGpu : public ::testing::TestWithParam<NamedShape> {};

TEST_P(MlaGpu, SampledConfigsMatchTheFloat64Reference) {
  Worker worker(worker_options());
  DeviceReport device = worker.probe_device();
  if (!device.usable) GTEST_SKIP() << "no GPU: " << device.reason;

  SearchSpace space = SearchSpace::load(space_file);
  Shape shape = space.parse_shape(GetParam().text);
  std::mt19937_64 rng(20261129);
  std::vector<Config> configs = covering_sample(space, shape, 50, rng);
  ASSERT_GE(configs.size(), std::min<std::uint64_t>(50, space.count(shape)));

  Compiler compiler;
  CompilePool pool(compiler);
  std::vector<std::shared_future<CompileResult>> compiled;
  for (const Config& config : configs) {
    compiled.push_back(pool.submit(compile_request(space, config, shape, device.device.arch())));
  }

  WorkloadRequest request;
  request.space_file = space_file;
  request.shape = space.shape_string(shape);
  request.seed = 7;
  request.timing.budget_ms = 2;  // correctness here; speed is the tuner's job
  request.timing.min_repetitions = 3;
  WorkloadInfo workload = worker.set_workload(request);

  std::map<std::string, int> per_value;  // "PARAM=value" -> configs validated
  double worst = 0;
  int ok = 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    std::string text = space.config_string(configs[i]);
    const CompileResult& result = compiled[i].get();
    ASSERT_TRUE(result.ok()) << result.failure().message;
    // Through the plan, as the sweep does: tf32x3_2k needs its prologue and workspace.
    LaunchPlan plan = plan_launch(space, configs[i], shape);
    ASSERT_TRUE(plan.ok()) << text << ": " << plan.refusal;
    Candidate candidate = make_candidate(plan, text, result.binary().cubin);
    EvaluationResult evaluation = worker.evaluate(candidate);
    EXPECT_EQ(evaluation.outcome, Outcome::ok) << text << ": " << evaluation.reason;
    if (evaluation.outcome != Outcome::ok) continue;
    ASSERT_TRUE(evaluation.validation.has_value());
    EXPECT_LE(evaluation.validation->relative_l2, 1e-5) << text;
    EXPECT_EQ(evaluation.validation->nonfinite, 0u) << text;
    EXPECT_GE(evaluation.validation->input_sets, 2) << text;
    worst = std::max(worst, evaluation.validation->relative_l2);
    ++ok;
    for (std::size_t p = 0; p < space.parameters().size(); ++p)
      ++per_value[space.parameters()[p].name + "=" + space.parameters()[p].text[configs[i].choice[p]]];
  }
  std::string coverage;
  for (const auto& [value, n] : per_value) coverage += fmt::format(" {}:{}", value, n);
  fmt::print("{} {} on {}: {} configs, {} ok, worst relative L2 {:.3g}, reference kernel {:.1f} us\n"
             "  validated per parameter value:{}\n",
             GetParam().name, space.shape_string(shape), device.device.name, configs.size(), ok, worst,
             workload.reference_us, coverage);
  EXPECT_EQ(ok, static_cast<int>(configs.size()));
  // Both algorithms are exercised wherever the space allows them.
  EXPECT_GT(per_value.count("ALGORITHM=absorbed") + per_value.count("ALGORITHM=expanded"), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaGpu,
    ::testing::Values(NamedShape{"S0", "B=2,T=32,H=4,D=16,R=24"},
                      NamedShape{"S1", "B=4,T=256,H=8,D=32,R=64"},
                      NamedShape{"S2", "B=4,T=1024,H=16,D=64,R=128"},
                      NamedShape{"S3", "B=2,T=2048,H=32,D=64,R=256"},
                      NamedShape{"S4", "B=1,T=4096,H=16,D=128,R=512"},
                      NamedShape{"X1_oddT_D40", "B=2,T=333,H=5,D=40,R=100"},
                      NamedShape{"X2_oddT_R30", "B=3,T=129,H=12,D=20,R=30"},
                      NamedShape{"X3_oddT_long", "B=1,T=1001,H=3,D=96,R=200"}),
    [](const ::testing::TestParamInfo<NamedShape>& info) { return std::string(info.param.name); });

// The float64 reference kernel (absorbed rewrite, on the GPU) against the CPU
// reference (the literal definition), on the same random inputs.
TEST(MlaGpuReference, ReferenceKernelMatchesTheCpuReferenceAtS0AndS1) {
  GpuProbe probe = probe_gpu();
  if (!probe.usable) GTEST_SKIP() << "no GPU: " << probe.reason;
  SearchSpace space = SearchSpace::load(space_file);
  for (const char* text : {"B=2,T=32,H=4,D=16,R=24", "B=4,T=256,H=8,D=32,R=64"}) {
    Shape shape = space.parse_shape(text);
    WorkloadOptions options;
    options.seed = 99;
    Workload workload(space, shape, options);
    auto as_floats = [](const std::vector<unsigned char>& bytes) {
      std::vector<float> values(bytes.size() / sizeof(float));
      std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
      return values;
    };
    for (int set = 0; set < workload.validation_sets(); ++set) {
      std::vector<float> q = as_floats(workload.download_input(set, 0));
      std::vector<float> kv = as_floats(workload.download_input(set, 1));
      std::vector<float> wk = as_floats(workload.download_input(set, 2));
      std::vector<float> wv = as_floats(workload.download_input(set, 3));
      std::vector<double> gpu = workload.download_reference(set, 0);
      MlaShape mla{shape.values[0], shape.values[1], shape.values[2], shape.values[3], shape.values[4]};
      ASSERT_EQ(q.size(), mla.q_elements());
      ASSERT_EQ(gpu.size(), mla.q_elements());
      // The kernel gets scale as a float32 argument; use the same value.
      double scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(mla.D)));
      std::vector<double> cpu(mla.q_elements());
      mla_attention_reference_cpu(mla, scale, q.data(), kv.data(), wk.data(), wv.data(), cpu.data());
      double diff2 = 0, ref2 = 0, max_abs = 0;
      for (std::size_t i = 0; i < cpu.size(); ++i) {
        ASSERT_TRUE(std::isfinite(gpu[i])) << i;
        double d = gpu[i] - cpu[i];
        diff2 += d * d;
        ref2 += cpu[i] * cpu[i];
        max_abs = std::max(max_abs, std::abs(d));
      }
      double rel = std::sqrt(diff2 / ref2);
      fmt::print("reference kernel vs CPU reference at {} (input set {}): relative L2 {:.3g}, max abs {:.3g}\n",
                 text, set, rel, max_abs);
      EXPECT_LE(rel, 1e-12) << text;
    }
  }
}

}  // namespace
}  // namespace mlatune
