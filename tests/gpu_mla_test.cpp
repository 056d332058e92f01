// GPU tests of the flagship family (label gpu; each skips with the reason
// where there is no GPU):
//  - a sample of at least 50 configs per shape, covering every parameter value
//    valid at that shape and both algorithms, at S0-S4 and three shapes with
//    odd T and T*H > 1024, each validated against the float64 reference kernel
//    (relative L2 <= 1e-5, no NaN) through the isolated worker;
//  - shape-bucketed configs (SHAPE_BUCKETS bucketed: D and R compiled to a
//    bucket, H, D, R read at run time) at shapes with every residue of D and
//    R mod 8, odd H, H = 1, D = 8, D = 256 and R = 1024, validated the same
//    way (poisoned outputs, guard regions, unchanged inputs, float64
//    reference), and one binary run at two shapes of its bucket;
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
#include "tests/named_shape.h"
#include "tuner/worker/client.h"
#include "tuner/workload.h"

namespace mlatune {
namespace {

const std::filesystem::path& space_file = flagship_space_file;

// What validating configs at one shape found.
struct Validated {
  int ok = 0;
  double worst = 0;
  std::map<std::string, int> per_value;  // "PARAM=value" -> configs validated
};

// Compiles `configs` for the device and validates each through the worker
// (set to `shape`'s workload by the caller), as the sweep does.
Validated validate(const SearchSpace& space, const Shape& shape, const std::vector<Config>& configs,
                   Worker& worker, const std::string& arch) {
  Compiler compiler;
  CompilePool pool(compiler);
  std::vector<std::shared_future<CompileResult>> compiled;
  for (const Config& config : configs) compiled.push_back(pool.submit(compile_request(space, config, shape, arch)));
  Validated out;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const std::string text = space.config_string(configs[i]);
    const CompileResult& result = compiled[i].get();
    EXPECT_TRUE(result.ok()) << text << ": " << (result.ok() ? "" : result.failure().message);
    if (!result.ok()) continue;
    LaunchPlan plan = plan_launch(space, configs[i], shape);
    EXPECT_TRUE(plan.ok()) << text << ": " << plan.refusal;
    if (!plan.ok()) continue;
    EvaluationResult evaluation = worker.evaluate(make_candidate(plan, text, result.binary().cubin));
    EXPECT_EQ(evaluation.outcome, Outcome::ok) << text << ": " << evaluation.reason;
    if (evaluation.outcome != Outcome::ok || !evaluation.validation) continue;
    EXPECT_LE(evaluation.validation->relative_l2, 1e-5) << text;
    EXPECT_EQ(evaluation.validation->nonfinite, 0u) << text;
    EXPECT_GE(evaluation.validation->input_sets, 2) << text;
    out.worst = std::max(out.worst, evaluation.validation->relative_l2);
    ++out.ok;
    for (std::size_t p = 0; p < space.parameters().size(); ++p)
      ++out.per_value[space.parameters()[p].name + "=" + space.parameters()[p].text[configs[i].choice[p]]];
  }
  return out;
}

WorkloadRequest workload_request(const SearchSpace& space, const Shape& shape) {
  WorkloadRequest request;
  request.space_file = space_file;
  request.shape = space.shape_string(shape);
  request.seed = 11;
  request.timing.budget_ms = 2;  // correctness here; speed is the tuner's job
  request.timing.min_repetitions = 3;
  return request;
}

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

  WorkloadRequest request = workload_request(space, shape);
  request.seed = 7;
  WorkloadInfo workload = worker.set_workload(request);
  Validated v = validate(space, shape, configs, worker, device.device.arch());
  std::string coverage;
  for (const auto& [value, n] : v.per_value) coverage += fmt::format(" {}:{}", value, n);
  fmt::print("{} {} on {}: {} configs, {} ok, worst relative L2 {:.3g}, reference kernel {:.1f} us\n"
             "  validated per parameter value:{}\n",
             GetParam().name, space.shape_string(shape), device.device.name, configs.size(), v.ok, v.worst,
             workload.reference_us, coverage);
  EXPECT_EQ(v.ok, static_cast<int>(configs.size()));
  const std::map<std::string, int>& per_value = v.per_value;
  // Both algorithms are exercised wherever the space allows them.
  EXPECT_GT(per_value.count("ALGORITHM=absorbed") + per_value.count("ALGORITHM=expanded"), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaGpu,
    ::testing::ValuesIn(target_shapes_and({{"X1_oddT_D40", "B=2,T=333,H=5,D=40,R=100"},
                                         {"X2_oddT_R30", "B=3,T=129,H=12,D=20,R=30"},
                                         {"X3_oddT_long", "B=1,T=1001,H=3,D=96,R=200"}})),
    shape_name);

class MlaGpuBucketed : public ::testing::TestWithParam<NamedShape> {};

TEST_P(MlaGpuBucketed, ConfigsMatchTheFloat64Reference) {
  Worker worker(worker_options());
  DeviceReport device = worker.probe_device();
  if (!device.usable) GTEST_SKIP() << "no GPU: " << device.reason;

  SearchSpace space = SearchSpace::load(space_file);
  const SearchSpace bucketed = space.restrict({"SHAPE_BUCKETS == bucketed"});
  Shape shape = space.parse_shape(GetParam().text);
  std::mt19937_64 rng(20261201);
  // Configs of the restricted space are configs of the space (same parameters).
  std::vector<Config> configs = covering_sample(bucketed, shape, 16, rng);
  ASSERT_GE(configs.size(), std::min<std::uint64_t>(16, bucketed.count(shape)));
  ASSERT_FALSE(configs.empty()) << "no bucketed config at " << GetParam().text;
  WorkloadInfo workload = worker.set_workload(workload_request(space, shape));
  Validated v = validate(space, shape, configs, worker, device.device.arch());
  std::string coverage;
  for (const auto& [value, n] : v.per_value) coverage += fmt::format(" {}:{}", value, n);
  fmt::print("bucketed {} {} on {}: {} configs, {} ok, worst relative L2 {:.3g}, reference kernel {:.1f} us\n"
             "  validated per parameter value:{}\n",
             GetParam().name, space.shape_string(shape), device.device.name, configs.size(), v.ok, v.worst,
             workload.reference_us, coverage);
  EXPECT_EQ(v.ok, static_cast<int>(configs.size()));
}

// D % 8 and R % 8 take every value 0..7 over these shapes; H odd, H = 1,
// D = 8 and 256, R = 1024 (the largest buckets), and the shapes of issue 13.
INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaGpuBucketed,
    ::testing::Values(NamedShape{"I13a", "B=4,T=300,H=16,D=64,R=131"},
                      NamedShape{"I13b", "B=2,T=1000,H=12,D=72,R=96"},
                      NamedShape{"I13c", "B=1,T=777,H=20,D=56,R=200"},
                      NamedShape{"D8_H1", "B=3,T=65,H=1,D=8,R=17"},
                      NamedShape{"D256", "B=1,T=300,H=3,D=256,R=129"},
                      NamedShape{"R1024", "B=2,T=257,H=5,D=33,R=1024"},
                      NamedShape{"D61_R1019", "B=2,T=333,H=7,D=61,R=1019"},
                      NamedShape{"D250_R1001", "B=1,T=129,H=9,D=250,R=1001"},
                      NamedShape{"D43_R150", "B=2,T=200,H=6,D=43,R=150"},
                      NamedShape{"D100_R77", "B=1,T=500,H=4,D=100,R=77"},
                      NamedShape{"D15_R31", "B=3,T=90,H=2,D=15,R=31"},
                      NamedShape{"D126_R516", "B=1,T=2050,H=11,D=126,R=516"},
                      NamedShape{"D39_R58", "B=2,T=97,H=13,D=39,R=58"}),
    shape_name);

// The CUDA-core expansions (EXPAND_GEMM fma and fma_cluster) at the shapes
// their code paths turn on: R past the weight rows held in registers (fma:
// R > 512), several chunks of latent rows (fma: 8, fma_cluster: 16 a
// chunk; up to the 64 and 128 rows the space allows), odd D (the scalar
// loads), R too small for every rank of fma_cluster's cluster to have rows
// (R = 16: ranks 2-7 add zeros), H * D not a multiple of 128 columns, the
// smallest shape, and the decode shapes where the H200 ran fma slowest.
class MlaGpuFmaExpansion : public ::testing::TestWithParam<NamedShape> {};

TEST_P(MlaGpuFmaExpansion, ConfigsMatchTheFloat64Reference) {
  Worker worker(worker_options());
  DeviceReport device = worker.probe_device();
  if (!device.usable) GTEST_SKIP() << "no GPU: " << device.reason;

  SearchSpace space = SearchSpace::load(space_file);
  Shape shape = space.parse_shape(GetParam().text);
  const std::int64_t rows = shape.values[0] * shape.values[1];  // B * T
  int expansions = 0;
  for (const std::string expand : {"fma", "fma_cluster"}) {
    if (expand == "fma" && rows > 64) continue;  // the space's limits: 64 and 128 rows
    ++expansions;
    const SearchSpace only = space.restrict({"EXPAND_GEMM == " + expand});
    std::mt19937_64 rng(20261202);
    std::vector<Config> configs = covering_sample(only, shape, 12, rng);
    ASSERT_FALSE(configs.empty()) << "no " << expand << " config at " << GetParam().text;
    WorkloadInfo workload = worker.set_workload(workload_request(space, shape));
    Validated v = validate(space, shape, configs, worker, device.device.arch());
    fmt::print("{} {} {} on {}: {} configs, {} ok, worst relative L2 {:.3g}\n", expand, GetParam().name,
               space.shape_string(shape), device.device.name, configs.size(), v.ok, v.worst);
    EXPECT_EQ(v.ok, static_cast<int>(configs.size())) << expand;
    EXPECT_EQ(v.per_value["EXPAND_GEMM=" + expand], v.ok) << expand;
  }
  EXPECT_GE(expansions, 1);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaGpuFmaExpansion,
    ::testing::Values(NamedShape{"Decode_R547", "B=1,T=1,H=33,D=82,R=547"},
                      NamedShape{"Chunks_R695", "B=6,T=4,H=12,D=120,R=695"},
                      NamedShape{"OddD_R295", "B=5,T=4,H=22,D=175,R=295"},
                      NamedShape{"Rows64_R1024", "B=8,T=8,H=3,D=16,R=1024"},
                      NamedShape{"Smallest", "B=1,T=3,H=1,D=8,R=16"},
                      NamedShape{"D248_R532", "B=6,T=1,H=26,D=248,R=532"},
                      NamedShape{"Rows28_R935", "B=4,T=7,H=8,D=116,R=935"},
                      NamedShape{"Rows66_R911", "B=6,T=11,H=40,D=12,R=911"},
                      NamedShape{"Rows128_OddD", "B=8,T=16,H=5,D=41,R=300"}),
    shape_name);

// One binary, compiled at one shape, serves another shape of its bucket:
// what lets the dispatcher run a shape without compiling.
TEST(MlaGpuBucketedBinary, OneBinaryServesTwoShapesOfItsBucket) {
  Worker worker(worker_options());
  DeviceReport device = worker.probe_device();
  if (!device.usable) GTEST_SKIP() << "no GPU: " << device.reason;
  SearchSpace space = SearchSpace::load(space_file);
  const Shape compiled_at = space.parse_shape("B=2,T=300,H=3,D=57,R=203");
  const Shape run_at = space.parse_shape("B=1,T=777,H=5,D=63,R=250");  // D -> 64, R -> 256 too
  for (const char* text :
       {"ALGORITHM=tf32x3,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=16,HEADS_PER_BLOCK=1,STAGE_LATENT=true,"
        "KEY_TILE=32,FLOAT4=false,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=bucketed,EXPAND_GEMM=mma_sync,KEY_SPLITS=1",
        "ALGORITHM=tf32x3_2k,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=64,HEADS_PER_BLOCK=1,STAGE_LATENT=true,"
        "KEY_TILE=32,FLOAT4=false,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=bucketed,EXPAND_GEMM=mma_sync,KEY_SPLITS=1"}) {
    const Config config = space.parse_config(text);
    ASSERT_TRUE(space.check(config, compiled_at)) << text;
    ASSERT_TRUE(space.check(config, run_at)) << text;
    ASSERT_EQ(space.definitions(config, compiled_at), space.definitions(config, run_at)) << text;
    Compiler compiler;
    CompileResult result = compiler.compile(compile_request(space, config, compiled_at, device.device.arch()));
    ASSERT_TRUE(result.ok()) << result.failure().message;
    worker.set_workload(workload_request(space, run_at));
    LaunchPlan plan = plan_launch(space, config, run_at);
    ASSERT_TRUE(plan.ok()) << plan.refusal;
    EvaluationResult evaluation = worker.evaluate(make_candidate(plan, text, result.binary().cubin));
    ASSERT_EQ(evaluation.outcome, Outcome::ok) << text << ": " << evaluation.reason;
    ASSERT_TRUE(evaluation.validation.has_value());
    EXPECT_LE(evaluation.validation->relative_l2, 1e-5) << text;
    EXPECT_EQ(evaluation.validation->nonfinite, 0u) << text;
  }
}

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
