// Prologue kernels and workspace arguments end to end on a GPU: the family of
// tests/spaces/prologue.yaml (out = 2x + 1, where EXPAND configs compute 2x in
// a prologue into the workspace) validated against its float64 reference
// through the worker, and launched through the Dispatcher.  Every test skips
// with the reason when no GPU is usable.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "cache/dispatcher.h"
#include "cache/store.h"
#include "tests/tuned_entry.h"
#include "tests/gpu_worker.h"
#include "core/cuda.h"
#include "tuner/evaluator.h"
#include "core/space.h"
#include "tuner/support_kernels.h"
#include "tuner/worker/client.h"
#include "tuner/workload.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path space_file = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces" / "prologue.yaml";

Candidate build(const SearchSpace& space, const std::string& config_text, const Shape& shape,
                const std::string& arch) {
  Config config = space.parse_config(config_text);
  CubinBuild cubin = nvrtc_compile_cubin(space.template_text(), space.kernel().path.filename().string(),
                                         space.kernel().entry, space.definitions(config, shape), arch);
  EXPECT_TRUE(cubin.ok) << config_text << ":\n" << cubin.log;
  Candidate candidate;
  candidate.label = config_text;
  candidate.cubin = std::move(cubin.cubin);
  describe_launch(space, config, shape, candidate);
  return candidate;
}

TEST(GpuPrologue, PrologueThenMainIsValidatedAndTimedThroughTheWorker) {
  MLATUNE_REQUIRE_GPU();
  SearchSpace space = SearchSpace::load(space_file);
  const Shape shape = space.parse_shape("N=100000");
  Worker worker(worker_options());
  WorkloadRequest request{space_file, "N=100000", 42, {}};
  request.timing.budget_ms = 50;
  WorkloadInfo info = worker.set_workload(request);
  const std::string arch = info.device.arch();

  Candidate expand = build(space, "EXPAND=true,THREADS=256,PROLOGUE_THREADS=128", shape, arch);
  ASSERT_TRUE(expand.prologue.has_value());
  EXPECT_EQ(expand.prologue->entry, "double_into");
  EXPECT_EQ(expand.workspace_bytes, std::vector<std::int64_t>{400000});
  EvaluationResult with = worker.evaluate(expand);
  std::printf("with prologue: %s %s\n", to_string(with.outcome).data(), with.reason.c_str());
  EXPECT_EQ(with.outcome, Outcome::ok) << with.reason;
  ASSERT_TRUE(with.validation && with.timing);
  EXPECT_EQ(with.validation->nonfinite, 0u);

  // `when` false: the main kernel computes directly and the workspace is null.
  Candidate direct = build(space, "EXPAND=false,THREADS=64,PROLOGUE_THREADS=128", shape, arch);
  EXPECT_FALSE(direct.prologue.has_value());
  EXPECT_TRUE(direct.workspace_bytes.empty());
  EvaluationResult without = worker.evaluate(direct);
  EXPECT_EQ(without.outcome, Outcome::ok) << without.reason;
  if (with.timing && without.timing)
    std::printf("median: prologue + main %.2f us, main alone %.2f us\n", with.timing->median_us,
                without.timing->median_us);

  // The workspace is NaN on entry: a main kernel that reads it without its
  // prologue having run fails validation instead of reading stale data.
  Candidate skipped = expand;
  skipped.prologue.reset();
  EvaluationResult stale = worker.evaluate(skipped);
  EXPECT_EQ(stale.outcome, Outcome::wrong_result) << stale.reason;
  EXPECT_NE(stale.reason.find("NaN"), std::string::npos) << stale.reason;

  // Re-timing keeps each candidate's prologue and workspace.
  auto timings = worker.retime({expand, direct}, 2);
  ASSERT_EQ(timings.size(), 2u);
  EXPECT_TRUE(timings[0].has_value());
  EXPECT_TRUE(timings[1].has_value());
}

class GpuPrologueDispatch : public ::testing::Test {
 protected:
  void SetUp() override {
    GpuProbe probe = probe_gpu();
    if (!probe.usable) GTEST_SKIP() << "no GPU: " << probe.reason;
    device_ = probe.device.info();
    dir_ = fs::temp_directory_path() / ("mlatune_gpu_prologue_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    space_ = std::make_unique<SearchSpace>(SearchSpace::load(space_file));
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Makes `config` the best entry at `shape` (what a sweep would do).
  void tune(const fs::path& db, const std::string& shape, const std::string& config) {
    record_tuned_entry(db, *space_, space_file, device_, shape, config, "gpu_prologue_test",
                       Timing{10, 10, 10, 1, 0, "gpu_prologue_test (not timed)"});
  }

  DeviceInfo device_;
  fs::path dir_;
  std::unique_ptr<SearchSpace> space_;
};

TEST_F(GpuPrologueDispatch, TheDispatcherRunsThePrologueOnlyWhereItsConfigHasOne) {
  const fs::path db = dir_ / "tuned.db";
  tune(db, "N=100000", "EXPAND=true,THREADS=256,PROLOGUE_THREADS=128");
  tune(db, "N=5000", "EXPAND=false,THREADS=64,PROLOGUE_THREADS=128");
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db, space_file);

  for (const char* text : {"N=100000", "N=5000"}) {
    SCOPED_TRACE(text);
    const Shape shape = space_->parse_shape(text);
    WorkloadOptions options;
    options.seed = 7;
    options.cache = CacheMode::hot;
    options.validation_sets = 1;
    Workload workload(*space_, shape, options);
    void** args = workload.arguments(0);
    // The caller passes x and out only; the workspace is the dispatcher's.
    void* const buffers[2] = {*static_cast<void**>(args[0]), *static_cast<void**>(args[1])};
    for (int round = 0; round < 3; ++round) {  // the first launch prepares, the others hit
      workload.poison_outputs();
      dispatcher->launch_buffers(shape, buffers, 2, workload.stream().get());
      ValidationStats stats = workload.compare(0);
      EXPECT_TRUE(stats.passed) << "relative L2 " << stats.relative_l2 << ", " << stats.nonfinite
                                << " non-finite";
    }
    // The complete-list launch: the workspace entry is ignored and replaced.
    workload.poison_outputs();
    dispatcher->launch(shape, args, workload.stream().get());
    EXPECT_TRUE(workload.compare(0).passed);
    std::printf("%s: %s\n", text, dispatcher->describe(shape).text.c_str());
  }
  EXPECT_EQ(dispatcher->describe(space_->parse_shape("N=100000")).choice.config_text,
            "EXPAND=true,THREADS=256,PROLOGUE_THREADS=128");
}

}  // namespace
}  // namespace mlatune
