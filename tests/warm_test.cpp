// mlatune cache warm without a GPU: the range syntax, the binaries each config
// needs (one per compiled value it can run; none planned for a config that
// compiles a variable exactly over a wide range), and warm-ups against test
// stores (binaries compiled for sm_90 and stored; a second warm-up compiles
// nothing; the coverage check finds the shapes where nothing warmed runs).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "cache/dispatch_index.h"
#include "cache/dispatcher.h"
#include "cache/store.h"
#include "core/error.h"
#include "core/launch_plan.h"
#include "core/space.h"
#include "tests/run_program.h"
#include "tuner/warm_coverage.h"
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

// M is compiled exactly: one binary per value; the vector config runs only
// where M % 4 == 0, and ITEMS=4 only where N >= 256 (the representative
// must find such an N).
TEST_F(WarmTest, ConfigNeedsOneBinaryPerCompiledValueItCanRun) {
  const ShapeBox box = parse_shape_box(*space_, "N=1..1000;M=1..12");
  ConfigBinaries plain = plan_config_binaries(*space_, box, space_->default_config());
  EXPECT_TRUE(plain.warmable);
  EXPECT_EQ(plain.tuples, 12u);
  EXPECT_EQ(plain.varying, std::vector<std::string>{"M"});
  EXPECT_EQ(plain.never_valid, 0u);
  std::set<std::int64_t> ms;
  for (const Shape& s : plain.shapes) {
    EXPECT_TRUE(box.contains(s));
    ms.insert(s.values[1]);
  }
  EXPECT_EQ(ms.size(), 12u);

  ConfigBinaries vector = plan_config_binaries(*space_, box, config(vector_config));
  EXPECT_EQ(vector.tuples, 12u);
  EXPECT_EQ(vector.never_valid, 9u);
  ASSERT_EQ(vector.shapes.size(), 3u);
  for (const Shape& s : vector.shapes) {
    EXPECT_EQ(s.values[1] % 4, 0);
    EXPECT_GE(s.values[0], 256);
    EXPECT_TRUE(space_->check(config(vector_config), s).valid);
  }
}

TEST_F(WarmTest, ExactCompiledVariableOverAWideRangeIsNotWarmable) {
  const ShapeBox box = parse_shape_box(*space_, "N=1..1000;M=1..1000");
  ConfigBinaries exact = plan_config_binaries(*space_, box, space_->default_config(), 64);
  EXPECT_FALSE(exact.warmable);
  EXPECT_EQ(exact.tuples, 1000u);
  EXPECT_EQ(exact.varying, std::vector<std::string>{"M"});
  EXPECT_TRUE(exact.shapes.empty());
}

// The planner only sees compiled values through CompiledValues: a bucket-like
// value (ceil(M / 16) * 16) needs one binary per bucket, with a
// representative inside each.
TEST_F(WarmTest, BucketLikeValueNeedsOneBinaryPerBucket) {
  const ShapeBox box = parse_shape_box(*space_, "N=1..1000;M=1..100");
  CompiledValues buckets = [](const Config&, const Shape& s) -> std::optional<std::vector<std::string>> {
    return std::vector<std::string>{std::to_string((s.values[1] + 15) / 16 * 16)};
  };
  ConfigBinaries plan = plan_config_binaries(*space_, box, space_->default_config(), 64, buckets);
  EXPECT_TRUE(plan.warmable);
  EXPECT_EQ(plan.tuples, 7u);  // 16, 32, ..., 112
  std::set<std::string> seen;
  for (const Shape& s : plan.shapes) seen.insert((*buckets(space_->default_config(), s))[0]);
  EXPECT_EQ(seen, (std::set<std::string>{"16", "32", "48", "64", "80", "96", "112"}));
}

// A compiled value that reads N and M together: the two are scanned jointly,
// and a value nothing compiles past (NaN, as bucket() beyond its last bucket)
// is no tuple.
TEST_F(WarmTest, ValueReadingTwoVariablesIsScannedJointly) {
  const ShapeBox box = parse_shape_box(*space_, "N=1..1000;M=1..12");
  CompiledValues joint = [](const Config&, const Shape& s) -> std::optional<std::vector<std::string>> {
    if (s.values[1] > 10) return std::nullopt;
    return std::vector<std::string>{std::to_string((s.values[0] >= 500) * 10 + (s.values[1] >= 6)), "7"};
  };
  ConfigBinaries plan = plan_config_binaries(*space_, box, space_->default_config(), 64, joint);
  EXPECT_EQ(plan.tuples, 4u);
  EXPECT_EQ(plan.varying, (std::vector<std::string>{"N", "M"}));
  std::set<std::string> seen;
  for (const Shape& s : plan.shapes) {
    EXPECT_LE(s.values[1], 10);
    seen.insert((*joint(space_->default_config(), s))[0]);
  }
  EXPECT_EQ(seen, (std::set<std::string>{"0", "1", "10", "11"}));
}

// Forty tuned shapes, each with its own N and M: planning is per config, so
// it stays bounded (the product of per-variable classes it replaced grew with
// every tuned value), and with M compiled exactly over a wide range every
// config is reported, none compiled.
TEST_F(WarmTest, FortyTunedShapesPlanPerConfig) {
  const char* configs[] = {vector_config, wide_config, "THREADS=128,ITEMS=2,VECTOR=false",
                           "THREADS=64,ITEMS=1,VECTOR=true"};
  for (int i = 0; i < 40; ++i)
    tune(fmt::format("N={},M={}", 300 + 17 * i, 4 * (1 + i % 3)), configs[i % 4], 5.0 + i);
  Store store = Store::open(db_);
  DispatchIndex index = DispatchIndex::build(store, *space_, DispatchTarget{h200, ToolchainInfo::current()});
  const TunedEntries tuned = tuned_entries(store, *space_, ToolchainInfo::current());
  ASSERT_EQ(tuned.shapes.size(), 40u);

  WarmPlan narrow = plan_warm(index, tuned, WarmOptions{parse_shape_box(*space_, "N=1..1000;M=1..12"), 2});
  ASSERT_EQ(narrow.configs.size(), 5u);  // four tuned and the default
  EXPECT_EQ(narrow.configs[0].origin, "default");
  std::uint64_t shapes = 0;
  for (const PlannedConfig& p : narrow.configs) {
    EXPECT_TRUE(p.binaries.warmable);
    EXPECT_EQ(p.binaries.tuples, 12u);
    shapes += p.binaries.shapes.size();
  }
  EXPECT_EQ(shapes, 12u + 12u + 12u + 3u + 3u);
  EXPECT_EQ(narrow.binaries.size(), shapes);
  EXPECT_EQ(narrow.tuned_shape_binaries, 0u);  // every tuned entry's binary is among the planned ones

  WarmPlan wide = plan_warm(index, tuned, WarmOptions{parse_shape_box(*space_, "N=1..4096;M=1..1024"), 2, 64});
  for (const PlannedConfig& p : wide.configs) {
    EXPECT_FALSE(p.binaries.warmable) << p.origin;
    EXPECT_EQ(p.binaries.tuples, 1024u);
  }
  // No config is warmable over the wide box, but each tuned entry's own
  // binary is planned at its shape (a hit there loads it): one per distinct
  // (config, M) of the entries, 4 configs x 3 values of M.
  EXPECT_EQ(wide.tuned_shape_binaries, 12u);
  ASSERT_EQ(wide.binaries.size(), 12u);
  for (const WarmBinary& binary : wide.binaries) {
    auto entry = std::find(tuned.entries.begin(), tuned.entries.end(), std::pair(binary.shape, binary.config));
    EXPECT_NE(entry, tuned.entries.end()) << space_->shape_string(binary.shape);
  }
  // Entries outside the box are left out.
  WarmPlan elsewhere = plan_warm(index, tuned, WarmOptions{parse_shape_box(*space_, "N=1..200;M=1..1024"), 2, 64});
  EXPECT_EQ(elsewhere.tuned_shape_binaries, 0u);
  EXPECT_TRUE(elsewhere.binaries.empty());
}

TEST_F(WarmTest, WarmStoresEveryCandidateBinaryAndIsIdempotent) {
  tune("N=300,M=8", vector_config, 5.0);
  tune("N=900,M=8", wide_config, 7.0);
  const WarmOptions options{parse_shape_box(*space_, "N=1..1000;M=6..9"), 2};
  WarmReport first;
  {
    Store store = Store::open(db_);
    DispatchIndex index = DispatchIndex::build(store, *space_, DispatchTarget{h200, ToolchainInfo::current()});
    first = warm(store, index, options);
  }
  EXPECT_EQ(first.failed, 0u) << first.first_failure;
  EXPECT_EQ(first.plan.binaries.size(), 4u + 4u + 1u);  // default and wide at every M, vector at M=8
  EXPECT_EQ(first.compiled, 9u);
  EXPECT_EQ(first.coverage.sampled, 4u + default_coverage_samples);
  EXPECT_EQ(first.coverage.uncovered, 0u) << (first.coverage.examples.empty() ? "" : first.coverage.examples[0]);

  Store store = Store::open(db_);
  DispatchIndex index = DispatchIndex::build(store, *space_, DispatchTarget{h200, ToolchainInfo::current()});
  WarmReport second = warm(store, index, options);
  EXPECT_EQ(second.compiled, 0u);
  EXPECT_EQ(second.already_stored, first.plan.binaries.size());

  // Every shape of the box, not only the samples, has a ranked config whose
  // binary is stored: the dispatcher's stand-in never needs NVRTC there.
  std::set<std::string> missing;
  for (std::int64_t m = 6; m <= 9; ++m)
    for (std::int64_t n = 1; n <= 1000; ++n) {
      bool ready = false;
      for (const Choice& choice : index.ranked(Shape{{n, m}}, coverage_rank_limit))
        ready = ready || (choice.ok() && index.stored_binary(store, choice));
      if (!ready) missing.insert(space_->shape_string(Shape{{n, m}}));
    }
  EXPECT_TRUE(missing.empty()) << missing.size() << " shapes without a stored binary, e.g. " << *missing.begin();

  std::vector<WarmRange> ranges = store.warm_ranges();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].range, "N=1..1000;M=6..9");
  EXPECT_EQ(ranges[0].arch, "sm_90");
  EXPECT_EQ(ranges[0].binaries, 9);
  EXPECT_EQ(ranges[0].kernel_name, "warm_toy");
}

// The default config needs M % 4 == 0 and nothing tuned or fallen back to
// runs elsewhere: a first call at M=6, 7 or 9 would compile, and the
// coverage check must say so.
TEST_F(WarmTest, CoverageReportsShapesWithoutAWarmedBinary) {
  std::string text = space_->text();
  const std::string plain_default = "default: {THREADS: 128, ITEMS: 1, VECTOR: false}";
  ASSERT_NE(text.find(plain_default), std::string::npos);
  text.replace(text.find(plain_default), plain_default.size(), "default: {THREADS: 128, ITEMS: 1, VECTOR: true}");
  space_ = std::make_unique<SearchSpace>(SearchSpace::parse(text, "warm_vector_default.yaml", spaces_dir));
  Store store = Store::open(db_);
  DispatchIndex index = DispatchIndex::build(store, *space_, DispatchTarget{h200, ToolchainInfo::current()});
  WarmReport report = warm(store, index, WarmOptions{parse_shape_box(*space_, "N=1..1000;M=6..9"), 2, 64, 400, 7});
  EXPECT_EQ(report.compiled, 1u);
  const CoverageReport& c = report.coverage;
  EXPECT_FALSE(c.guaranteed());
  ASSERT_EQ(c.standing.size(), 1u);
  EXPECT_EQ(c.standing[0].origin, "default");
  EXPECT_GT(c.standing[0].ready, 0u);
  EXPECT_EQ(c.uncovered + c.standing[0].ready, c.sampled);  // ready exactly where M = 8
  ASSERT_EQ(c.examples.size(), coverage_examples);
  for (const std::string& example : c.examples) EXPECT_EQ(example.find("M=8"), std::string::npos) << example;
}

// With the map form of shape.compiled (another branch), a bucketed config
// compiles once per bucket; skipped where this tree reads only the list form.
TEST_F(WarmTest, BucketedConfigCompilesOncePerBucket) {
  std::unique_ptr<SearchSpace> buckets;
  try {
    buckets = std::make_unique<SearchSpace>(SearchSpace::load(spaces_dir / "warm_buckets.yaml"));
  } catch (const InputError& e) {
    if (std::string(e.what()).find("'shape.compiled' must be a list") != std::string::npos)
      GTEST_SKIP() << "shape.compiled has no map form in this tree: " << e.what();
    throw;
  }
  space_ = std::move(buckets);
  Store store = Store::open(db_);
  DispatchIndex index = DispatchIndex::build(store, *space_, DispatchTarget{h200, ToolchainInfo::current()});
  const WarmOptions options{parse_shape_box(*space_, "N=1..1000;M=1..64"), 2, 16};
  WarmReport first = warm(store, index, options);
  ASSERT_EQ(first.plan.configs.size(), 2u);
  EXPECT_EQ(first.plan.configs[0].origin, "fallback 0");
  EXPECT_TRUE(first.plan.configs[0].binaries.warmable);
  EXPECT_EQ(first.plan.configs[0].binaries.tuples, 4u);  // buckets 16, 32, 48, 64
  EXPECT_FALSE(first.plan.configs[1].binaries.warmable);  // the default compiles M exactly
  EXPECT_EQ(first.plan.configs[1].binaries.tuples, 64u);
  EXPECT_EQ(first.compiled, 4u) << first.first_failure;
  EXPECT_TRUE(first.coverage.guaranteed()) << first.coverage.examples.front();
  EXPECT_EQ(warm(store, index, options).compiled, 0u);
}

// The coverage names the largest workspace a config the dispatcher ranks
// takes in the range (what a process maps at its first calls there unless it
// reserves it at open): the default of prologue.yaml expands x into N floats
// of scratch, largest at the corner N=100000.  A tuned entry without the
// prologue, the choice everywhere, does not lower it: the default is still
// ranked behind it (a stand-in or a race's candidate).
TEST_F(WarmTest, CoverageNamesTheLargestWorkspaceOfTheRankedConfigs) {
  space_ = std::make_unique<SearchSpace>(SearchSpace::load(spaces_dir / "prologue.yaml"));
  const WarmOptions options{parse_shape_box(*space_, "N=1..100000"), 2, 64, 200, 3};
  {
    Store store = Store::open(db_);
    DispatchIndex index = DispatchIndex::build(store, *space_, DispatchTarget{h200, ToolchainInfo::current()});
    WarmReport report = warm(store, index, options);
    ASSERT_EQ(report.failed, 0u) << report.first_failure;
    EXPECT_TRUE(report.coverage.guaranteed());
    EXPECT_EQ(report.coverage.largest_workspace_bytes, 400'000u);
    EXPECT_EQ(report.coverage.largest_workspace_shape, "N=100000");
  }
  tune("N=50000", "EXPAND=false,THREADS=256,PROLOGUE_THREADS=128", 3.0);
  Store store = Store::open(db_);
  DispatchIndex index = DispatchIndex::build(store, *space_, DispatchTarget{h200, ToolchainInfo::current()});
  WarmReport report = warm(store, index, options);
  ASSERT_EQ(report.failed, 0u) << report.first_failure;
  const Choice at_corner = index.choose(shape("N=100000"));
  ASSERT_EQ(at_corner.reason, ChoiceReason::nearest) << at_corner.explanation;
  ASSERT_TRUE(plan_launch(*space_, at_corner.config, shape("N=100000")).steps.workspace_bytes.empty());
  EXPECT_EQ(report.coverage.largest_workspace_bytes, 400'000u);
  EXPECT_EQ(report.coverage.largest_workspace_shape, "N=100000");

  EXPECT_EQ(reserve_text(0), "0");
  EXPECT_EQ(reserve_text(1), "1M");
  EXPECT_EQ(reserve_text(400'000), "1M");
  EXPECT_EQ(reserve_text(std::uint64_t{3} << 20), "3M");
  EXPECT_EQ(reserve_text((std::uint64_t{3} << 20) + 1), "4M");
  EXPECT_EQ(parse_byte_count(reserve_text(1'870'000'000), "x"), std::uint64_t{1784} << 20);
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
  const fs::path other_db = dir_ / "threads.db";  // the same tuned entry, nothing warmed
  fs::copy_file(db_, other_db);
  auto run = [&](std::vector<std::string> args) { return test_support::run_program(cli, args, dir_); };
  auto warmed = run({"cache", "warm", "--db", db_.string(), "--space", (spaces_dir / "warm.yaml").string(),
                     "--range", "N=1..500;M=8", "--arch", "sm_90", "-q"});
  ASSERT_EQ(warmed.code, 0) << warmed.err;
  EXPECT_NE(warmed.out.find("warmed warm_toy for sm_90 (NVIDIA H200) over N=1..500;M=8"), std::string::npos)
      << warmed.out;
  EXPECT_NE(warmed.out.find("candidate configs  2 (2 warmable"), std::string::npos) << warmed.out;
  EXPECT_NE(warmed.out.find("failed             0"), std::string::npos) << warmed.out;
  EXPECT_NE(warmed.out.find("uncovered          0:"), std::string::npos) << warmed.out;
  EXPECT_NE(warmed.out.find("largest workspace  0 (no ranked config in the range launches a prologue)"), std::string::npos)
      << warmed.out;
  // By default NVRTC runs in compile processes, as in `tune` (the
  // mlatune-worker beside the program); --compile-in threads keeps it here.
  EXPECT_NE(warmed.out.find("compiled           2 (on "), std::string::npos) << warmed.out;
  EXPECT_NE(warmed.out.find(" threads, each with a compile process)"), std::string::npos) << warmed.out;
  auto in_threads = run({"cache", "warm", "--db", other_db.string(), "--space", (spaces_dir / "warm.yaml").string(),
                         "--range", "N=1..500;M=8", "--arch", "sm_90", "--compile-in", "threads", "--json"});
  ASSERT_EQ(in_threads.code, 0) << in_threads.err;
  const nlohmann::json threads_report = nlohmann::json::parse(in_threads.out);
  EXPECT_EQ(threads_report["compiled"], 2);
  EXPECT_EQ(threads_report["compile_in"], "threads");
  EXPECT_EQ(threads_report["coverage"]["largest_workspace_bytes"], 0);
  EXPECT_EQ(threads_report["coverage"]["workspace_reserve"], "0");
  auto refused = run({"cache", "warm", "--db", other_db.string(), "--space", (spaces_dir / "warm.yaml").string(),
                      "--range", "N=1..500;M=8", "--compile-in", "gpu"});
  EXPECT_EQ(refused.code, 2) << refused.out;
  EXPECT_NE(refused.err.find("--compile-in"), std::string::npos) << refused.err;
  auto again = run({"cache", "--db", db_.string(), "warm", "--space", (spaces_dir / "warm.yaml").string(),
                    "--range", "N=1..500;M=8", "--arch", "sm_90", "-q"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("compiled           0"), std::string::npos) << again.out;
  auto info = run({"cache", "info", "--db", db_.string()});
  ASSERT_EQ(info.code, 0) << info.err;
  EXPECT_NE(info.out.find("warm range      warm_toy sm_90"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("N=1..500;M=8"), std::string::npos) << info.out;
  // M compiled exactly over 1..64: nothing warmable under a bound of 10, so
  // the coverage fails outside M=8 (the binaries stored above).
  auto too_wide = run({"cache", "warm", "--db", db_.string(), "--space", (spaces_dir / "warm.yaml").string(),
                       "--range", "N=1..500;M=1..64", "--arch", "sm_90", "--max-binaries-per-config", "10", "--json"});
  ASSERT_EQ(too_wide.code, 0) << too_wide.err;
  nlohmann::json report = nlohmann::json::parse(too_wide.out);
  EXPECT_EQ(report["compiled"], 0);
  ASSERT_EQ(report["configs"].size(), 2u);
  EXPECT_EQ(report["configs"][0]["warmable"], false);
  EXPECT_EQ(report["configs"][0]["tuples"], 64);
  EXPECT_EQ(report["configs"][0]["varying"], nlohmann::json::array({"M"}));
  EXPECT_EQ(report["coverage"]["guaranteed"], false);
  EXPECT_GT(report["coverage"]["uncovered"], 0);
}

}  // namespace
}  // namespace mlatune
