// mlatune cache warm without a GPU: the range syntax, the probe shapes, and a
// warm-up against a test store (binaries compiled for sm_90 and stored; a
// second warm-up compiles nothing; every shape of the box then finds its
// binary stored).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "cache/dispatch_index.h"
#include "cache/store.h"
#include "core/error.h"
#include "core/space.h"
#include "tests/run_program.h"
#include "tuner/shape_box.h"
#include "tuner/warm.h"
#include "tuner/warm_probes.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path spaces_dir = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";
const DeviceInfo h200{"NVIDIA H200", "sm_90", 132, 150'000'000'000, "13.0", 52'428'800, 232'448};
const char* const vector_config = "THREADS=64,ITEMS=4,VECTOR=true";
const char* const wide_config = "THREADS=32,ITEMS=2,VECTOR=false";

class WarmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlatune_warm_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = dir_ / "test.db";
    space_ = std::make_unique<SearchSpace>(SearchSpace::load(spaces_dir / "warm.yaml"));
  }
  void TearDown() override { fs::remove_all(dir_); }

  void tune(const std::string& shape, const std::string& config, double median_us) {
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

  Config config(const char* text) const { return space_->parse_config(text); }
  Shape shape(const char* text) const { return space_->parse_shape(text); }

  fs::path dir_;
  fs::path db_;
  std::unique_ptr<SearchSpace> space_;
};

TEST_F(WarmTest, RangeParsesWithEitherSeparatorAndPrintsBack) {
  ShapeBox box = parse_shape_box(*space_, " M=4 ; N=1..1000");
  EXPECT_EQ(box.low, (std::vector<std::int64_t>{1, 4}));
  EXPECT_EQ(box.high, (std::vector<std::int64_t>{1000, 4}));
  EXPECT_EQ(box.text(*space_), "N=1..1000;M=4");
  EXPECT_EQ(box.size(), 1000u);
  EXPECT_TRUE(box.contains(shape("N=1000,M=4")));
  EXPECT_FALSE(box.contains(shape("N=1001,M=4")));
  EXPECT_EQ(parse_shape_box(*space_, "N=2..3,M=1..2").size(), 4u);
}

TEST_F(WarmTest, RangeRefusesWhatIsWrong) {
  auto message = [&](const char* text) {
    try {
      parse_shape_box(*space_, text);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("N=1..10").find("no range for shape variable M"), std::string::npos);
  EXPECT_NE(message("N=1..10;M=1;K=3").find("K is not a shape variable"), std::string::npos);
  EXPECT_NE(message("N=10..1;M=1").find("high end is below"), std::string::npos);
  EXPECT_NE(message("N=0..4;M=1").find("not a positive integer"), std::string::npos);
  EXPECT_NE(message("N=1..x;M=1").find("not a positive integer"), std::string::npos);
  EXPECT_NE(message("N=1;N=2;M=1").find("given twice"), std::string::npos);
  EXPECT_NE(message("N;M=1").find("expected NAME=LOW..HIGH"), std::string::npos);
}

// N: the vector config's constraint N >= 64 * ITEMS flips at 256, and the
// nearest tuned N changes after 300 (the geometric middle of 100 and 900);
// M: compiled, so every value is its own binary.
TEST_F(WarmTest, ProbesCoverEveryClassOfEveryVariable) {
  ShapeBox box = parse_shape_box(*space_, "N=1..1000;M=1..12");
  std::vector<Config> candidates{config(vector_config), space_->default_config()};
  std::vector<Shape> tuned{shape("N=100,M=8"), shape("N=900,M=8"), shape("N=5000,M=8")};
  ProbePlan plan = plan_probes(*space_, box, candidates, tuned);
  ASSERT_EQ(plan.variables.size(), 2u);
  EXPECT_EQ(plan.variables[0].values, (std::vector<std::int64_t>{1, 256, 301, 1000}));
  std::vector<std::int64_t> every_m(12);
  for (int m = 1; m <= 12; ++m) every_m[m - 1] = m;
  EXPECT_EQ(plan.variables[1].values, every_m);
  EXPECT_EQ(plan.product, 48u);
  ASSERT_EQ(plan.tuned_inside.size(), 2u);  // N=5000 lies outside
  EXPECT_EQ(plan.count(), 50u);
  std::set<Shape> shapes;
  for (std::uint64_t i = 0; i < plan.count(); ++i) {
    EXPECT_TRUE(box.contains(plan.shape(i)));
    shapes.insert(plan.shape(i));
  }
  EXPECT_EQ(shapes.size(), 50u);
  EXPECT_EQ(plan.shape(0), shape("N=1,M=1"));
  EXPECT_EQ(plan.shape(13), shape("N=256,M=2"));
}

TEST_F(WarmTest, ProbesAreBounded) {
  ShapeBox box = parse_shape_box(*space_, "N=1..1000;M=1..12");
  try {
    plan_probes(*space_, box, {space_->default_config(), config(vector_config)}, {shape("N=100,M=8")}, 30);  // 3 x 12 + 1 = 37 probes
    FAIL() << "a plan over the bound was accepted";
  } catch (const InputError& e) {
    std::string text = e.what();
    EXPECT_NE(text.find("M: 12"), std::string::npos) << text;
    EXPECT_NE(text.find("bound of 30"), std::string::npos) << text;
    EXPECT_NE(text.find("N: 3,"), std::string::npos) << text;
  }
}

TEST_F(WarmTest, WarmStoresEveryChosenBinaryAndIsIdempotent) {
  tune("N=300,M=8", vector_config, 5.0);  // valid there (N >= 256): a hit
  tune("N=900,M=8", wide_config, 7.0);
  const WarmOptions options{parse_shape_box(*space_, "N=1..1000;M=6..9"), 2};
  WarmReport first;
  {
    Store store = Store::open(db_);
    DispatchIndex index = DispatchIndex::build(store, *space_, DispatchTarget{h200, ToolchainInfo::current()});
    first = warm(store, index, options);
  }
  EXPECT_EQ(first.failed, 0u) << first.first_failure;
  EXPECT_GT(first.compiled, 0u);
  EXPECT_EQ(first.compiled + first.already_stored, first.plan.binaries.size());
  EXPECT_EQ(first.plan.reasons.count(ChoiceReason::hit), 1u);

  Store store = Store::open(db_);
  DispatchIndex index = DispatchIndex::build(store, *space_, DispatchTarget{h200, ToolchainInfo::current()});
  WarmReport second = warm(store, index, options);
  EXPECT_EQ(second.compiled, 0u);
  EXPECT_EQ(second.already_stored, first.plan.binaries.size());

  // Every shape of the box, not only the probes, finds its binary stored.
  std::set<std::string> missing;
  for (std::int64_t m = 6; m <= 9; ++m)
    for (std::int64_t n = 1; n <= 1000; ++n) {
      Choice choice = index.choose(Shape{{n, m}});
      ASSERT_TRUE(choice.ok());
      if (!index.stored_binary(store, choice)) missing.insert(space_->shape_string(Shape{{n, m}}));
    }
  EXPECT_TRUE(missing.empty()) << missing.size() << " shapes without a stored binary, e.g. " << *missing.begin();

  std::vector<WarmRange> ranges = store.warm_ranges();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].range, "N=1..1000;M=6..9");
  EXPECT_EQ(ranges[0].arch, "sm_90");
  EXPECT_EQ(ranges[0].binaries, static_cast<std::int64_t>(first.plan.binaries.size()));
  EXPECT_EQ(ranges[0].kernel_name, "warm_toy");
}

TEST_F(WarmTest, DatabaseWithoutWarmRangesReadsAsNone) {
  tune("N=100,M=8", vector_config, 5.0);
  Store store = Store::open(db_, StoreMode::read_only);
  EXPECT_TRUE(store.warm_ranges().empty());
}

TEST_F(WarmTest, CommandWarmsAndInfoShowsTheRange) {
  const fs::path cli = fs::path(MLATUNE_BINARY_DIR) / "mlatune";
  if (!fs::exists(cli)) GTEST_SKIP() << "the mlatune program is not built at " << cli;
  tune("N=300,M=8", vector_config, 5.0);
  auto run = [&](std::vector<std::string> args) { return test_support::run_program(cli, args, dir_); };
  auto warmed = run({"cache", "warm", "--db", db_.string(), "--space", (spaces_dir / "warm.yaml").string(),
                     "--range", "N=1..500;M=8", "--arch", "sm_90", "-q"});
  ASSERT_EQ(warmed.code, 0) << warmed.err;
  EXPECT_NE(warmed.out.find("warmed warm_toy for sm_90 (NVIDIA H200) over N=1..500;M=8"), std::string::npos)
      << warmed.out;
  EXPECT_NE(warmed.out.find("failed             0"), std::string::npos) << warmed.out;
  auto again = run({"cache", "--db", db_.string(), "warm", "--space", (spaces_dir / "warm.yaml").string(),
                    "--range", "N=1..500;M=8", "--arch", "sm_90", "-q"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("compiled           0"), std::string::npos) << again.out;
  auto info = run({"cache", "info", "--db", db_.string()});
  ASSERT_EQ(info.code, 0) << info.err;
  EXPECT_NE(info.out.find("warm range      warm_toy sm_90"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("N=1..500;M=8"), std::string::npos) << info.out;
  auto too_wide = run({"cache", "warm", "--db", db_.string(), "--space", (spaces_dir / "warm.yaml").string(),
                       "--range", "N=1..500;M=1..64", "--arch", "sm_90", "--max-probes", "10"});
  EXPECT_EQ(too_wide.code, 2) << too_wide.err;
  EXPECT_NE(too_wide.err.find("more than the bound of 10"), std::string::npos) << too_wide.err;
}

}  // namespace
}  // namespace mlatune
