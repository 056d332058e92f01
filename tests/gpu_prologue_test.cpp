// Prologue kernels and workspace arguments end to end on a GPU: the family of
// tests/spaces/prologue.yaml (out = 2x + 1, where EXPAND configs compute 2x in
// a prologue into the workspace) validated against its float64 reference
// through the worker, and launched through the Dispatcher; and the same family
// with its prologue compiled apart (tests/spaces/apart.yaml), whose binaries
// are two cubins.  Every test skips with the reason when no GPU is usable.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "cache/dispatcher.h"
#include "cache/store.h"
#include "core/binary_image.h"
#include "core/compiler.h"
#include "core/launch_plan.h"
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
const fs::path apart_file = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces" / "apart.yaml";

// Sets `worker`'s workload to `file`'s family at N=100000 (seed 42, 50 ms
// of timing a candidate) and gives the architecture of its device.
std::string set_workload(Worker& worker, const fs::path& file) {
  WorkloadRequest request{file, "N=100000", 42, {}};
  request.timing.budget_ms = 50;
  return worker.set_workload(request).device.arch();
}

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
  const std::string arch = set_workload(worker, space_file);

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
  explicit GpuPrologueDispatch(fs::path file = space_file) : file_(std::move(file)) {}
  void SetUp() override {
    GpuProbe probe = probe_gpu();
    if (!probe.usable) GTEST_SKIP() << "no GPU: " << probe.reason;
    device_ = probe.device.info();
    dir_ = fs::temp_directory_path() / ("mlatune_gpu_prologue_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    space_ = std::make_unique<SearchSpace>(SearchSpace::load(file_));
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Makes `config` the best entry at `shape` (what a sweep would do).
  void tune(const fs::path& db, const std::string& shape, const std::string& config) {
    record_tuned_entry(db, *space_, file_, device_, shape, config, "gpu_prologue_test",
                       Timing{10, 10, 10, 1, 0, "gpu_prologue_test (not timed)"});
  }

  // Tunes N=100000 with an EXPAND config and N=5000 with one without, then
  // launches both shapes through a Dispatcher on `db`, each output checked
  // against the float64 reference.
  void dispatch_both_shapes(const fs::path& db) {
    tune(db, "N=100000", "EXPAND=true,THREADS=256,PROLOGUE_THREADS=128");
    tune(db, "N=5000", "EXPAND=false,THREADS=64,PROLOGUE_THREADS=128");
    std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(db, file_);

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

  fs::path file_;
  DeviceInfo device_;
  fs::path dir_;
  std::unique_ptr<SearchSpace> space_;
};

TEST_F(GpuPrologueDispatch, TheDispatcherRunsThePrologueOnlyWhereItsConfigHasOne) {
  dispatch_both_shapes(dir_ / "tuned.db");
}

// ---- the prologue compiled apart -------------------------------------------------

// A config compiled apart runs from its two-cubin image through the worker:
// the main entry is found in the first cubin, the prologue in the second, and
// the result is what the whole compile of the same config gives.  Two configs
// that share one prologue part both run with it.
TEST(GpuPrologueApart, ATwoCubinImageIsValidatedAndTimedThroughTheWorker) {
  MLATUNE_REQUIRE_GPU();
  SearchSpace space = SearchSpace::load(apart_file);
  const Shape shape = space.parse_shape("N=100000");
  Worker worker(worker_options());
  const std::string arch = set_workload(worker, apart_file);
  const Compiler compiler;

  for (const char* text : {"EXPAND=true,THREADS=256,PROLOGUE_THREADS=128",
                           "EXPAND=true,THREADS=64,PROLOGUE_THREADS=128"}) {
    SCOPED_TRACE(text);
    const Config config = space.parse_config(text);
    const LaunchPlan plan = plan_launch(space, config, shape);
    const CompileRequest apart = compile_request(space, config, shape, arch);
    ASSERT_TRUE(apart.prologue_part);
    const CompileResult split = compiler.compile(apart);
    ASSERT_TRUE(split.ok()) << split.failure().message;
    ASSERT_EQ(unpack_images(split.binary().cubin).size(), 2u);
    CompileRequest whole_request = apart;
    whole_request.prologue_part.reset();
    const CompileResult whole = compiler.compile(whole_request);
    ASSERT_TRUE(whole.ok()) << whole.failure().message;
    ASSERT_EQ(unpack_images(whole.binary().cubin).size(), 1u);

    const Candidate split_candidate = make_candidate(plan, std::string(text) + " (apart)", split.binary().cubin);
    const Candidate whole_candidate = make_candidate(plan, std::string(text) + " (whole)", whole.binary().cubin);
    ASSERT_TRUE(split_candidate.prologue.has_value());
    const EvaluationResult a = worker.evaluate(split_candidate);
    const EvaluationResult w = worker.evaluate(whole_candidate);
    EXPECT_EQ(a.outcome, Outcome::ok) << a.reason;
    EXPECT_EQ(w.outcome, Outcome::ok) << w.reason;
    ASSERT_TRUE(a.validation && w.validation && a.timing && w.timing);
    EXPECT_EQ(a.validation->nonfinite, 0u);
    EXPECT_EQ(a.validation->relative_l2, w.validation->relative_l2);  // the same code, the same result
    std::printf("%s: apart %.2f us, whole %.2f us (medians)\n", text, a.timing->median_us,
                w.timing->median_us);

    // Without its prologue the main part reads the NaN workspace: the
    // prologue that made the result above ran from the second cubin.
    Candidate skipped = split_candidate;
    skipped.prologue.reset();
    const EvaluationResult stale = worker.evaluate(skipped);
    EXPECT_EQ(stale.outcome, Outcome::wrong_result) << stale.reason;
  }
  EXPECT_EQ(compiler.prologue_parts().compiled, 1u);
  EXPECT_EQ(compiler.prologue_parts().reused, 1u);
}

class GpuPrologueApartDispatch : public GpuPrologueDispatch {
 protected:
  GpuPrologueApartDispatch() : GpuPrologueDispatch(apart_file) {}
};

// The dispatcher compiles the EXPAND config apart, stores its two-cubin
// image and launches it; a second dispatcher loads that image from the store.
TEST_F(GpuPrologueApartDispatch, TheDispatcherLoadsAndStoresTwoCubinImages) {
  const fs::path db = dir_ / "tuned.db";
  dispatch_both_shapes(db);
  {
    Store store = Store::open(db, StoreMode::read_only);
    std::vector<std::size_t> cubins;
    for (const Store::StoredBinary& stored : store.binaries_of(space_->kernel_name())) {
      const std::optional<BinaryRecord> record = store.get_binary(stored.key);
      ASSERT_TRUE(record.has_value());
      cubins.push_back(
          unpack_images(std::string_view(reinterpret_cast<const char*>(record->cubin.data()), record->cubin.size()))
              .size());
    }
    std::sort(cubins.begin(), cubins.end());
    EXPECT_EQ(cubins, (std::vector<std::size_t>{1, 2})) << "one whole binary (N=5000) and one apart (N=100000)";
  }
  // A fresh dispatcher reads both binaries back from the store and launches them.
  dispatch_both_shapes(db);
}

}  // namespace
}  // namespace mlatune
