// Best configs that travel (cache/portable_configs.h, Store::export_best and
// import_best) and the re-validation of foreign ones (tuner/revalidation.h):
// an export read back is the same entries with the same statistics, an import
// is idempotent and never overrides a faster best entry, entries keep the
// device and toolchain they were measured with, files of another format,
// format version or kernel version are refused by name, and the foreign
// configs are what a revalidation sweep measures (here by replay, no GPU).
#include "cache/portable_configs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/store.h"
#include "core/error.h"
#include "core/space.h"
#include "tuner/replay.h"
#include "tuner/revalidation.h"
#include "tuner/sweep.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path space_file = fs::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";
const char* const s0 = "B=2,T=32,H=4,D=16,R=24";
const char* const s1 = "B=4,T=256,H=8,D=32,R=64";
// Two configs of the recorded H200 sweep at S0, and one invalid there (H=4 is
// not a multiple of HEADS_PER_BLOCK=8).
const char* const fast =
    "ALGORITHM=absorbed,THREADS_PER_QUERY=1,QUERIES_PER_BLOCK=8,HEADS_PER_BLOCK=4,STAGE_LATENT=true,KEY_TILE=16,"
    "FLOAT4=false,UNROLL=2,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1";
const char* const slow =
    "ALGORITHM=absorbed,THREADS_PER_QUERY=32,QUERIES_PER_BLOCK=1,HEADS_PER_BLOCK=1,STAGE_LATENT=false,KEY_TILE=16,"
    "FLOAT4=false,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1";
const char* const valid_at_s1 =
    "ALGORITHM=absorbed,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=2,HEADS_PER_BLOCK=8,STAGE_LATENT=true,KEY_TILE=16,"
    "FLOAT4=true,UNROLL=4,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1";
const char* const invalid_at_s0 =
    "ALGORITHM=absorbed,THREADS_PER_QUERY=1,QUERIES_PER_BLOCK=8,HEADS_PER_BLOCK=8,STAGE_LATENT=true,KEY_TILE=16,"
    "FLOAT4=false,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1";

DeviceInfo device_named(const std::string& name, int sms) {
  DeviceInfo d;
  d.name = name;
  d.arch = "sm_90";
  d.sm_count = sms;
  d.memory_bytes = std::int64_t{141} << 30;
  d.driver_version = "13.0";
  return d;
}

class PortableConfigs_ : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlatune_portable_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  const SearchSpace& space() const {
    static const SearchSpace loaded = SearchSpace::load(space_file);
    return loaded;
  }
  KernelInfo kernel() const { return {space().kernel_name(), space().template_hash(), space().definition_hash()}; }

  /// A finished run on `device` with `toolchain` that measured `config` at
  /// `shape` in `median_us`, with every statistic the file carries.
  void record(const fs::path& db, const DeviceInfo& device, const ToolchainInfo& toolchain, const std::string& shape,
              const std::string& config, double median_us) {
    Store store = Store::open(db);
    const std::int64_t run = store.begin_run(RunInfo{store.ensure_kernel(kernel()), store.ensure_device(device),
                                                     store.ensure_toolchain(toolchain), space_file.string(),
                                                     space().text(), "random", "{}"});
    Measurement m;
    m.run_id = run;
    m.shape = shape;
    m.config = config;
    m.timing = Timing{median_us, median_us * 0.97, median_us * 1.05, 41, 0.08, "events, L2 flushed"};
    m.error = ErrorFigures{2.5e-7, 1.25e-6};
    ResourceUsage usage;
    usage.registers = 72;
    usage.shared_bytes = 12288;
    usage.spill_store_bytes = 8;
    m.resources = usage;
    store.record(m);
    store.finish_run(run, RunStatus::finished);
  }

  fs::path dir_;
  const DeviceInfo h200_ = device_named("NVIDIA H200", 132);
  const DeviceInfo other_ = device_named("NVIDIA H100 80GB HBM3", 132);
  const ToolchainInfo here_ = ToolchainInfo::current();
  const ToolchainInfo older_{"12.8", "0.0.9"};
};

/// The file round trip: export, write, read back.
PortableConfigs through_a_file(const std::vector<PortableEntry>& entries, const fs::path& file) {
  PortableConfigs configs;
  configs.entries = entries;
  write_portable_file(file, configs);
  return read_portable_file(file);
}

TEST_F(PortableConfigs_, ExportImportRoundTripKeepsEveryEntryAndStatistic) {
  const fs::path tuned = dir_ / "tuned.db";
  record(tuned, h200_, here_, s0, slow, 23.25);
  record(tuned, h200_, here_, s0, fast, 16.8);  // becomes best at S0
  record(tuned, h200_, here_, s1, fast, 120.5);
  record(tuned, other_, older_, s0, slow, 19.125);
  const std::vector<PortableEntry> exported = Store::open(tuned).export_best("");
  ASSERT_EQ(exported.size(), 3u);
  auto h200_s0 = std::find_if(exported.begin(), exported.end(), [&](const PortableEntry& e) {
    return e.device == h200_.identity() && e.shape == s0;
  });
  ASSERT_NE(h200_s0, exported.end());
  EXPECT_EQ(h200_s0->config, fast);  // the best, not every measurement
  EXPECT_DOUBLE_EQ(h200_s0->timing.p90_us, 16.8 * 1.05);
  EXPECT_EQ(h200_s0->timing.samples, 41);
  ASSERT_TRUE(h200_s0->error);
  EXPECT_DOUBLE_EQ(h200_s0->error->max_abs, 1.25e-6);
  ASSERT_TRUE(h200_s0->resources);
  EXPECT_EQ(h200_s0->resources->spill_store_bytes, 8);
  EXPECT_FALSE(h200_s0->measured_at.empty());
  EXPECT_EQ(Store::open(tuned).export_best("rms_norm").size(), 0u);

  const PortableConfigs read = through_a_file(exported, dir_ / "best.json");
  EXPECT_EQ(read.entries, exported);
  EXPECT_EQ(read.exported_by, MLATUNE_VERSION);

  const fs::path fresh = dir_ / "fresh.db";  // created by the import
  const ImportCounts counts = Store::open(fresh).import_best(read.entries, "best.json");
  EXPECT_EQ(counts.added, 3);
  EXPECT_EQ(counts.present, 0);
  EXPECT_EQ(counts.best_changed, 3);
  EXPECT_EQ(Store::open(fresh).export_best(""), exported);
  // Each under the device and toolchain it names.
  for (const BestRecord& b : Store::open(fresh).all_best()) {
    if (b.entry.shape == s0 && b.device == other_.identity()) {
      EXPECT_EQ(b.toolchain, older_);
      EXPECT_EQ(b.entry.config, slow);
    } else {
      EXPECT_EQ(b.device, h200_.identity());
      EXPECT_EQ(b.toolchain, here_);
    }
  }
  // One imported run per (kernel version, device, toolchain).
  std::vector<RunRecord> runs = Store::open(fresh).runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].strategy, "import");
  EXPECT_EQ(runs[0].status, "finished");
}

TEST_F(PortableConfigs_, ImportingTwiceChangesNothing) {
  const fs::path tuned = dir_ / "tuned.db";
  record(tuned, h200_, here_, s0, fast, 16.8);
  record(tuned, other_, here_, s1, slow, 300.0);
  const std::vector<PortableEntry> entries = Store::open(tuned).export_best("");
  const fs::path db = dir_ / "db.db";
  Store::open(db).import_best(entries, "a.json");
  const StoreInfo before = Store::open(db).info();
  const ImportCounts again = Store::open(db).import_best(entries, "a.json");
  EXPECT_EQ(again.added, 0);
  EXPECT_EQ(again.present, 2);
  EXPECT_EQ(again.best_changed, 0);
  const StoreInfo after = Store::open(db).info();
  EXPECT_EQ(after.runs, before.runs);
  EXPECT_EQ(after.measurements, before.measurements);
  EXPECT_EQ(after.best, before.best);
  EXPECT_EQ(after.devices, before.devices);
  // Importing into the database the entries came from changes nothing either.
  const ImportCounts home = Store::open(tuned).import_best(entries, "a.json");
  EXPECT_EQ(home.added, 0);
  EXPECT_EQ(home.present, 2);
}

TEST_F(PortableConfigs_, AFasterEntryOfTheSameDeviceIsKept) {
  const fs::path mine = dir_ / "mine.db";
  record(mine, h200_, here_, s0, fast, 12.0);  // this database's own, faster
  const fs::path theirs = dir_ / "theirs.db";
  record(theirs, h200_, here_, s0, slow, 20.0);
  record(theirs, h200_, here_, s1, slow, 250.0);     // a shape mine lacks
  record(theirs, other_, here_, s0, slow, 9.0);      // faster, but on another device
  const ImportCounts counts = Store::open(mine).import_best(Store::open(theirs).export_best(""), "theirs.json");
  EXPECT_EQ(counts.added, 3);
  EXPECT_EQ(counts.best_changed, 2);  // S1 on the H200, S0 on the other device
  Store store = Store::open(mine);
  std::optional<BestEntry> s0_here = store.best(kernel(), h200_, here_, s0);
  ASSERT_TRUE(s0_here);
  EXPECT_EQ(s0_here->config, fast);
  EXPECT_DOUBLE_EQ(s0_here->median_us, 12.0);
  ASSERT_TRUE(store.best(kernel(), h200_, here_, s1));
  std::optional<BestEntry> s0_other = store.best(kernel(), other_, here_, s0);
  ASSERT_TRUE(s0_other);
  EXPECT_DOUBLE_EQ(s0_other->median_us, 9.0);  // stored as that device's, never as the H200's
}

std::string parse_error(const std::string& text) {
  try {
    parse_portable_json(text, "f.json");
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST_F(PortableConfigs_, OtherFormatsAndVersionsAreRefusedByName) {
  EXPECT_EQ(parse_error("{ not json"), "f.json: not JSON; expected a portable configs file (mlatune cache export-best)");
  EXPECT_EQ(parse_error(R"({"format": "mlatune-measurements", "format_version": 1})"),
            "f.json: format: 'mlatune-measurements' is not a portable configs file (expected "
            "'mlatune-portable-configs')");
  EXPECT_EQ(parse_error(R"({"format_version": 1})"), "f.json: format: missing");
  EXPECT_EQ(parse_error(R"({"format": "mlatune-portable-configs", "format_version": 2, "entries": []})"),
            fmt::format("f.json: format_version: format version 2; this mlatune ({}) reads version 1 only (export "
                        "it again with this mlatune, or use a newer mlatune)",
                        MLATUNE_VERSION));
  // A damaged entry is named by its path in the file.
  record(dir_ / "t.db", h200_, here_, s0, fast, 16.8);
  PortableConfigs configs;
  configs.entries = Store::open(dir_ / "t.db").export_best("");
  std::string text = portable_json(configs);
  const std::string median = "\"median_us\": ";
  text.replace(text.find(median) + median.size(), 4, "\"16\"");
  EXPECT_EQ(parse_error(text), "f.json: entries[0].timing.median_us: expected a number");
}

TEST_F(PortableConfigs_, AnotherKernelVersionIsRefusedUnlessSkipped) {
  record(dir_ / "t.db", h200_, here_, s0, fast, 16.8);
  PortableConfigs configs;
  configs.entries = Store::open(dir_ / "t.db").export_best("");
  PortableEntry old = configs.entries[0];
  old.kernel.template_hash = "0123456789abcdef0123456789abcdef";
  old.shape = s1;
  configs.entries.push_back(old);
  try {
    entries_for(configs, kernel(), "f.json", false);
    FAIL() << "another template version was accepted";
  } catch (const InputError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("f.json: 1 entry of fused_mla_attention was tuned under template "
                        "0123456789abcdef0123456789abcdef"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("--skip-other-versions imports only the entries of this version, 1 of them"),
              std::string::npos)
        << what;
  }
  const std::vector<PortableEntry> current = entries_for(configs, kernel(), "f.json", true);
  ASSERT_EQ(current.size(), 1u);
  EXPECT_EQ(current[0].shape, s0);
  // Nothing of this kernel at all is refused too.
  configs.entries.erase(configs.entries.begin());
  EXPECT_THROW(entries_for(configs, kernel(), "f.json", true), InputError);
}

TEST_F(PortableConfigs_, ForeignEntriesAreWhatRevalidationMeasures) {
  const fs::path db = dir_ / "db.db";
  const DeviceInfo replay = device_named("replay", 0);  // "this device" of a replayed sweep
  record(db, replay, here_, s0, slow, 23.0);    // this device and toolchain: not foreign
  record(db, other_, here_, s0, fast, 9.0);     // another device
  record(db, replay, older_, s1, valid_at_s1, 150.0);  // this device, another toolchain
  record(db, other_, older_, s0, invalid_at_s0, 5.0);  // foreign too: and invalid at S0 on any device
  RevalidationPlan plan;
  {
    Store store = Store::open(db);
    plan = plan_revalidation(store, space(), replay, here_);
  }
  ASSERT_EQ(plan.foreign.size(), 3u);
  EXPECT_TRUE(plan.unreadable.empty());
  ASSERT_EQ(plan.shapes.size(), 2u);  // S0 once
  const Shape shape0 = space().parse_shape(s0);
  std::vector<Config> at_s0 = plan.given.at(shape0);
  ASSERT_EQ(at_s0.size(), 2u);

  // The revalidation sweep, served by the recorded H200 sweep instead of a
  // GPU: exactly the foreign configs valid at each shape are evaluated, under
  // this device, and a second sweep (resume) evaluates nothing again.
  const ReplayData data = ReplayData::load(fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv", space());
  SweepOptions options;
  options.shapes = plan.shapes;
  options.given = plan.given;
  options.replay = &data;
  options.replay_source = "h200_sweeps.csv";
  SweepReport report = run_sweep(space(), space_file, db, nullptr, replay, options);
  ASSERT_EQ(report.shapes.size(), 2u);
  const ShapeReport& first = report.shapes[0];
  ASSERT_EQ(first.results.size(), 1u);
  ASSERT_EQ(first.skipped.size(), 1u);
  EXPECT_EQ(first.skipped[0].config, invalid_at_s0);
  EXPECT_EQ(first.skipped[0].reason, "violates H % HEADS_PER_BLOCK == 0");
  const std::string revalidated = first.results[0].config;
  EXPECT_TRUE(revalidated == fast || revalidated == slow) << revalidated;
  EXPECT_EQ(report.shapes[1].results.size(), 1u);

  Store store = Store::open(db);
  EXPECT_TRUE(store.best(kernel(), replay, here_, s1));  // now this device's own
  std::optional<BestEntry> s0_here = store.best(kernel(), replay, here_, s0);
  ASSERT_TRUE(s0_here);
  EXPECT_EQ(s0_here->config, fast);  // replayed 16.8 us beats the 23 us recorded here
  SweepReport again = run_sweep(space(), space_file, db, nullptr, replay, options);
  EXPECT_EQ(again.shapes[0].results.size(), 0u);
  EXPECT_EQ(again.shapes[0].already_measured, 1u);
  EXPECT_EQ(again.shapes[1].results.size(), 0u);
}

}  // namespace
}  // namespace mlatune
