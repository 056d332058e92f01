// GPU tests of the RMSNorm family (label gpu; each skips with the reason
// where there is no GPU):
//  - a sample of at least 30 configs per shape, covering every parameter
//    value valid there, at LLM-like and odd shapes (COLS = 1, 33, 4095; one
//    row; rows that leave a block part empty), each validated through the
//    isolated worker against the float64 reference kernel within the space's
//    tolerance;
//  - the reference kernel against float64 computed on the host;
//  - the family through the generic C ABI (cache/c_api.h) on a database with
//    two tuned shapes: introspection, launches at tuned and untuned shapes
//    checked against float64 computed on the host, a FLOAT4 config given
//    pointers that are not 16-byte aligned, a buffer too small refused by
//    name before anything runs, and the typed MLA entry refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "cache/c_api.h"
#include "cache/mla_c_api.h"
#include "core/compiler.h"
#include "core/cuda.h"
#include "core/space.h"
#include "tests/named_shape.h"
#include "tests/covering_sample.h"
#include "tests/gpu_worker.h"
#include "tests/tuned_entry.h"
#include "tuner/compile_pool.h"
#include "tuner/worker/client.h"
#include "tuner/workload.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path space_file = fs::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "rms_norm.yaml";

/// The float64 RMSNorm of float32 rows, as the family defines it.
std::vector<double> host_rms_norm(const std::vector<float>& x, const std::vector<float>& w, std::int64_t rows,
                                  std::int64_t cols, float eps) {
  std::vector<double> out(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * cols;
    double sum = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) sum += static_cast<double>(row[c]) * row[c];
    const double scale = 1.0 / std::sqrt(sum / static_cast<double>(cols) + static_cast<double>(eps));
    for (std::int64_t c = 0; c < cols; ++c) out[r * cols + c] = static_cast<double>(row[c]) * scale * w[c];
  }
  return out;
}

/// The space's eps at a shape, as the kernel receives it (float32).
float eps_of(const SearchSpace& space, const Shape& shape) {
  for (const BoundArgument& bound : space.bind_arguments(shape))
    if (bound.argument->name == "eps") return static_cast<float>(bound.scalar);
  ADD_FAILURE() << "the space has no argument eps";
  return 0.0f;
}

/// An output against the host's float64.
struct HostError {
  double relative_l2 = 0.0;
  double max_abs = 0.0;
  std::size_t nonfinite = 0;
};

template <typename T>
HostError compare(const std::vector<T>& out, const std::vector<double>& expected) {
  HostError e;
  double diff2 = 0.0, ref2 = 0.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double value = static_cast<double>(out[i]);
    if (!std::isfinite(value)) {
      ++e.nonfinite;
      continue;
    }
    const double d = value - expected[i];
    diff2 += d * d;
    ref2 += expected[i] * expected[i];
    e.max_abs = std::max(e.max_abs, std::abs(d));
  }
  e.relative_l2 = std::sqrt(diff2 / ref2);
  return e;
}

class RmsNormGpu : public ::testing::TestWithParam<NamedShape> {};

TEST_P(RmsNormGpu, SampledConfigsMatchTheFloat64Reference) {
  Worker worker(worker_options());
  DeviceReport device = worker.probe_device();
  if (!device.usable) GTEST_SKIP() << "no GPU: " << device.reason;

  SearchSpace space = SearchSpace::load(space_file);
  Shape shape = space.parse_shape(GetParam().text);
  std::mt19937_64 rng(20261201);
  std::vector<Config> configs = covering_sample(space, shape, 30, rng);
  ASSERT_GE(configs.size(), std::min<std::uint64_t>(30, space.count(shape)));

  Compiler compiler;
  CompilePool pool(compiler);
  std::vector<std::shared_future<CompileResult>> compiled;
  for (const Config& config : configs)
    compiled.push_back(pool.submit(compile_request(space, config, shape, device.device.arch())));

  WorkloadRequest request;
  request.space_file = space_file;
  request.shape = space.shape_string(shape);
  request.seed = 11;
  request.timing.budget_ms = 2;  // correctness here; speed is the tuner's job
  request.timing.min_repetitions = 3;
  WorkloadInfo workload = worker.set_workload(request);

  std::map<std::string, int> per_value;  // "PARAM=value" -> configs validated
  double worst = 0.0;
  int ok = 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const std::string text = space.config_string(configs[i]);
    const CompileResult& result = compiled[i].get();
    ASSERT_TRUE(result.ok()) << text << ": " << result.failure().message;
    EXPECT_FALSE(result.binary().usage.spills()) << text;
    Candidate candidate{text, result.binary().cubin, space.kernel().entry, {}};
    describe_launch(space, configs[i], shape, candidate);
    ASSERT_TRUE(candidate.geometry.valid()) << text << ": " << candidate.geometry.invalid_reason;
    EvaluationResult evaluation = worker.evaluate(candidate);
    EXPECT_EQ(evaluation.outcome, Outcome::ok) << text << ": " << evaluation.reason;
    if (evaluation.outcome != Outcome::ok) continue;
    ASSERT_TRUE(evaluation.validation.has_value());
    EXPECT_LE(evaluation.validation->relative_l2, space.tolerance().relative_l2) << text;
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
  for (const char* algorithm : {"ALGORITHM=registers", "ALGORITHM=shared", "ALGORITHM=reread"})
    EXPECT_GT(per_value.count(algorithm), 0u) << algorithm << " not exercised";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RmsNormGpu,
    ::testing::Values(NamedShape{"decode_4096", "ROWS=1,COLS=4096"},
                      NamedShape{"odd_4095", "ROWS=7,COLS=4095"},
                      NamedShape{"llm_5120", "ROWS=33,COLS=5120"},
                      NamedShape{"square_4096", "ROWS=4096,COLS=4096"},
                      NamedShape{"wide_8192", "ROWS=257,COLS=8192"},
                      NamedShape{"narrow_33", "ROWS=1000,COLS=33"},
                      NamedShape{"float4_tail_1028", "ROWS=3,COLS=1028"},
                      NamedShape{"one_column", "ROWS=3,COLS=1"}),
    shape_name);

// The float64 reference kernel against the definition computed on the host,
// on the workload's own random inputs.
TEST(RmsNormGpuReference, ReferenceKernelMatchesTheHost) {
  GpuProbe probe = probe_gpu();
  if (!probe.usable) GTEST_SKIP() << "no GPU: " << probe.reason;
  SearchSpace space = SearchSpace::load(space_file);
  for (const char* text : {"ROWS=7,COLS=4095", "ROWS=300,COLS=1024", "ROWS=2,COLS=1"}) {
    Shape shape = space.parse_shape(text);
    WorkloadOptions options;
    options.seed = 99;
    Workload workload(space, shape, options);
    for (int set = 0; set < workload.validation_sets(); ++set) {
      auto as_floats = [](const std::vector<unsigned char>& bytes) {
        std::vector<float> values(bytes.size() / sizeof(float));
        std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
        return values;
      };
      std::vector<float> x = as_floats(workload.download_input(set, 0));
      std::vector<float> w = as_floats(workload.download_input(set, 1));
      std::vector<double> gpu = workload.download_reference(set, 0);
      std::vector<double> host = host_rms_norm(x, w, shape.values[0], shape.values[1], eps_of(space, shape));
      ASSERT_EQ(gpu.size(), host.size());
      HostError e = compare(gpu, host);
      fmt::print("reference kernel vs host at {} (input set {}): relative L2 {:.3g}, max abs {:.3g}\n", text,
                 set, e.relative_l2, e.max_abs);
      EXPECT_EQ(e.nonfinite, 0u);
      EXPECT_LE(e.relative_l2, 1e-14) << text;
    }
  }
}

// ---- the generic C ABI ------------------------------------------------------

/// Device copies of one problem's buffers (x, w, out), each allocated 16
/// bytes larger so that a test can pass pointers off the 16-byte alignment.
struct DeviceProblem {
  std::int64_t rows = 0, cols = 0;
  std::vector<float> x, w;
  std::vector<double> expected;
  DeviceBuffer x_d, w_d, out_d;

  DeviceProblem(std::int64_t r, std::int64_t c, float eps, std::uint64_t seed) : rows(r), cols(c) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    x.resize(static_cast<std::size_t>(rows * cols));
    w.resize(static_cast<std::size_t>(cols));
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = normal(rng);
    expected = host_rms_norm(x, w, rows, cols, eps);
    x_d = DeviceBuffer(x.size() * sizeof(float) + 16);
    w_d = DeviceBuffer(w.size() * sizeof(float) + 16);
    out_d = DeviceBuffer(x.size() * sizeof(float) + 16);
  }

  /// Uploads the inputs at `offset` bytes into their buffers and fills the
  /// output buffer with NaN; returns the three pointers at that offset.
  std::vector<const void*> upload(std::size_t offset) {
    auto at = [&](const DeviceBuffer& b) { return static_cast<char*>(b.get()) + offset; };
    MLATUNE_CUDA(cudaMemcpy(at(x_d), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    MLATUNE_CUDA(cudaMemcpy(at(w_d), w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice));
    MLATUNE_CUDA(cudaMemset(out_d.get(), 0xff, out_d.bytes()));  // all-ones words are NaN
    // cudaMemset (and the DMA of a pageable cudaMemcpy) may still run on the
    // legacy stream, which a non-blocking stream does not wait for.
    MLATUNE_CUDA(cudaDeviceSynchronize());
    return {at(x_d), at(w_d), at(out_d)};
  }

  std::vector<float> download(std::size_t offset) const {
    std::vector<float> out(x.size());
    MLATUNE_CUDA(cudaMemcpy(out.data(), static_cast<char*>(out_d.get()) + offset, out.size() * sizeof(float),
                            cudaMemcpyDeviceToHost));
    return out;
  }

  std::vector<std::size_t> bytes() const {
    return {x.size() * sizeof(float), w.size() * sizeof(float), x.size() * sizeof(float)};
  }
  std::vector<std::int64_t> shape() const { return {rows, cols}; }
};

class RmsNormCAbi : public ::testing::Test {
 protected:
  void SetUp() override {
    GpuProbe probe = probe_gpu();
    if (!probe.usable) GTEST_SKIP() << "no GPU: " << probe.reason;
    device_ = probe.device.info();
    dir_ = fs::temp_directory_path() / ("mlatune_gpu_rms_norm_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    space_ = std::make_unique<SearchSpace>(SearchSpace::load(space_file));
  }
  void TearDown() override {
    if (handle_) mlatune_close(handle_);
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // A database where `configs` (shape text -> config text) are the tuned
  // best entries, and a dispatcher opened on it.
  void open_tuned(const std::map<std::string, std::string>& configs) {
    const fs::path db = dir_ / "tuned.db";
    Store::open(db);
    for (const auto& [shape, config] : configs) {
      Validity validity = space_->check(space_->parse_config(config), space_->parse_shape(shape));
      ASSERT_TRUE(validity) << config << " at " << shape << ": " << validity.failed_constraint;
      record_tuned_entry(db, *space_, space_file, device_, shape, config, "gpu_rms_norm_test",
                         Timing{10, 10, 10, 1, 0, "gpu_rms_norm_test (not timed)"});
    }
    ASSERT_EQ(mlatune_open(db.c_str(), space_file.c_str(), &handle_), MLATUNE_OK) << mlatune_last_error(nullptr);
  }

  std::string choice(const std::vector<std::int64_t>& shape) {
    char text[1024];
    EXPECT_EQ(mlatune_choice_for(handle_, shape.data(), shape.size(), text, sizeof text), MLATUNE_OK)
        << mlatune_last_error(handle_);
    return text;
  }

  // Launches through mlatune_launch_checked with pointers `offset` bytes
  // into the buffers, and returns the error against the host's float64.
  HostError launch_and_compare(DeviceProblem& problem, std::size_t offset) {
    std::vector<const void*> buffers = problem.upload(offset);
    std::vector<std::size_t> bytes = problem.bytes();
    std::vector<std::int64_t> shape = problem.shape();
    Stream stream;
    EXPECT_EQ(mlatune_launch_checked(handle_, buffers.data(), bytes.data(), buffers.size(), shape.data(),
                                     shape.size(), stream.get()),
              MLATUNE_OK)
        << mlatune_last_error(handle_);
    stream.synchronize();
    return compare(problem.download(offset), problem.expected);
  }

  DeviceInfo device_;
  fs::path dir_;
  std::unique_ptr<SearchSpace> space_;
  mlatune_dispatcher* handle_ = nullptr;
};

const char* const float4_config = "ALGORITHM=registers,THREADS_PER_ROW=128,ROWS_PER_BLOCK=2,FLOAT4=true,UNROLL=1";
const char* const odd_config = "ALGORITHM=shared,THREADS_PER_ROW=64,ROWS_PER_BLOCK=1,FLOAT4=false,UNROLL=2";

TEST_F(RmsNormCAbi, DescribesTheFamily) {
  open_tuned({});
  const char* name = nullptr;
  ASSERT_EQ(mlatune_kernel_name(handle_, &name), MLATUNE_OK);
  EXPECT_STREQ(name, "rms_norm");
  std::size_t count = 0;
  ASSERT_EQ(mlatune_shape_variable_count(handle_, &count), MLATUNE_OK);
  ASSERT_EQ(count, 2u);
  ASSERT_EQ(mlatune_shape_variable_name(handle_, 1, &name), MLATUNE_OK);
  EXPECT_STREQ(name, "COLS");
  EXPECT_EQ(mlatune_shape_variable_name(handle_, 2, &name), MLATUNE_INVALID_ARGUMENT);

  ASSERT_EQ(mlatune_buffer_count(handle_, &count), MLATUNE_OK);
  ASSERT_EQ(count, 3u);  // rows and eps are scalars: the dispatcher's
  const std::int64_t shape[2] = {7, 4095};
  const std::vector<std::tuple<std::string, int, std::uint64_t>> expected = {
      {"x", MLATUNE_INPUT, 7 * 4095}, {"w", MLATUNE_INPUT, 4095}, {"out", MLATUNE_OUTPUT, 7 * 4095}};
  for (std::size_t i = 0; i < 3; ++i) {
    int type = -1, role = -1;
    std::size_t element_bytes = 0;
    std::uint64_t elements = 0;
    ASSERT_EQ(mlatune_buffer_info(handle_, i, &name, &type, &role, &element_bytes), MLATUNE_OK);
    ASSERT_EQ(mlatune_buffer_elements(handle_, i, shape, 2, &elements), MLATUNE_OK);
    EXPECT_EQ(name, std::get<0>(expected[i]));
    EXPECT_EQ(type, MLATUNE_FLOAT32);
    EXPECT_EQ(role, std::get<1>(expected[i]));
    EXPECT_EQ(element_bytes, 4u);
    EXPECT_EQ(elements, std::get<2>(expected[i]));
  }
  EXPECT_EQ(mlatune_buffer_info(handle_, 3, &name, nullptr, nullptr, nullptr), MLATUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(mlatune_last_error(handle_)).find("the family has 3 buffers"), std::string::npos);
}

TEST_F(RmsNormCAbi, TunedAndUntunedShapesMatchTheHostsFloat64) {
  open_tuned({{"ROWS=64,COLS=4096", float4_config}, {"ROWS=5,COLS=4095", odd_config}});
  const double tolerance = space_->tolerance().relative_l2;
  const float eps = eps_of(*space_, Shape{{1, 1}});
  std::map<std::string, int> reasons;
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
      {64, 4096}, {5, 4095}, {200, 4096}, {1, 4095}, {3, 777}, {1, 8192}, {4097, 1}, {33, 5120}};
  for (const auto& [rows, cols] : shapes) {
    DeviceProblem problem(rows, cols, eps, static_cast<std::uint64_t>(rows * 131 + cols));
    const std::string chosen = choice(problem.shape());
    reasons[chosen.substr(0, chosen.find(' '))]++;
    HostError e = launch_and_compare(problem, 0);
    fmt::print("ROWS={},COLS={}: {}: relative L2 {:.3g}, max abs {:.3g}\n", rows, cols, chosen, e.relative_l2,
               e.max_abs);
    EXPECT_EQ(e.nonfinite, 0u) << rows << "x" << cols;
    EXPECT_LE(e.relative_l2, tolerance) << rows << "x" << cols << ": " << chosen;
  }
  EXPECT_EQ(reasons["hit"], 2) << "both tuned shapes are hits";
  EXPECT_GE(reasons["nearest"] + reasons["repaired"] + reasons["fallback"] + reasons["default"], 1)
      << "untuned shapes are dispatched too";
}

// The tuned FLOAT4 config given pointers 4 bytes past 16-byte alignment
// takes the kernel's scalar loop: right answers, no fault.
TEST_F(RmsNormCAbi, Float4ConfigTakesUnalignedPointers) {
  open_tuned({{"ROWS=64,COLS=4096", float4_config}});
  DeviceProblem problem(64, 4096, eps_of(*space_, Shape{{1, 1}}), 3);
  EXPECT_EQ(choice(problem.shape()).rfind(std::string("hit ") + float4_config, 0), 0u);
  for (std::size_t offset : {0u, 4u, 8u}) {
    HostError e = launch_and_compare(problem, offset);
    EXPECT_EQ(e.nonfinite, 0u) << "offset " << offset;
    EXPECT_LE(e.relative_l2, space_->tolerance().relative_l2) << "offset " << offset;
  }
}

TEST_F(RmsNormCAbi, CallsThatDoNotFitTheSpaceAreRefused) {
  open_tuned({});
  DeviceProblem problem(5, 4095, eps_of(*space_, Shape{{1, 1}}), 4);
  std::vector<const void*> buffers = problem.upload(0);
  std::vector<std::size_t> bytes = problem.bytes();
  std::vector<std::int64_t> shape = problem.shape();

  bytes[2] -= 4;  // out is one float short
  EXPECT_EQ(mlatune_launch_checked(handle_, buffers.data(), bytes.data(), 3, shape.data(), 2, nullptr),
            MLATUNE_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(mlatune_last_error(handle_)),
            fmt::format("rms_norm: buffer out (float32 output) holds {} bytes; {} needed at ROWS=5,COLS=4095",
                        5 * 4095 * 4 - 4, 5 * 4095 * 4));
  bytes[2] += 4;
  EXPECT_EQ(mlatune_launch_checked(handle_, buffers.data(), bytes.data(), 2, shape.data(), 2, nullptr),
            MLATUNE_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(mlatune_last_error(handle_)), "rms_norm takes 3 buffers; 2 given");
  EXPECT_EQ(mlatune_launch(handle_, buffers.data(), 3, shape.data(), 1, nullptr), MLATUNE_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(mlatune_last_error(handle_)), "rms_norm takes 2 shape values (ROWS, COLS); 1 given");
  const std::int64_t zero_rows[2] = {0, 4095};
  EXPECT_EQ(mlatune_launch(handle_, buffers.data(), 3, zero_rows, 2, nullptr), MLATUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(mlatune_last_error(handle_)).find("ROWS is 0"), std::string::npos);
  const void* with_null[3] = {buffers[0], nullptr, buffers[2]};
  EXPECT_EQ(mlatune_launch(handle_, with_null, 3, shape.data(), 2, nullptr), MLATUNE_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(mlatune_last_error(handle_)), "mlatune_launch: buffer 1 (w) is NULL");

  // Nothing ran: the output is still the NaN it was filled with.
  MLATUNE_CUDA(cudaDeviceSynchronize());
  std::vector<float> out = problem.download(0);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }));

  // The typed MLA entry refuses another family, naming why.
  float* any = static_cast<float*>(problem.out_d.get());
  EXPECT_EQ(mlatune_fused_mla_attention(handle_, any, any, any, any, any, 1, 1, 1, 1, 1, nullptr),
            MLATUNE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(mlatune_last_error(handle_)).find("is not the fused MLA family"), std::string::npos)
      << mlatune_last_error(handle_);

  // And a well-formed call on the same buffers runs.
  EXPECT_EQ(mlatune_launch(handle_, buffers.data(), 3, shape.data(), 2, nullptr), MLATUNE_OK)
      << mlatune_last_error(handle_);
  MLATUNE_CUDA(cudaDeviceSynchronize());
  HostError e = compare(problem.download(0), problem.expected);
  EXPECT_LE(e.relative_l2, space_->tolerance().relative_l2);
}

}  // namespace
}  // namespace mlatune
