// mlatune cache trim without a GPU: a store after a sweep (one binary per
// compiled config) and a warm-up keeps the binaries of its best entries'
// hits and of the warmed range, drops the sweep's other binaries, and leaves
// other kernel families and other template versions alone.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "cache/dispatch_index.h"
#include "cache/store.h"
#include "core/compiler.h"
#include "core/space.h"
#include "tests/run_program.h"
#include "tuner/binary_trim.h"
#include "tuner/shape_box.h"
#include "tuner/warm.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path spaces_dir = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";
const DeviceInfo h200{"NVIDIA H200", "sm_90", 132, 150'000'000'000, "13.0", 52'428'800, 232'448};

class BinaryTrimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlatune_binary_trim_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = dir_ / "test.db";
    space_ = std::make_unique<SearchSpace>(SearchSpace::load(spaces_dir / "warm.yaml"));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // What a sweep leaves at `shape`: a measurement per config (the first is
  // the fastest, so the best) and each config's binary.
  void sweep(Store& store, const std::string& shape, const std::vector<std::string>& configs) {
    std::int64_t kernel = store.ensure_kernel({space_->kernel_name(), space_->template_hash(), space_->definition_hash()});
    std::int64_t device = store.ensure_device(h200);
    std::int64_t toolchain = store.ensure_toolchain(ToolchainInfo::current());
    std::int64_t run = store.begin_run(RunInfo{kernel, device, toolchain, "warm.yaml", space_->text(), "test", "{}"});
    double median = 10;
    for (const std::string& config : configs) {
      Measurement m;
      m.run_id = run;
      m.shape = space_->shape_string(space_->parse_shape(shape));
      m.config = space_->config_string(space_->parse_config(config));
      m.timing = Timing{median, median, median, 10, 0.0, "test"};
      median += 1;
      store.record(m);
      store.put_binary(fake_binary(key(config, shape)));
    }
    store.finish_run(run, RunStatus::finished);
  }

  std::string key(const std::string& config, const std::string& shape) const {
    return Compiler()
        .key(compile_request(*space_, space_->parse_config(config), space_->parse_shape(shape), "sm_90"))
        .hash;
  }

  BinaryRecord fake_binary(const std::string& key, const std::string& kernel = "",
                           const std::string& template_hash = "") const {
    return BinaryRecord{key,
                        kernel.empty() ? space_->kernel_name() : kernel,
                        template_hash.empty() ? space_->template_hash() : template_hash,
                        ToolchainInfo::current().nvrtc_version,
                        "sm_90",
                        std::vector<std::uint8_t>(3000, 1),
                        "{}"};
  }

  std::set<std::string> stored_keys(Store& store) const {
    std::set<std::string> keys;
    for (const Store::StoredBinary& b : store.binaries_of(space_->kernel_name())) keys.insert(b.key);
    return keys;
  }

  fs::path db_, dir_;
  std::unique_ptr<SearchSpace> space_;
};

TEST_F(BinaryTrimTest, KeepsWhatHitsAndWarmedRangesLoadAndDropsTheRest) {
  Store store = Store::open(db_);
  // Two shapes swept over three configs each; M = 16 and M = 32 compile apart.
  sweep(store, "N=1000,M=16", {"THREADS=64,ITEMS=2,VECTOR=true", "THREADS=32,ITEMS=1,VECTOR=false",
                               "THREADS=128,ITEMS=4,VECTOR=false"});
  sweep(store, "N=500,M=32", {"THREADS=32,ITEMS=1,VECTOR=true", "THREADS=64,ITEMS=1,VECTOR=false",
                              "THREADS=128,ITEMS=2,VECTOR=true"});
  const std::string hit_16 = key("THREADS=64,ITEMS=2,VECTOR=true", "N=1000,M=16");
  const std::string hit_32 = key("THREADS=32,ITEMS=1,VECTOR=true", "N=500,M=32");
  // A warm-up of M = 8 (real sm_90 binaries: the tuned configs and the default at M = 8).
  const DispatchIndex index = DispatchIndex::build(store, *space_, DispatchTarget{h200, ToolchainInfo::current()});
  WarmOptions warm_options;
  warm_options.box = parse_shape_box(*space_, "N=1..2000;M=8");
  warm_options.jobs = 2;
  warm_options.samples = 50;
  const WarmReport warmed = warm(store, index, warm_options);
  ASSERT_EQ(warmed.failed, 0u) << warmed.first_failure;
  std::set<std::string> warm_keys;
  for (const WarmBinary& b : warmed.plan.binaries) warm_keys.insert(b.key.hash);
  ASSERT_GE(warm_keys.size(), 2u);
  // Neither another family's binaries nor another template version's are this trim's.
  store.put_binary(fake_binary("other-family", "another_kernel"));
  store.put_binary(fake_binary("old-template", "", "0123456789abcdef0123456789abcdef"));

  const std::set<std::string> before = stored_keys(store);
  TrimOptions dry;
  dry.dry_run = true;
  const TrimReport counted = trim_binaries(store, *space_, dry);
  EXPECT_EQ(stored_keys(store), before) << "a dry run deleted";

  const TrimReport r = trim_binaries(store, *space_);
  std::set<std::string> expected = warm_keys;
  expected.insert(hit_16);
  expected.insert(hit_32);
  expected.insert("old-template");
  EXPECT_EQ(stored_keys(store), expected);
  EXPECT_TRUE(store.get_binary("other-family").has_value());
  EXPECT_EQ(r.for_best, 2);
  EXPECT_EQ(r.for_warm, static_cast<std::int64_t>(warm_keys.size()));
  EXPECT_EQ(r.warm_ranges, 1);
  EXPECT_EQ(r.other_versions, 1);
  EXPECT_EQ(r.dropped, 4);  // the sweeps' four slower configs
  EXPECT_EQ(r.kept, static_cast<std::int64_t>(expected.size()) - 1);
  EXPECT_EQ(r.considered, r.kept + r.dropped);
  EXPECT_EQ(r.dropped_bytes + r.kept_bytes, r.considered_bytes);
  EXPECT_GT(r.dropped_bytes, 0);
  EXPECT_TRUE(r.notes.empty()) << r.notes.front();
  EXPECT_EQ(counted.dropped, r.dropped);
  EXPECT_EQ(counted.kept, r.kept);
  // Trimming again finds nothing to drop.
  EXPECT_EQ(trim_binaries(store, *space_).dropped, 0);
}

TEST_F(BinaryTrimTest, ADatabaseWithoutBestEntriesIsSaidBeforeItLosesEverything) {
  Store store = Store::open(db_);
  store.put_binary(fake_binary(key("THREADS=64,ITEMS=2,VECTOR=true", "N=1000,M=16")));  // compile-only
  TrimOptions dry;
  dry.dry_run = true;
  const TrimReport r = trim_binaries(store, *space_, dry);
  EXPECT_EQ(r.dropped, 1);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("no best entry of warm_toy"), std::string::npos) << r.notes[0];
}

TEST_F(BinaryTrimTest, AWarmedRangePlannedWithAnotherBoundIsSaid) {
  Store store = Store::open(db_);
  sweep(store, "N=1000,M=16", {"THREADS=64,ITEMS=2,VECTOR=true"});
  const DispatchIndex index = DispatchIndex::build(store, *space_, DispatchTarget{h200, ToolchainInfo::current()});
  WarmOptions warm_options;
  warm_options.box = parse_shape_box(*space_, "N=1..2000;M=1..4");
  warm_options.jobs = 2;
  warm_options.samples = 20;
  warm_options.max_binaries_per_config = 8;
  ASSERT_EQ(warm(store, index, warm_options).failed, 0u);
  TrimOptions other;
  other.dry_run = true;
  other.max_binaries_per_config = 1;  // not what the range was warmed with
  const TrimReport r = trim_binaries(store, *space_, other);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("N=1..2000;M=1..4"), std::string::npos) << r.notes[0];
  EXPECT_NE(r.notes[0].find("warm it again"), std::string::npos) << r.notes[0];
}

TEST_F(BinaryTrimTest, TheCommandSaysWhatItKeptDroppedAndWhatResumeRecompiles) {
  using test_support::ProgramResult;
  using test_support::run_program;
  {
    Store store = Store::open(db_);
    sweep(store, "N=1000,M=16", {"THREADS=64,ITEMS=2,VECTOR=true", "THREADS=32,ITEMS=1,VECTOR=false"});
  }
  const fs::path mlatune = fs::path(MLATUNE_BINARY_DIR) / "mlatune";
  const std::string space = (spaces_dir / "warm.yaml").string();
  ProgramResult dry = run_program(mlatune, {"cache", "trim", "--space", space, "--db", db_.string(), "--dry-run"}, dir_);
  ASSERT_EQ(dry.code, 0) << dry.out << dry.err;
  EXPECT_NE(dry.out.find("to drop  1"), std::string::npos) << dry.out;
  ProgramResult done = run_program(mlatune, {"cache", "trim", "--space", space, "--db", db_.string()}, dir_);
  ASSERT_EQ(done.code, 0) << done.out << done.err;
  EXPECT_NE(done.out.find("kept     1 (31 B): 1 loaded by hits at best entries, 0 by first calls in 0 warmed"),
            std::string::npos)
      << done.out;
  EXPECT_NE(done.out.find("dropped  1"), std::string::npos) << done.out;
  EXPECT_NE(done.out.find("a sweep resumed or run again at a shape it measured compiles nothing again"),
            std::string::npos)
      << done.out;
  ProgramResult missing =
      run_program(mlatune, {"cache", "trim", "--space", space, "--db", (dir_ / "none.db").string()}, dir_);
  EXPECT_EQ(missing.code, 2) << missing.out << missing.err;
  EXPECT_NE(missing.err.find("no database at"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace mlatune
