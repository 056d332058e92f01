// mlatune cache regret without a GPU: a store filled by the test with known
// times, so every regret is known in advance.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cache/store.h"
#include "core/error.h"
#include "core/space.h"
#include "tests/run_program.h"
#include "tuner/selector_regret.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path spaces_dir = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";
const DeviceInfo h200{"NVIDIA H200", "sm_90", 132, 150'000'000'000, "13.0", 52'428'800, 232'448};
const char* const plain = "THREADS=128,ITEMS=1,VECTOR=false";  // the default
const char* const wide = "THREADS=32,ITEMS=2,VECTOR=false";    // valid from N = 128

class SelectorRegretTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlatune_regret_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = dir_ / "test.db";
    space_ = std::make_unique<SearchSpace>(SearchSpace::load(spaces_dir / "warm.yaml"));
    // Tuned at N = 100, 250, 400, 1000 (M = 8); best: plain, plain, wide, plain.
    measure("N=100,M=8", plain, 4.0);
    measure("N=250,M=8", plain, 10.0);
    measure("N=250,M=8", wide, 15.0);
    measure("N=400,M=8", wide, 8.0);
    measure("N=400,M=8", plain, 9.0);
    measure("N=1000,M=8", plain, 20.0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void measure(const std::string& shape, const std::string& config, double median_us) {
    Store store = Store::open(db_);
    std::int64_t kernel = store.ensure_kernel({space_->kernel_name(), space_->template_hash(), space_->definition_hash()});
    std::int64_t device = store.ensure_device(h200);
    std::int64_t toolchain = store.ensure_toolchain(ToolchainInfo::current());
    std::int64_t run = store.begin_run(RunInfo{kernel, device, toolchain, "warm.yaml", space_->text(), "test", "{}"});
    Measurement m;
    m.run_id = run;
    m.shape = space_->shape_string(space_->parse_shape(shape));
    m.config = space_->config_string(space_->parse_config(config));
    m.timing = Timing{median_us, median_us, median_us, 10, 0.0, "test"};
    store.record(m);
    store.finish_run(run, RunStatus::finished);
  }

  fs::path dir_;
  fs::path db_;
  std::unique_ptr<SearchSpace> space_;
};

// every:2 holds out N=250 and N=1000.  At 250 the nearest kept shape is 400
// (log distance 0.47 against 0.92), whose best is wide: 15 / 10 = 1.5.  At
// 1000 it is wide again, never measured there.
TEST_F(SelectorRegretTest, EveryOtherShapeHeldOut) {
  RegretReport report = selector_regret(db_, *space_, h200, parse_holdout_every("every:2"));
  EXPECT_EQ(report.tuned, 4u);
  EXPECT_EQ(report.kept, 2u);
  ASSERT_EQ(report.rows.size(), 2u);
  const RegretRow& at250 = report.rows[0];
  EXPECT_EQ(space_->shape_string(at250.shape), "N=250,M=8");
  EXPECT_EQ(at250.choice.reason, ChoiceReason::nearest);
  EXPECT_EQ(at250.choice.config_text, space_->config_string(space_->parse_config(wide)));
  EXPECT_DOUBLE_EQ(at250.best_us, 10.0);
  ASSERT_TRUE(at250.regret());
  EXPECT_DOUBLE_EQ(*at250.regret(), 1.5);
  const RegretRow& at1000 = report.rows[1];
  EXPECT_EQ(space_->shape_string(at1000.shape), "N=1000,M=8");
  EXPECT_FALSE(at1000.chosen_us);
  EXPECT_FALSE(at1000.regret());
  EXPECT_EQ(report.overall.rows, 2u);
  EXPECT_EQ(report.overall.measured, 1u);
  EXPECT_DOUBLE_EQ(report.overall.geomean, 1.5);
  EXPECT_DOUBLE_EQ(report.overall.worst, 1.5);
  EXPECT_EQ(report.by_reason.at(ChoiceReason::nearest).rows, 2u);

  Store store = Store::open(db_, StoreMode::read_only);
  EXPECT_EQ(store.all_best().size(), 4u) << "the analysis must not change the database";
}

// Holding out N=400 alone: the nearest kept shape is 250 (plain), measured
// at 400 in 9 us against the best 8: 1.125.  Without 400's best entry the
// dispatcher cannot have hit.
TEST_F(SelectorRegretTest, GivenShapesHeldOut) {
  Holdout holdout{0, {space_->parse_shape("N=400,M=8")}};
  RegretReport report = selector_regret(db_, *space_, h200, holdout);
  ASSERT_EQ(report.rows.size(), 1u);
  EXPECT_EQ(report.rows[0].choice.reason, ChoiceReason::nearest);
  ASSERT_TRUE(report.rows[0].regret());
  EXPECT_DOUBLE_EQ(*report.rows[0].regret(), 1.125);
  EXPECT_EQ(report.kept, 3u);
}

TEST_F(SelectorRegretTest, RefusesWhatIsWrong) {
  EXPECT_THROW(parse_holdout_every("every:0"), InputError);
  EXPECT_THROW(parse_holdout_every("half"), InputError);
  EXPECT_THROW(parse_holdout_every("every:2x"), InputError);
  Holdout untuned{0, {space_->parse_shape("N=7,M=8")}};
  EXPECT_THROW(selector_regret(db_, *space_, h200, untuned), InputError);
  DeviceInfo other = h200;
  other.name = "NVIDIA A100";
  EXPECT_THROW(selector_regret(db_, *space_, other, parse_holdout_every("every:2")), InputError);
}

TEST_F(SelectorRegretTest, ShapeFileSkipsCommentsAndNamesBadLines) {
  const fs::path file = dir_ / "held.txt";
  std::ofstream(file) << "# held out\nN=400,M=8   # mid\n\nM=8, N=100\n";
  std::vector<Shape> shapes = read_shape_file(*space_, file);
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(space_->shape_string(shapes[1]), "N=100,M=8");
  std::ofstream(file) << "N=400,M=8\nN=4\n";
  try {
    read_shape_file(*space_, file);
    FAIL() << "a bad line was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("held.txt:2:"), std::string::npos) << e.what();
  }
}

TEST_F(SelectorRegretTest, CommandReportsAndWritesUnmeasuredConfigs) {
  const fs::path cli = fs::path(MLATUNE_BINARY_DIR) / "mlatune";
  if (!fs::exists(cli)) GTEST_SKIP() << "the mlatune program is not built at " << cli;
  const fs::path out = dir_ / "unmeasured";
  auto result = test_support::run_program(
      cli, {"cache", "regret", "--db", db_.string(), "--space", (spaces_dir / "warm.yaml").string(), "--holdout",
            "every:2", "--unmeasured-out", out.string()},
      dir_);
  ASSERT_EQ(result.code, 0) << result.err;
  EXPECT_NE(result.out.find("regret: 2 shape(s), 1 measured: geomean 1.500, worst 1.500 at N=250,M=8"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("N=1000,M=8  nearest"), std::string::npos) << result.out;
  EXPECT_EQ(test_support::read_file(out / "1.configs"), space_->config_string(space_->parse_config(wide)) + "\n");
  EXPECT_NE(test_support::read_file(out / "tune-commands.sh").find("--shape 'N=1000,M=8' --configs-file"),
            std::string::npos);
}

}  // namespace
}  // namespace mlatune
