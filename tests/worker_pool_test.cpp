// Several worker processes fed from one queue (tuner/worker/pool.h), without
// a GPU: fake workers (tests/fake_gpu_worker_main.cpp) pretend to be GPUs,
// one per lane through CUDA_VISIBLE_DEVICES, so that the work queue, the
// replacement of one crashed or hung worker while the others go on, and a
// whole sweep over two workers (same results, in the same order, as over
// one) are tested everywhere.
#include "tuner/worker/pool.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>

#include <gtest/gtest.h>

#include "core/error.h"
#include "tuner/measurement_source.h"
#include "tuner/strategy.h"
#include "tuner/sweep.h"
#include "tuner/worker/gpus.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

/// Lanes of fake GPUs 0..n-1, with these settings of the fake worker.
std::vector<PoolLane> fake_lanes(int n, std::vector<std::string> settings = {}, double timeout_s = 10.0) {
  WorkerOptions base;
  base.executable = MLATUNE_FAKE_GPU_WORKER;
  base.timeout_floor_s = timeout_s;
  base.environment = std::move(settings);
  std::vector<int> ordinals;
  for (int i = 0; i < n; ++i) ordinals.push_back(i);
  return gpu_lanes(ordinals, base, nullptr);
}

void set_up_workloads(WorkerPool& pool) {
  WorkloadRequest request{"/nonexistent/fake.yaml", "N=1", 7, {}};
  pool.on_each([&](Worker& worker, std::size_t) { worker.set_workload(request); });
}

Candidate candidate(std::string label) {
  Candidate c;
  c.label = std::move(label);
  return c;
}

/// Evaluations run through a pool: each one's result and lane.
struct Runs {
  std::mutex mutex;
  std::map<std::string, EvaluationResult> results;
  std::map<std::string, std::size_t> lanes;
  std::vector<std::string> finished;  // in the order they finished

  WorkerPool::Task evaluation(std::string label) {
    return [this, label](Worker& worker, std::size_t lane) {
      EvaluationResult result = worker.evaluate(candidate(label));
      std::lock_guard lock(mutex);
      results[label] = result;
      lanes[label] = lane;
      finished.push_back(label);
    };
  }
  std::size_t on_lane(std::size_t lane) {
    std::size_t n = 0;
    for (const auto& [label, l] : lanes) n += l == lane;
    return n;
  }
};

int replacements(WorkerPool& pool) {
  std::atomic<int> total = 0;
  pool.on_each([&](Worker& worker, std::size_t) { total += worker.replacements(); });
  return total;
}

void wait_all(std::vector<std::future<void>>& done) {
  for (auto& f : done) f.get();
}

TEST(WorkerPool, AFreeLaneTakesTheNextJobSoASlowGpuHoldsNoOneUp) {
  WorkerPool pool(fake_lanes(2, {"MLATUNE_FAKE_DELAY_MS=10", "MLATUNE_FAKE_SLOW_GPU=1"}));
  set_up_workloads(pool);
  pool.open(1);
  Runs runs;
  std::vector<std::future<void>> done;
  for (int i = 0; i < 30; ++i) done.push_back(pool.submit(1, runs.evaluation("c" + std::to_string(i))));
  wait_all(done);
  ASSERT_EQ(runs.results.size(), 30u);
  for (const auto& [label, result] : runs.results) EXPECT_EQ(result.outcome, Outcome::ok) << label;
  // GPU 1 is five times slower: it takes fewer, but not none.
  EXPECT_GT(runs.on_lane(0), runs.on_lane(1));
  EXPECT_GE(runs.on_lane(1), 1u);
}

TEST(WorkerPool, JobsWaitForTheirBatchAndLaneWorkGoesFirst) {
  WorkerPool pool(fake_lanes(2));
  set_up_workloads(pool);
  Runs runs;
  std::future<void> later = pool.submit(2, runs.evaluation("later"));
  pool.open(1);
  EXPECT_EQ(later.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  // Work for one lane runs while the batch is still closed.
  std::size_t ran_on = 99;
  pool.on_lane(1, [&](Worker&, std::size_t lane) { ran_on = lane; });
  EXPECT_EQ(ran_on, 1u);
  pool.open(2);
  later.get();
  EXPECT_EQ(runs.results.at("later").outcome, Outcome::ok);
}

TEST(WorkerPool, OnEachRethrowsTheFirstLanesError) {
  WorkerPool pool(fake_lanes(3));
  std::atomic<int> ran = 0;
  EXPECT_THROW(pool.on_each([&](Worker&, std::size_t lane) {
    ++ran;
    if (lane == 1) throw InputError("lane 1 says no");
  }),
               InputError);
  EXPECT_EQ(ran, 3);  // the others ran all the same
}

TEST(WorkerPool, ACrashTakesDownOnlyItsWorkerWhichIsReplaced) {
  WorkerPool pool(fake_lanes(2, {"MLATUNE_FAKE_CRASH=boom", "MLATUNE_FAKE_DELAY_MS=5"}));
  set_up_workloads(pool);
  pool.open(1);
  Runs runs;
  std::vector<std::future<void>> done;
  for (int i = 0; i < 12; ++i) done.push_back(pool.submit(1, runs.evaluation(i == 3 ? "boom" : "c" + std::to_string(i))));
  wait_all(done);
  EXPECT_EQ(runs.results.at("boom").outcome, Outcome::crashed);
  for (const auto& [label, result] : runs.results) {
    if (label == "boom") continue;
    EXPECT_EQ(result.outcome, Outcome::ok) << label << ": " << result.reason;
  }
  EXPECT_EQ(replacements(pool), 1);
}

TEST(WorkerPool, AHangTimesOutOnItsLaneWhileTheOtherGoesOn) {
  WorkerPool pool(fake_lanes(2, {"MLATUNE_FAKE_HANG=stuck", "MLATUNE_FAKE_DELAY_MS=5"}, 1.5));
  set_up_workloads(pool);
  pool.open(1);
  Runs runs;
  std::vector<std::future<void>> done;
  done.push_back(pool.submit(1, runs.evaluation("stuck")));
  for (int i = 0; i < 10; ++i) done.push_back(pool.submit(1, runs.evaluation("c" + std::to_string(i))));
  wait_all(done);
  EXPECT_EQ(runs.results.at("stuck").outcome, Outcome::timeout);
  // The ten others (at most 15 ms each) were done on the other lane before
  // the hung one's 1.5 s ran out.
  EXPECT_EQ(runs.finished.back(), "stuck");
  const std::size_t stuck_lane = runs.lanes.at("stuck");
  EXPECT_EQ(runs.on_lane(stuck_lane == 0 ? 1 : 0), 10u);
  // Its next request starts a fresh worker, with the lane's workload.
  pool.on_lane(stuck_lane, runs.evaluation("after"));
  EXPECT_EQ(runs.results.at("after").outcome, Outcome::ok);
  EXPECT_EQ(replacements(pool), 1);
}

TEST(WorkerPool, LanesSeeTheirOwnGpuAndDifferentModelsAreRefused) {
  WorkerPool same(fake_lanes(2));
  const DeviceInfo device = common_device(probe_lanes(same), {"GPU 0", "GPU 1"});
  EXPECT_EQ(device.name, "Fake GPU");

  WorkerPool mixed(fake_lanes(2, {"MLATUNE_FAKE_GPU_NAMES=Fake A,Fake B"}));
  const std::vector<DeviceReport> reports = probe_lanes(mixed);
  EXPECT_EQ(reports[0].device.name, "Fake A");
  EXPECT_EQ(reports[1].device.name, "Fake B");
  EXPECT_EQ(reports[0].device_count, 2);
  try {
    common_device(reports, {"GPU 0", "GPU 1"});
    FAIL() << "two models were accepted as one device";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("different models"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("GPU 1: Fake B"), std::string::npos) << error.what();
  }
}

// ---- a whole sweep over fake GPUs ------------------------------------------------

class FakeGpuSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlatune_worker_pool_test_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  /// A sweep of the faults space's 128-thread configs on `gpus` fake GPUs.
  SweepReport sweep(int gpus, const std::string& db, std::vector<std::string> settings, const char* strategy,
                    std::optional<std::uint64_t> max_evals, std::vector<std::string> shapes = {"N=4096"}) {
    const SearchSpace space = SearchSpace::load(space_file_);
    const SearchSpace candidates = space.restrict({"THREADS == 128"});
    auto pool = std::make_unique<WorkerPool>(fake_lanes(gpus, std::move(settings)));
    std::vector<std::string> labels;
    for (std::size_t i = 0; i < pool->size(); ++i) labels.push_back(pool->label(i));
    const DeviceInfo device = common_device(probe_lanes(*pool), labels);
    SweepOptions options;
    for (const std::string& shape : shapes) options.shapes.push_back(space.parse_shape(shape));
    options.arch = "sm_90";
    options.jobs = 2;
    options.strategy = parse_strategy_kind(strategy);
    options.max_evals = max_evals;
    options.seed = 11;
    options.candidates = &candidates;
    auto source = gpu_measurements(space, space_file_, {dir_ / db, "sm_90", 2}, options.timing, std::move(pool));
    return run_sweep(space, space_file_, dir_ / db, *source, device, options);
  }

  fs::path dir_;
  const fs::path space_file_ = fs::path(MLATUNE_TEST_DATA_DIR) / "faults" / "faults.yaml";
};

std::vector<std::string> result_lines(const ShapeReport& s) {
  std::vector<std::string> lines;
  for (const CandidateReport& c : s.results)
    lines.push_back(c.config + " " + std::string(to_string(c.outcome)) + " " +
                    (c.timing ? std::to_string(c.timing->median_us) : std::string("-")));
  return lines;
}

TEST_F(FakeGpuSweep, TwoWorkersGiveOneWorkersResultsInTheSameOrder) {
  // Results come in out of order (1 to 3 x 20 ms each); an adaptive strategy
  // must see them in the order it proposed them all the same.
  const std::vector<std::string> settings = {"MLATUNE_FAKE_DELAY_MS=20"};
  const SweepReport one = sweep(1, "one.db", settings, "annealing", 9);
  const SweepReport two = sweep(2, "two.db", settings, "annealing", 9);
  ASSERT_EQ(one.shapes.size(), 1u);
  ASSERT_EQ(two.shapes.size(), 1u);
  EXPECT_EQ(result_lines(two.shapes[0]), result_lines(one.shapes[0]));
  EXPECT_EQ(two.shapes[0].results.size(), 9u);
  EXPECT_EQ(two.shapes[0].best_config, one.shapes[0].best_config);
  ASSERT_EQ(two.workers.size(), 2u);
  EXPECT_EQ(two.workers[0].label, "GPU 0");
  EXPECT_EQ(two.workers[0].evaluated + two.workers[1].evaluated, 9u);
  EXPECT_GT(two.workers[1].evaluated, 0u);
  const SweepTotals totals = sweep_totals(two);
  EXPECT_EQ(totals.workers, 2u);
  ASSERT_EQ(totals.per_worker.size(), 2u);
  ASSERT_TRUE(totals.per_worker[1].busy_fraction);
  EXPECT_GT(*totals.per_worker[1].busy_fraction, 0.0);
  EXPECT_LE(*totals.gpu_busy_fraction, 1.0);
}

TEST_F(FakeGpuSweep, ACrashingConfigIsRecordedAndTheSweepGoesOn) {
  const SweepReport report = sweep(2, "crash.db", {"MLATUNE_FAKE_CRASH=MODE=trap"}, "brute_force", std::nullopt);
  ASSERT_EQ(report.shapes.size(), 1u);
  const ShapeReport& s = report.shapes[0];
  EXPECT_EQ(s.results.size(), s.valid_configs);
  for (const CandidateReport& c : s.results) {
    const bool trap = c.config.find("MODE=trap") != std::string::npos;
    if (c.outcome == Outcome::compile_error) continue;
    EXPECT_EQ(c.outcome, trap ? Outcome::crashed : Outcome::ok) << c.config << ": " << c.reason;
  }
  EXPECT_EQ(report.worker_replacements, 1);
  EXPECT_TRUE(s.best_config);
}

// Two shapes: the second's candidates compile while the first's last are
// timed, yet each candidate runs against its own shape's workload (its grid,
// N / 128 blocks, says which), on every GPU.
TEST_F(FakeGpuSweep, TheNextShapeCompilesAheadButRunsOnlyAgainstItsOwnWorkload) {
  const fs::path log = dir_ / "fake.log";
  const SweepReport report = sweep(2, "two_shapes.db", {"MLATUNE_FAKE_DELAY_MS=20", "MLATUNE_FAKE_LOG=" + log.string()},
                                   "brute_force", std::nullopt, {"N=4096", "N=65536"});
  ASSERT_EQ(report.shapes.size(), 2u);
  EXPECT_EQ(report.shapes[0].prepared_ahead, 0u);
  EXPECT_GT(report.shapes[1].prepared_ahead, 0u);
  const std::map<std::string, std::string> grid_of = {{"N=4096", "32"}, {"N=65536", "512"}};
  std::map<std::string, std::string> workload;  // gpu -> its workload's shape
  std::map<std::string, int> evaluations;       // shape -> evaluations run against it
  std::ifstream in(log);
  std::string gpu, what, value;
  while (in >> gpu >> what >> value) {
    if (what == "workload") {
      workload[gpu] = value;
      continue;
    }
    ASSERT_EQ(what, "grid");
    ASSERT_TRUE(workload.count(gpu)) << "GPU " << gpu << " evaluated before any workload";
    EXPECT_EQ(value, grid_of.at(workload[gpu])) << "a candidate ran against " << workload[gpu] << "'s workload";
    ++evaluations[workload[gpu]];
    std::string label;
    std::getline(in, label);
  }
  for (const ShapeReport& s : report.shapes) {
    EXPECT_EQ(s.results.size(), s.valid_configs) << s.shape;
    int ran = 0;
    for (const CandidateReport& c : s.results) ran += c.outcome == Outcome::ok || c.outcome == Outcome::wrong_result;
    EXPECT_GE(evaluations[s.shape], ran) << s.shape;
    EXPECT_GT(ran, 0) << s.shape;
  }
}

}  // namespace
}  // namespace mlatune
