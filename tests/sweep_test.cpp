// The sweep's summary arithmetic (where the time went: GPU worker, waiting for
// compilation, setup, NVRTC; the rates each would allow alone) and the checks
// run_sweep makes before it starts; a replayed sweep (no GPU) end to end.
#include "tuner/sweep.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "cache/store.h"
#include "core/error.h"
#include "tuner/replay.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

ShapeReport shape_with(std::size_t evaluated, int cut, double gpu_s, double wait_s, double setup_s,
                       double nvrtc_s) {
  ShapeReport s;
  s.results.resize(evaluated);
  s.cut = cut;
  s.gpu_s = gpu_s;
  s.compile_wait_s = wait_s;
  s.setup_s = setup_s;
  s.nvrtc_s = nvrtc_s;
  return s;
}

TEST(SweepTotals, PartsAddUpToTheWallAndRatesFollow) {
  SweepReport report;
  report.shapes.push_back(shape_with(100, 30, 6.0, 1.0, 0.5, 40.0));
  report.shapes.push_back(shape_with(50, 10, 3.0, 0.5, 0.5, 24.0));
  report.wall_s = 15.0;
  report.compile_threads = 16;

  SweepTotals t = sweep_totals(report);
  EXPECT_EQ(t.evaluated, 150u);
  EXPECT_EQ(t.cut, 40u);
  EXPECT_DOUBLE_EQ(t.wall_s, 15.0);
  EXPECT_DOUBLE_EQ(t.gpu_s, 9.0);
  EXPECT_DOUBLE_EQ(t.compile_wait_s, 1.5);
  EXPECT_DOUBLE_EQ(t.setup_s, 1.0);
  EXPECT_DOUBLE_EQ(t.other_s, 3.5);
  EXPECT_DOUBLE_EQ(t.gpu_s + t.compile_wait_s + t.setup_s + t.other_s, t.wall_s);
  EXPECT_DOUBLE_EQ(t.nvrtc_s, 64.0);
  EXPECT_EQ(t.compile_threads, 16u);
  ASSERT_TRUE(t.configs_per_s);
  EXPECT_DOUBLE_EQ(*t.configs_per_s, 10.0);
  ASSERT_TRUE(t.gpu_limit_configs_per_s);
  EXPECT_DOUBLE_EQ(*t.gpu_limit_configs_per_s, 150.0 / 9.0);
  // 64 s of NVRTC over 16 threads is 4 s of wall at best: 37.5 configs/s.
  ASSERT_TRUE(t.compile_limit_configs_per_s);
  EXPECT_DOUBLE_EQ(*t.compile_limit_configs_per_s, 37.5);
  ASSERT_TRUE(t.gpu_busy_fraction);
  EXPECT_DOUBLE_EQ(*t.gpu_busy_fraction, 0.6);
}

TEST(SweepTotals, NoGpuOrNoCompilationGivesNoLimit) {
  // A replayed sweep: nothing compiled, nothing ran on a GPU.
  SweepReport report;
  report.shapes.push_back(shape_with(20, 0, 0.0, 0.0, 0.0, 0.0));
  report.wall_s = 0.5;
  SweepTotals t = sweep_totals(report);
  EXPECT_EQ(t.evaluated, 20u);
  ASSERT_TRUE(t.configs_per_s);
  EXPECT_DOUBLE_EQ(*t.configs_per_s, 40.0);
  EXPECT_FALSE(t.gpu_limit_configs_per_s);
  EXPECT_FALSE(t.compile_limit_configs_per_s);
  EXPECT_DOUBLE_EQ(t.other_s, 0.5);

  // NVRTC time without a thread count (no pool) gives no compile limit.
  report.shapes[0].nvrtc_s = 3.0;
  EXPECT_FALSE(sweep_totals(report).compile_limit_configs_per_s);
}

TEST(SweepTotals, EmptySweepHasNoRates) {
  SweepTotals t = sweep_totals(SweepReport{});
  EXPECT_EQ(t.evaluated, 0u);
  EXPECT_FALSE(t.configs_per_s);
  EXPECT_FALSE(t.gpu_limit_configs_per_s);
  EXPECT_FALSE(t.compile_limit_configs_per_s);
  EXPECT_FALSE(t.gpu_busy_fraction);
  EXPECT_DOUBLE_EQ(t.other_s, 0.0);
}

TEST(SweepTotals, OtherIsNeverNegative) {
  // Separately taken clocks may sum past the wall by a hair.
  SweepReport report;
  report.shapes.push_back(shape_with(10, 0, 2.0, 0.01, 0.0, 0.0));
  report.wall_s = 2.0;
  EXPECT_DOUBLE_EQ(sweep_totals(report).other_s, 0.0);
}

class SweepReplay : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlatune_sweep_test_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
  const fs::path space_file_ = fs::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";
};

TEST_F(SweepReplay, CutoffFactorMustBeZeroOrAboveOne) {
  // Exact configs only: the recorded sweeps measured no shape-bucketed config.
  SearchSpace space = SearchSpace::load(space_file_).restrict({"SHAPE_BUCKETS == exact && ALGORITHM <= tf32x3_2k"});
  ReplayData data = ReplayData::load(fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv", space);
  SweepOptions options;
  options.shapes = {space.parse_shape("B=2,T=32,H=4,D=16,R=24")};
  options.replay = &data;
  options.replay_source = "h200_sweeps.csv";
  options.max_evals = 5;
  DeviceInfo device;
  device.name = "replay";
  device.arch = "sm_90";
  for (double bad : {0.5, 1.0, -3.0}) {
    options.cutoff_factor = bad;
    EXPECT_THROW(run_sweep(space, space_file_, dir_ / "bad.db", nullptr, device, options), InputError) << bad;
  }
  EXPECT_FALSE(fs::exists(dir_ / "bad.db"));  // refused before anything was written

  options.cutoff_factor = 0;
  SweepReport report = run_sweep(space, space_file_, dir_ / "ok.db", nullptr, device, options);
  SweepTotals totals = sweep_totals(report);
  EXPECT_EQ(totals.evaluated, 5u);
  EXPECT_EQ(totals.cut, 0u);  // replayed times are not timed: nothing to cut
  EXPECT_DOUBLE_EQ(totals.gpu_s, 0.0);
  EXPECT_DOUBLE_EQ(totals.nvrtc_s, 0.0);
  EXPECT_EQ(totals.compile_threads, 0u);
  EXPECT_FALSE(totals.compile_limit_configs_per_s);
  EXPECT_GT(totals.wall_s, 0.0);
}

}  // namespace
}  // namespace mlatune
