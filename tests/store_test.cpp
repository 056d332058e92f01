#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <utility>
#include <string>
#include <unistd.h>

#include "cache/sqlite.h"
#include "cache/store.h"
#include "core/compiler.h"
#include "core/hash.h"
#include "core/space.h"
#include "tests/stored_blobs.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string file_hash(const fs::path& path) { return content_hash(file_bytes(path)); }

const DeviceInfo h200{"NVIDIA H200", "sm_90", 132, 150'000'000'000, "580.65"};
const DeviceInfo a100{"NVIDIA A100", "sm_80", 108, 80'000'000'000, "580.65"};
const ToolchainInfo cuda13{"13.0", "0.1.0"};
const KernelInfo mla_v1{"mla", "template-hash-1", "definition-hash-1"};
const KernelInfo mla_v2{"mla", "template-hash-2", "definition-hash-1"};

Measurement ok(std::int64_t run, std::string shape, std::string config, double median) {
  Measurement m;
  m.run_id = run;
  m.shape = std::move(shape);
  m.config = std::move(config);
  m.outcome = Outcome::ok;
  m.timing = Timing{median, median * 0.9, median * 1.1, 100, 0.2, "cuda events, L2 flushed"};
  m.error = ErrorFigures{1e-7, 1e-6};
  m.resources = ResourceUsage{.registers = 64, .shared_bytes = 4096};
  return m;
}

Measurement failed(std::int64_t run, std::string shape, std::string config, Outcome outcome) {
  Measurement m;
  m.run_id = run;
  m.shape = std::move(shape);
  m.config = std::move(config);
  m.outcome = outcome;
  m.message = "ptxas: too many resources requested";
  return m;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mlatune_store_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path file(const std::string& name) const { return dir_ / name; }

  struct Ids {
    std::int64_t kernel, device, toolchain, run;
  };
  static Ids start(Store& store, const KernelInfo& kernel = mla_v1, const DeviceInfo& device = h200) {
    Ids ids{};
    ids.kernel = store.ensure_kernel(kernel);
    ids.device = store.ensure_device(device);
    ids.toolchain = store.ensure_toolchain(cuda13);
    ids.run = store.begin_run(RunInfo{ids.kernel, ids.device, ids.toolchain, "spaces/mla.yaml",
                                      "kernel: mla\n", "brute_force", R"({"seed": 1})"});
    return ids;
  }

  fs::path dir_;
};

TEST_F(StoreTest, NewDatabaseHasSchemaApplicationIdAndWal) {
  auto path = file("new.db");
  {
    Store store = Store::open(path);
    StoreInfo info = store.info();
    EXPECT_EQ(info.schema_version, Store::schema_version);
    EXPECT_EQ(info.journal_mode, "wal");
    EXPECT_EQ(info.measurements, 0);
    EXPECT_FALSE(info.read_only);
  }
  auto db = sqlite::Connection::open(path, sqlite::OpenMode::read_only);
  auto s = db.prepare("PRAGMA application_id");
  ASSERT_TRUE(s.step());
  EXPECT_EQ(s.column_int64(0), Store::application_id);
}

TEST_F(StoreTest, ZeroByteFileIsANewDatabase) {
  auto path = file("empty.db");
  std::ofstream(path).close();
  ASSERT_EQ(fs::file_size(path), 0u);
  Store store = Store::open(path);
  EXPECT_EQ(store.info().schema_version, Store::schema_version);
}

TEST_F(StoreTest, ReopeningKeepsEverything) {
  auto path = file("keep.db");
  std::int64_t id = 0;
  {
    Store store = Store::open(path);
    auto ids = start(store);
    id = store.record(ok(ids.run, "B=1", "X=1", 5.0));
  }
  Store store = Store::open(path);
  auto all = store.measurements();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].id, id);
  EXPECT_EQ(all[0].kernel, mla_v1);
  EXPECT_EQ(all[0].device, h200);
  EXPECT_EQ(all[0].toolchain, cuda13);
  ASSERT_TRUE(all[0].measurement.timing.has_value());
  EXPECT_DOUBLE_EQ(all[0].measurement.timing->median_us, 5.0);
  EXPECT_EQ(all[0].measurement.timing->samples, 100);
  EXPECT_EQ(all[0].measurement.timing->method, "cuda events, L2 flushed");
  ASSERT_TRUE(all[0].measurement.resources.has_value());
  EXPECT_EQ(all[0].measurement.resources->registers, 64);
  EXPECT_EQ(all[0].run_uuid.size(), 36u);
}

// A device as detect_device() reports it carries properties the store does
// not keep (L2 size, opt-in shared memory); what comes back from the store is
// its identity, and that must match the live device, through every path that
// reads devices back.
TEST_F(StoreTest, ADetectedDeviceMatchesTheIdentityReadBack) {
  DeviceInfo detected{{"NVIDIA H200", "sm_90", 132, 150'000'000'000, "580.65"}};
  detected.l2_bytes = 52'428'800;
  detected.max_shared_per_block_optin = 232'448;
  Store store = Store::open(file("detected.db"));
  auto ids = start(store, mla_v1, detected);
  store.record(ok(ids.run, "B=1", "X=1", 3.0));

  auto measured = store.measurements();
  ASSERT_EQ(measured.size(), 1u);
  EXPECT_EQ(measured[0].device, detected.identity());
  auto best = store.all_best();
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].device, detected.identity());
  EXPECT_EQ(store.find_device(detected), ids.device);
  EXPECT_TRUE(store.best(mla_v1, detected, cuda13, "B=1").has_value());

  // Another report of the same GPU that differs only in the properties is
  // the same stored device.
  DeviceInfo other_report = detected;
  other_report.l2_bytes = 0;
  other_report.max_shared_per_block_optin = 0;
  EXPECT_EQ(store.ensure_device(other_report), ids.device);
  EXPECT_EQ(store.info().devices, 1);
}

TEST_F(StoreTest, IdentitiesAreFoundByNaturalKey) {
  Store store = Store::open(file("ids.db"));
  auto k = store.ensure_kernel(mla_v1);
  EXPECT_EQ(store.ensure_kernel(mla_v1), k);
  EXPECT_NE(store.ensure_kernel(mla_v2), k);
  auto d = store.ensure_device(h200);
  EXPECT_EQ(store.ensure_device(h200), d);
  DeviceInfo new_driver = h200;
  new_driver.driver_version = "590.1";
  EXPECT_FALSE(store.find_device(new_driver).has_value());
  EXPECT_NE(store.ensure_device(new_driver), d);
  EXPECT_EQ(store.find_toolchain(cuda13), std::nullopt);
  auto t = store.ensure_toolchain(cuda13);
  EXPECT_EQ(store.find_toolchain(cuda13), t);
}

TEST_F(StoreTest, BestIsTheFastestOkMeasurementAndMovesInTheSameCommit) {
  Store store = Store::open(file("best.db"));
  auto ids = start(store);
  const std::string shape = "B=2,T=32,H=4,D=16,R=24";
  EXPECT_FALSE(store.best(ids.kernel, ids.device, ids.toolchain, shape).has_value());

  store.record(failed(ids.run, shape, "ALGORITHM=absorbed,TPQ=1", Outcome::launch_error));
  EXPECT_FALSE(store.best(ids.kernel, ids.device, ids.toolchain, shape).has_value());

  auto slow = store.record(ok(ids.run, shape, "ALGORITHM=absorbed,TPQ=2", 9.0));
  auto fast = store.record(ok(ids.run, shape, "ALGORITHM=absorbed,TPQ=4", 4.0));
  store.record(ok(ids.run, shape, "ALGORITHM=expanded,TPQ=4", 6.0));
  store.record(ok(ids.run, shape, "ALGORITHM=expanded,TPQ=8", 4.0));  // a tie: the config that sorts first
  store.record(failed(ids.run, shape, "ALGORITHM=expanded,TPQ=16", Outcome::wrong_result));
  EXPECT_NE(slow, fast);

  auto best = store.best(ids.kernel, ids.device, ids.toolchain, shape);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->config, "ALGORITHM=absorbed,TPQ=4");
  EXPECT_DOUBLE_EQ(best->median_us, 4.0);
  EXPECT_EQ(best->measurement_id, fast);

  auto by_identity = store.best(mla_v1, h200, cuda13, shape);
  ASSERT_TRUE(by_identity.has_value());
  EXPECT_EQ(by_identity->measurement_id, fast);
  EXPECT_FALSE(store.best(mla_v1, a100, cuda13, shape).has_value());
  EXPECT_FALSE(store.best(ids.kernel, ids.device, ids.toolchain, "B=1,T=1,H=1,D=1,R=1").has_value());

  auto all = store.all_best();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].kernel, mla_v1);
  EXPECT_EQ(all[0].device, h200);
  EXPECT_EQ(all[0].entry.config, "ALGORITHM=absorbed,TPQ=4");
}

// Event times are quantized, so ties are common; the order of the
// measurements must not decide between them, else shards merged in another
// order than one sweep measured would name another best config.
TEST_F(StoreTest, ATieGoesToTheConfigThatSortsFirstInAnyOrder) {
  Store store = Store::open(file("tie.db"));
  auto ids = start(store);
  store.record(ok(ids.run, "B=1", "X=9", 4.0));
  auto later = store.record(ok(ids.run, "B=1", "X=1", 4.0));
  store.record(ok(ids.run, "B=1", "X=5", 4.0));
  auto best = store.best(ids.kernel, ids.device, ids.toolchain, "B=1");
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->config, "X=1");
  EXPECT_EQ(best->measurement_id, later);
}

TEST_F(StoreTest, MergedTiesAgreeWhateverTheMergeOrder) {
  const auto a = file("tie_a.db"), b = file("tie_b.db");
  for (const auto& [path, config] : {std::pair{a, "X=2"}, std::pair{b, "X=1"}}) {
    Store shard = Store::open(path);
    auto ids = start(shard);
    shard.record(ok(ids.run, "B=1", config, 3.0));
    shard.finish_run(ids.run, RunStatus::finished);
  }
  for (const auto& [first, second] : {std::pair{a, b}, std::pair{b, a}}) {
    const auto merged = file(first == a ? "tie_ab.db" : "tie_ba.db");
    Store store = Store::open(merged);
    store.merge(first);
    store.merge(second);
    auto best = store.best(mla_v1, h200, cuda13, "B=1");
    ASSERT_TRUE(best.has_value());
    EXPECT_EQ(best->config, "X=1") << "merged " << first << " then " << second;
  }
}

TEST_F(StoreTest, BadMeasurementsAreRefusedAndLeaveNothing) {
  Store store = Store::open(file("bad.db"));
  auto ids = start(store);
  Measurement no_timing = ok(ids.run, "B=1", "X=1", 1.0);
  no_timing.timing.reset();
  EXPECT_THROW(store.record(no_timing), InputError);
  EXPECT_THROW(store.record(ok(ids.run, "B=1", "X=1", std::nan(""))), InputError);
  EXPECT_THROW(store.record(ok(ids.run, "B=1", "X=1", -1.0)), InputError);
  EXPECT_THROW(store.record(ok(ids.run + 100, "B=1", "X=1", 1.0)), InputError);
  EXPECT_THROW(store.finish_run(ids.run + 100, RunStatus::finished), InputError);
  EXPECT_THROW(store.begin_run(RunInfo{ids.kernel + 100, ids.device, ids.toolchain, "p", "t", "s", "{}"}),
               InputError);
  EXPECT_EQ(store.measurement_count(), 0);
  EXPECT_TRUE(store.all_best().empty());
}

TEST_F(StoreTest, MeasuredAnswersResumeQuestions) {
  Store store = Store::open(file("resume.db"));
  auto ids = start(store);
  store.record(failed(ids.run, "B=1", "X=1", Outcome::compile_error));
  EXPECT_TRUE(store.measured(ids.run, "B=1", "X=1"));
  EXPECT_FALSE(store.measured(ids.run, "B=1", "X=2"));
  EXPECT_FALSE(store.measured(ids.run, "B=2", "X=1"));
  auto second = store.begin_run(RunInfo{ids.kernel, ids.device, ids.toolchain, "p", "t", "random", "{}"});
  EXPECT_FALSE(store.measured(second, "B=1", "X=1"));
  EXPECT_TRUE(store.measured(ids.kernel, ids.device, ids.toolchain, "B=1", "X=1"));
  auto v2 = store.ensure_kernel(mla_v2);
  EXPECT_FALSE(store.measured(v2, ids.device, ids.toolchain, "B=1", "X=1"));
}

TEST_F(StoreTest, RunsAreListedWithTheirStatus) {
  Store store = Store::open(file("runs.db"));
  auto ids = start(store);
  store.finish_run(ids.run, RunStatus::interrupted);
  auto runs = store.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "interrupted");
  EXPECT_FALSE(runs[0].finished_at.empty());
  EXPECT_EQ(runs[0].kernel_name, "mla");
  EXPECT_EQ(runs[0].strategy_settings, R"({"seed": 1})");
  EXPECT_EQ(runs[0].space_path, "spaces/mla.yaml");
}

TEST_F(StoreTest, MeasurementsFilterByKernelAndShape) {
  Store store = Store::open(file("filter.db"));
  auto ids = start(store);
  store.record(ok(ids.run, "B=1", "X=1", 1.0));
  store.record(ok(ids.run, "B=2", "X=1", 1.0));
  KernelInfo other{"gemm", "t", "d"};
  auto other_ids = start(store, other);
  store.record(ok(other_ids.run, "B=1", "X=1", 1.0));
  EXPECT_EQ(store.measurements().size(), 3u);
  EXPECT_EQ(store.measurements({"mla", ""}).size(), 2u);
  EXPECT_EQ(store.measurements({"", "B=1"}).size(), 2u);
  EXPECT_EQ(store.measurements({"gemm", "B=2"}).size(), 0u);
  EXPECT_EQ(store.measurements({"mla'; DROP TABLE measurements; --", ""}).size(), 0u);
  EXPECT_EQ(store.measurement_count(), 3);
}

TEST_F(StoreTest, TemplateChangeMakesOldEntriesStaleAndUnused) {
  Store store = Store::open(file("stale.db"));
  auto old_ids = start(store, mla_v1);
  store.record(ok(old_ids.run, "B=1", "X=1", 3.0));
  store.record(ok(old_ids.run, "B=1", "X=2", 2.0));
  store.put_binary(BinaryRecord{"key-old", "mla", mla_v1.template_hash, "13.0", "sm_90", {1, 2, 3}, "{}"});

  // The template changed: the new version sees no result of the old one.
  auto new_ids = start(store, mla_v2);
  EXPECT_FALSE(store.best(new_ids.kernel, new_ids.device, new_ids.toolchain, "B=1").has_value());
  EXPECT_FALSE(store.best(mla_v2, h200, cuda13, "B=1").has_value());
  EXPECT_FALSE(store.measured(new_ids.kernel, new_ids.device, new_ids.toolchain, "B=1", "X=1"));
  store.record(ok(new_ids.run, "B=1", "X=1", 7.0));
  store.put_binary(BinaryRecord{"key-new", "mla", mla_v2.template_hash, "13.0", "sm_90", {4, 5}, "{}"});
  auto best = store.best(mla_v2, h200, cuda13, "B=1");
  ASSERT_TRUE(best.has_value());
  EXPECT_DOUBLE_EQ(best->median_us, 7.0);  // not the old 2.0

  CurrentVersions current;
  current.kernels["mla"] = {mla_v2.template_hash, mla_v2.definition_hash};
  current.nvrtc_version = "13.0";
  auto stale = store.stale(current);
  ASSERT_EQ(stale.size(), 2u);
  EXPECT_EQ(stale[0].kind, StaleEntry::Kind::kernel);
  EXPECT_NE(stale[0].reason.find("template changed"), std::string::npos) << stale[0].reason;
  EXPECT_EQ(stale[0].runs, 1);
  EXPECT_EQ(stale[0].measurements, 2);
  EXPECT_EQ(stale[0].best, 1);
  EXPECT_EQ(stale[1].kind, StaleEntry::Kind::binary);

  // Listing changes nothing; pruning removes exactly the stale entries.
  EXPECT_EQ(store.measurement_count(), 3);
  PruneCounts pruned = store.prune(current);
  EXPECT_EQ(pruned.kernels, 1);
  EXPECT_EQ(pruned.runs, 1);
  EXPECT_EQ(pruned.measurements, 2);
  EXPECT_EQ(pruned.best, 1);
  EXPECT_EQ(pruned.binaries, 1);
  EXPECT_TRUE(store.stale(current).empty());
  EXPECT_EQ(store.measurement_count(), 1);
  EXPECT_FALSE(store.find_kernel(mla_v1).has_value());
  EXPECT_TRUE(store.get_binary("key-new").has_value());
  EXPECT_FALSE(store.get_binary("key-old").has_value());
  EXPECT_EQ(store.all_best().size(), 1u);
}

TEST_F(StoreTest, DefinitionAndToolchainChangesAreStaleToo) {
  Store store = Store::open(file("stale2.db"));
  auto ids = start(store);
  store.record(ok(ids.run, "B=1", "X=1", 3.0));
  CurrentVersions same;
  same.kernels["mla"] = {mla_v1.template_hash, mla_v1.definition_hash};
  same.nvrtc_version = "13.0";
  EXPECT_TRUE(store.stale(same).empty());

  CurrentVersions new_definitions = same;
  new_definitions.kernels["mla"].definition_hash = "definition-hash-2";
  auto stale = store.stale(new_definitions);
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_NE(stale[0].reason.find("parameter definitions changed"), std::string::npos);

  CurrentVersions new_nvrtc = same;
  new_nvrtc.nvrtc_version = "13.1";
  stale = store.stale(new_nvrtc);
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(stale[0].kind, StaleEntry::Kind::toolchain);
  EXPECT_EQ(stale[0].measurements, 1);

  // Kernels the caller does not know about are left alone.
  CurrentVersions unrelated;
  unrelated.kernels["gemm"] = {"x", "y"};
  EXPECT_TRUE(store.stale(unrelated).empty());
  EXPECT_EQ(store.prune(unrelated).measurements, 0);

  PruneCounts pruned = store.prune(new_nvrtc);
  EXPECT_EQ(pruned.toolchains, 1);
  EXPECT_EQ(pruned.measurements, 1);
  EXPECT_EQ(store.measurement_count(), 0);
}

TEST_F(StoreTest, BinariesRoundTripAndKeepTheFirstContent) {
  Store store = Store::open(file("bin.db"));
  std::vector<std::uint8_t> cubin(100'000);
  std::mt19937 rng(3);
  for (auto& b : cubin) b = static_cast<std::uint8_t>(rng());
  store.put_binary(BinaryRecord{"k1", "mla", "t", "13.0", "sm_90", cubin, R"({"registers": 40})"});
  store.put_binary(BinaryRecord{"k1", "mla", "t", "13.0", "sm_90", {9}, "{}"});
  auto got = store.get_binary("k1");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->cubin, cubin);
  EXPECT_EQ(got->resources_json, R"({"registers": 40})");
  EXPECT_EQ(got->arch, "sm_90");
  EXPECT_FALSE(store.get_binary("k2").has_value());
}

// The blob a binary is stored as, read past the store.
std::vector<std::uint8_t> stored_blob(const fs::path& db, const std::string& key) {
  auto connection = sqlite::Connection::open(db, sqlite::OpenMode::read_only);
  auto s = connection.prepare("SELECT cubin FROM binaries WHERE key = ?1");
  s.bind(1, key);
  EXPECT_TRUE(s.step()) << key;
  return s.column_blob(0);
}

using test_support::insert_blob;
using test_support::zlib_packed;

TEST_F(StoreTest, CubinsAreStoredCompressedAndReadBackExactly) {
  // A real cubin: the flagship's default config at S0 for sm_90 (NVRTC, no GPU).
  const SearchSpace space = SearchSpace::load(fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" /
                                              "fused_mla_attention.yaml");
  const Shape s0 = space.parse_shape("B=2,T=32,H=4,D=16,R=24");
  CompileResult compiled = Compiler().compile(compile_request(space, space.default_config(), s0, "sm_90"));
  ASSERT_TRUE(compiled.ok()) << compiled.failure().message;
  const std::vector<std::uint8_t> cubin(compiled.binary().cubin.begin(), compiled.binary().cubin.end());
  ASSERT_EQ(std::string(cubin.begin(), cubin.begin() + 4), "\x7f" "ELF");

  Store store = Store::open(file("packed.db"));
  store.put_binary(BinaryRecord{"real", "mla", "t", "13.0", "sm_90", cubin, "{}"});
  const std::vector<std::uint8_t> blob = stored_blob(file("packed.db"), "real");
  EXPECT_EQ(std::string(blob.begin(), blob.begin() + 4), "MLS1");
  EXPECT_LT(blob.size() * 2, cubin.size()) << "a cubin of " << cubin.size() << " bytes took " << blob.size();
  std::printf("cubin %zu bytes, stored %zu (%.2fx smaller)\n", cubin.size(), blob.size(),
              static_cast<double>(cubin.size()) / static_cast<double>(blob.size()));
  std::optional<BinaryRecord> got = store.get_binary("real");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->cubin, cubin);
  // Bytes that do not compress (random) still come back whole.
  std::vector<std::uint8_t> noise(70'001);
  std::mt19937 rng(5);
  for (auto& b : noise) b = static_cast<std::uint8_t>(rng());
  store.put_binary(BinaryRecord{"noise", "mla", "t", "13.0", "sm_90", noise, "{}"});
  EXPECT_EQ(store.get_binary("noise")->cubin, noise);
  store.put_binary(BinaryRecord{"empty", "mla", "t", "13.0", "sm_90", {}, "{}"});
  EXPECT_TRUE(store.get_binary("empty")->cubin.empty());
}

TEST_F(StoreTest, CubinsStoredBeforeCompressionAreReadAsTheyAre) {
  Store store = Store::open(file("old.db"));
  const std::vector<std::uint8_t> elf = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x33, 0, 1, 2, 3};
  insert_blob(file("old.db"), "old", elf);
  std::optional<BinaryRecord> got = store.get_binary("old");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->cubin, elf);
}

TEST_F(StoreTest, CubinsStoredZlibCompressedBeforeZstdAreStillRead) {
  Store store = Store::open(file("zlib.db"));
  std::vector<std::uint8_t> cubin(40'000);
  std::mt19937 rng(11);
  for (std::size_t i = 0; i < cubin.size(); ++i) cubin[i] = static_cast<std::uint8_t>(i % 97 == 0 ? rng() : i / 300);
  const std::vector<std::uint8_t> blob = zlib_packed(cubin);
  ASSERT_LT(blob.size(), cubin.size() / 2);
  insert_blob(file("zlib.db"), "zlib", blob);
  std::optional<BinaryRecord> got = store.get_binary("zlib");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->cubin, cubin);
  // A cut zlib stream is damage, named like a cut zstd frame.
  insert_blob(file("zlib.db"), "zlib_cut", std::vector<std::uint8_t>(blob.begin(), blob.begin() + 40));
  try {
    store.get_binary("zlib_cut");
    ADD_FAILURE() << "read without an error";
  } catch (const EnvironmentError& e) {
    EXPECT_NE(std::string(e.what()).find("binary zlib_cut in "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("zlib"), std::string::npos) << e.what();
  }
}

TEST_F(StoreTest, BinariesStoredBeforeZstdAreRepackedWithItAndReadTheSame) {
  Store store = Store::open(file("repack.db"));
  std::vector<std::uint8_t> cubin(30'000);
  std::mt19937 rng(13);
  for (std::size_t i = 0; i < cubin.size(); ++i) cubin[i] = static_cast<std::uint8_t>(i % 61 == 0 ? rng() : i / 500);
  const std::vector<std::uint8_t> elf = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x33, 0, 1, 2, 3};
  insert_blob(file("repack.db"), "zlib", zlib_packed(cubin));
  insert_blob(file("repack.db"), "raw", elf);
  store.put_binary(BinaryRecord{"new", "mla", "t", "13.0", "sm_90", cubin, "{}"});
  const std::vector<std::uint8_t> new_blob = stored_blob(file("repack.db"), "new");
  std::vector<std::uint8_t> damaged = zlib_packed(cubin);
  damaged.resize(damaged.size() / 2);
  insert_blob(file("repack.db"), "damaged", damaged);

  const Store::Repacked r = store.repack_binaries();
  EXPECT_EQ(r.binaries, 2);
  EXPECT_EQ(r.damaged, 1);
  EXPECT_EQ(r.bytes_before, static_cast<std::int64_t>(zlib_packed(cubin).size() + elf.size()));
  EXPECT_GT(r.bytes_after, 0);
  for (const char* key : {"zlib", "raw", "new"}) {
    const std::vector<std::uint8_t> blob = stored_blob(file("repack.db"), key);
    EXPECT_EQ(std::string(blob.begin(), blob.begin() + 4), "MLS1") << key;
  }
  EXPECT_EQ(stored_blob(file("repack.db"), "new"), new_blob) << "a zstd blob is left as it was";
  EXPECT_EQ(stored_blob(file("repack.db"), "damaged"), damaged) << "a damaged blob is left as it was";
  EXPECT_EQ(store.get_binary("zlib")->cubin, cubin);
  EXPECT_EQ(store.get_binary("raw")->cubin, elf);
  EXPECT_EQ(store.get_binary("new")->cubin, cubin);
  const Store::Repacked again = store.repack_binaries();
  EXPECT_EQ(again.binaries, 0);
  EXPECT_EQ(again.damaged, 1);
  EXPECT_THROW(Store::open(file("repack.db"), StoreMode::read_only).repack_binaries(), EnvironmentError);
}

TEST_F(StoreTest, ADamagedCompressedBinaryIsAnEnvironmentErrorThatNamesIt) {
  Store store = Store::open(file("damaged.db"));
  std::vector<std::uint8_t> good(5000, 7);
  store.put_binary(BinaryRecord{"good", "mla", "t", "13.0", "sm_90", good, "{}"});
  std::vector<std::uint8_t> blob = stored_blob(file("damaged.db"), "good");
  // The frame without its last bytes, and the header with a frame cut short of its own header.
  insert_blob(file("damaged.db"), "cut", std::vector<std::uint8_t>(blob.begin(), blob.end() - 3));
  insert_blob(file("damaged.db"), "headless", std::vector<std::uint8_t>(blob.begin(), blob.begin() + 14));
  std::vector<std::uint8_t> huge = blob;
  huge[11] = 0x7f;  // the recorded size's top byte: far past any cubin
  insert_blob(file("damaged.db"), "huge", huge);
  std::vector<std::uint8_t> lying = blob;
  lying[4] ^= 1;  // a recorded size the zstd frame does not hold: found before unpacking
  insert_blob(file("damaged.db"), "lying", lying);
  const std::map<std::string, std::string> why = {
      {"cut", "zstd: "},
      {"headless", "no zstd frame with its size"},
      {"huge", "says it holds"},
      {"lying", "its zstd frame holds 5000 bytes, 5001 recorded"}};
  for (const auto& [key, reason] : why) {
    SCOPED_TRACE(key);
    try {
      store.get_binary(key);
      ADD_FAILURE() << "read without an error";
    } catch (const EnvironmentError& e) {
      EXPECT_NE(std::string(e.what()).find("binary " + key + " in "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("damaged (" + reason), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(store.get_binary("good")->cubin, good);
}

TEST_F(StoreTest, MissesAreCounted) {
  Store store = Store::open(file("miss.db"));
  auto ids = start(store);
  EXPECT_TRUE(store.record_miss(ids.kernel, ids.device, "B=9"));
  EXPECT_TRUE(store.record_miss(ids.kernel, ids.device, "B=9"));
  EXPECT_TRUE(store.record_miss(ids.kernel, ids.device, "B=8"));
  auto misses = store.misses();
  ASSERT_EQ(misses.size(), 2u);
  EXPECT_EQ(misses[0].shape, "B=9");
  EXPECT_EQ(misses[0].count, 2);
  EXPECT_EQ(misses[0].device_name, "NVIDIA H200");
}

// ---- merge ----------------------------------------------------------------------------

struct Snapshot {
  StoreInfo info;
  std::vector<std::tuple<std::string, std::string, std::string, std::string, double>> best;
};

Snapshot snapshot(Store& store) {
  Snapshot s;
  s.info = store.info();
  for (const auto& b : store.all_best()) {
    s.best.emplace_back(b.kernel.template_hash, b.device.name, b.entry.shape, b.entry.config, b.entry.median_us);
  }
  return s;
}

TEST_F(StoreTest, MergeTwiceEqualsMergeOnce) {
  auto main_path = file("main.db");
  auto shard_path = file("shard.db");
  {
    Store shard = Store::open(shard_path);
    auto ids = start(shard);
    shard.record(ok(ids.run, "B=1", "X=1", 5.0));
    shard.record(ok(ids.run, "B=1", "X=2", 2.0));  // faster than main's best for B=1
    shard.record(ok(ids.run, "B=2", "X=1", 9.0));  // slower than main's best for B=2
    shard.record(failed(ids.run, "B=3", "X=1", Outcome::timeout));
    shard.finish_run(ids.run, RunStatus::finished);
    auto a100_ids = start(shard, mla_v1, a100);
    shard.record(ok(a100_ids.run, "B=1", "X=3", 0.5));  // another device: competes with no one
    shard.put_binary(BinaryRecord{"bin", "mla", "t", "13.0", "sm_90", {1, 2}, "{}"});
    shard.record_miss(ids.kernel, ids.device, "B=7");
  }
  Store store = Store::open(main_path);
  auto ids = start(store);
  store.record(ok(ids.run, "B=1", "X=5", 3.0));
  store.record(ok(ids.run, "B=2", "X=5", 1.0));

  MergeCounts first = store.merge(shard_path);
  EXPECT_EQ(first.runs, 2);
  EXPECT_EQ(first.measurements, 5);
  EXPECT_EQ(first.binaries, 1);
  Snapshot once = snapshot(store);
  EXPECT_EQ(once.info.measurements, 7);
  EXPECT_EQ(once.info.runs, 3);
  EXPECT_EQ(once.info.devices, 2);
  EXPECT_EQ(once.info.kernels, 1);
  EXPECT_EQ(once.info.misses, 1);

  auto b1 = store.best(mla_v1, h200, cuda13, "B=1");
  ASSERT_TRUE(b1.has_value());
  EXPECT_EQ(b1->config, "X=2");
  auto b2 = store.best(mla_v1, h200, cuda13, "B=2");
  ASSERT_TRUE(b2.has_value());
  EXPECT_EQ(b2->config, "X=5");
  auto a1 = store.best(mla_v1, a100, cuda13, "B=1");
  ASSERT_TRUE(a1.has_value());
  EXPECT_EQ(a1->config, "X=3");
  // The best entry points at a measurement of this database with that config.
  bool found = false;
  for (const auto& m : store.measurements({"mla", "B=1"})) {
    if (m.id == b1->measurement_id) {
      found = true;
      EXPECT_EQ(m.measurement.config, "X=2");
      EXPECT_EQ(m.device, h200);
    }
  }
  EXPECT_TRUE(found);

  MergeCounts second = store.merge(shard_path);
  EXPECT_EQ(second.runs, 0);
  EXPECT_EQ(second.measurements, 0);
  EXPECT_EQ(second.binaries, 0);
  EXPECT_EQ(second.best_changed, 0);
  Snapshot twice = snapshot(store);
  EXPECT_EQ(twice.info.measurements, once.info.measurements);
  EXPECT_EQ(twice.info.runs, once.info.runs);
  EXPECT_EQ(twice.info.best, once.info.best);
  EXPECT_EQ(twice.info.binaries, once.info.binaries);
  EXPECT_EQ(twice.info.misses, once.info.misses);
  EXPECT_EQ(twice.best, once.best);
  EXPECT_EQ(store.misses()[0].count, 1);
}

TEST_F(StoreTest, MergeRefusesItselfAndForeignFiles) {
  auto path = file("self.db");
  Store store = Store::open(path);
  EXPECT_THROW(store.merge(path), InputError);
  auto text = file("notes.txt");
  std::ofstream(text) << "just some notes, not a database at all, long enough to have a header......\n";
  EXPECT_THROW(store.merge(text), InputError);
  EXPECT_THROW(store.merge(file("missing.db")), InputError);
}

// ---- refusals ---------------------------------------------------------------------------

void expect_refused(const fs::path& path, const std::string& expected_words) {
  for (StoreMode mode : {StoreMode::read_write, StoreMode::read_only}) {
    std::string before = file_hash(path);
    auto size_before = fs::file_size(path);
    try {
      Store::open(path, mode);
      ADD_FAILURE() << path << " was opened";
    } catch (const InputError& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(expected_words), std::string::npos) << message;
      EXPECT_NE(message.find(path.string()), std::string::npos) << message;
      EXPECT_NE(message.find("left untouched"), std::string::npos) << message;
    }
    EXPECT_EQ(file_hash(path), before) << path;
    EXPECT_EQ(fs::file_size(path), size_before);
  }
}

TEST_F(StoreTest, TruncatedFileIsRefusedAndUnchanged) {
  auto path = file("truncated.db");
  {
    Store store = Store::open(path);
    auto ids = start(store);
    for (int i = 0; i < 300; ++i) store.record(ok(ids.run, "B=" + std::to_string(i), "X=1", 1.0 + i));
  }
  ASSERT_FALSE(fs::exists(file("truncated.db-wal")));  // checkpointed on close
  auto full = fs::file_size(path);
  ASSERT_GT(full, 8192u);
  fs::resize_file(path, full / 2 + 100);  // cut mid-page
  expect_refused(path, "truncated");
  fs::resize_file(path, (full / 2) / 4096 * 4096);  // cut on a page boundary
  expect_refused(path, "truncated");
  fs::resize_file(path, 60);  // cut inside the header
  expect_refused(path, "truncated");
}

TEST_F(StoreTest, NonSqliteFileIsRefusedAndUnchanged) {
  auto path = file("notes.db");
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 200; ++i) out << "line " << i << " of a text file that is not a database\n";
  }
  expect_refused(path, "not an SQLite database");
}

TEST_F(StoreTest, ForeignSqliteDatabaseIsRefusedAndUnchanged) {
  auto path = file("foreign.db");
  {
    auto db = sqlite::Connection::open(path, sqlite::OpenMode::read_write_create);
    db.execute("CREATE TABLE recipes(name TEXT); INSERT INTO recipes VALUES('bread')");
  }
  expect_refused(path, "not an mlatune database");
}

TEST_F(StoreTest, NewerSchemaIsRefusedAndUnchanged) {
  auto path = file("newer.db");
  { Store store = Store::open(path); }
  {
    auto db = sqlite::Connection::open(path, sqlite::OpenMode::read_write_create);
    db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'");
    // Back to a single file, so the bytes compared are all there is.
    db.execute("PRAGMA journal_mode = DELETE");
  }
  expect_refused(path, "schema version 99 is newer");
  EXPECT_FALSE(fs::exists(file("newer.db-wal")));
}

TEST_F(StoreTest, NewerSchemaInWalModeIsRefusedAndUnchanged) {
  auto path = file("newer_wal.db");
  { Store store = Store::open(path); }
  {
    auto db = sqlite::Connection::open(path, sqlite::OpenMode::read_write_create);
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'");
  }
  ASSERT_FALSE(fs::exists(file("newer_wal.db-wal")));  // checkpointed on close
  expect_refused(path, "schema version 2 is newer");
  // Nothing was written beside it either: no write-ahead log with content.
  auto wal = file("newer_wal.db-wal");
  EXPECT_TRUE(!fs::exists(wal) || fs::file_size(wal) == 0);
}

// ---- read-only ---------------------------------------------------------------------------

TEST_F(StoreTest, ReadOnlyStoreServesLookupsAndRefusesWrites) {
  auto path = file("ro.db");
  std::int64_t fast = 0;
  {
    Store store = Store::open(path);
    auto ids = start(store);
    store.record(ok(ids.run, "B=1", "X=1", 3.0));
    fast = store.record(ok(ids.run, "B=1", "X=2", 1.0));
  }
  std::string before = file_hash(path);
  {
    Store store = Store::open(path, StoreMode::read_only);
    EXPECT_TRUE(store.read_only());
    auto best = store.best(mla_v1, h200, cuda13, "B=1");
    ASSERT_TRUE(best.has_value());
    EXPECT_EQ(best->measurement_id, fast);
    EXPECT_EQ(store.all_best().size(), 1u);
    EXPECT_FALSE(store.record_miss(best->kernel_id, best->device_id, "B=5"));
    EXPECT_THROW(store.record(ok(1, "B=1", "X=3", 0.1)), EnvironmentError);
    EXPECT_THROW(store.ensure_device(a100), EnvironmentError);
    EXPECT_EQ(store.ensure_device(h200), best->device_id);  // finding needs no write
    EXPECT_TRUE(store.info().read_only);
  }
  EXPECT_EQ(file_hash(path), before);
  EXPECT_THROW(Store::open(file("absent.db"), StoreMode::read_only), InputError);
}

TEST_F(StoreTest, ReadOnlyStoreWorksWhereNoShmFileCanBeMade) {
  // Stand-in for a read-only file system (the tests may run as root, which
  // ignores permissions): a directory where SQLite wants its -shm file.
  auto path = file("ro_fs.db");
  {
    Store store = Store::open(path);
    auto ids = start(store);
    store.record(ok(ids.run, "B=1", "X=1", 3.0));
  }
  ASSERT_FALSE(fs::exists(file("ro_fs.db-shm")));
  fs::create_directory(file("ro_fs.db-shm"));
  std::string before = file_hash(path);
  {
    Store store = Store::open(path, StoreMode::read_only);
    auto best = store.best(mla_v1, h200, cuda13, "B=1");
    ASSERT_TRUE(best.has_value());
    EXPECT_EQ(best->config, "X=1");
  }
  EXPECT_EQ(file_hash(path), before);
}

TEST_F(StoreTest, ReadOnlyStoreReadsAWriterLeftWalWhereNoShmFileCanBeMade) {
  // A writer died with commits still in its -wal, and the folder cannot take
  // a -shm file: the store still serves every committed entry.
  auto live = file("live.db");
  auto path = file("left.db");
  Store writer = Store::open(live);
  auto ids = start(writer);
  writer.record(ok(ids.run, "B=1", "X=1", 3.0));
  {
    auto raw = sqlite::Connection::open(live, sqlite::OpenMode::read_write_create);
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)");
  }
  auto hold = sqlite::Connection::open(live, sqlite::OpenMode::read_write_create);
  hold.execute("PRAGMA wal_autocheckpoint = 0");
  writer.record(ok(ids.run, "B=2", "X=1", 3.0));
  ASSERT_GT(fs::file_size(file("live.db-wal")), 0u);
  fs::copy_file(live, path);
  fs::copy_file(file("live.db-wal"), file("left.db-wal"));
  fs::create_directory(file("left.db-shm"));
  Store store = Store::open(path, StoreMode::read_only);
  EXPECT_TRUE(store.best(mla_v1, h200, cuda13, "B=1").has_value());
  EXPECT_TRUE(store.best(mla_v1, h200, cuda13, "B=2").has_value());
}

TEST_F(StoreTest, ReadOnlyStoreFallsBackToImmutableWhenTheWalCannotBeRead) {
  auto path = file("nowal.db");
  {
    Store store = Store::open(path);
    auto ids = start(store);
    store.record(ok(ids.run, "B=1", "X=1", 3.0));
  }
  fs::create_directory(file("nowal.db-wal"));
  fs::create_directory(file("nowal.db-shm"));
  {
    auto plain = sqlite::Connection::open(path, sqlite::OpenMode::read_only);
    EXPECT_THROW(plain.prepare("SELECT count(*) FROM best").step(), sqlite::Error);
  }
  Store store = Store::open(path, StoreMode::read_only);
  auto best = store.best(mla_v1, h200, cuda13, "B=1");
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->config, "X=1");
}

}  // namespace
}  // namespace mlatune
