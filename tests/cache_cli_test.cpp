// `mlatune cache ...` run as a real program against databases written by the
// Store.  The program is MLATUNE_BINARY_DIR/mlatune (or $MLATUNE_CLI); where
// it has not been built the tests skip and say so.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/store.h"
#include "tests/run_program.h"
#include "tests/stored_blobs.h"
#include "core/hash.h"
#include "core/space.h"
#include "core/compiler.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path cli_path() {
  if (const char* path = std::getenv("MLATUNE_CLI"); path && *path) return path;
  return fs::path(MLATUNE_BINARY_DIR) / "mlatune";
}

using test_support::read_file;
using Result = test_support::ProgramResult;

class CacheCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cli_path())) GTEST_SKIP() << "the mlatune program is not built at " << cli_path();
    dir_ = fs::temp_directory_path() /
           ("mlatune_cache_cli_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  /// Runs mlatune with `args`; $MLATUNE_DB is set to `env_db` when given.
  Result run(const std::vector<std::string>& args, const std::string& env_db = "") {
    std::optional<std::string> value;
    if (!env_db.empty()) value = env_db;
    return test_support::run_program(cli_path(), args, dir_, std::pair{std::string("MLATUNE_DB"), value});
  }

  /// A database with one run: two shapes, a failure whose message needs CSV
  /// quoting, and one binary.
  fs::path make_db(const std::string& name, double offset = 0) {
    auto path = dir_ / name;
    Store store = Store::open(path);
    auto k = store.ensure_kernel({"mla", "aaaabbbbccccdddd", "eeeeffff00001111"});
    auto d = store.ensure_device({"NVIDIA H200", "sm_90", 132, 150'000'000'000, "580.65"});
    auto t = store.ensure_toolchain({"13.0", "0.1.0"});
    auto run = store.begin_run({k, d, t, "mla.yaml", "kernel: mla\n", "brute_force", "{}"});
    for (int i = 0; i < 4; ++i) {
      Measurement m;
      m.run_id = run;
      m.shape = i % 2 ? "B=2,T=32" : "B=4,T=64";
      m.config = "ALGORITHM=absorbed,TILE=" + std::to_string(16 << i);
      m.timing = Timing{10.0 + i + offset, 9.0 + i, 11.0 + i, 100, 0.1, "events"};
      m.error = ErrorFigures{1e-7, 1e-6};
      store.record(m);
    }
    Measurement bad;
    bad.run_id = run;
    bad.shape = "B=2,T=32";
    bad.config = "ALGORITHM=expanded,TILE=256";
    bad.outcome = Outcome::compile_error;
    bad.message = "say \"hi\", then\nbye";
    store.record(bad);
    store.finish_run(run, RunStatus::finished);
    return path;
  }

  fs::path dir_;
};

TEST_F(CacheCliTest, InfoCountsWhatTheStoreHolds) {
  auto db = make_db("a.db");
  Result r = run({"cache", "info", "--json", "--db", db.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  json info = json::parse(r.out);
  EXPECT_EQ(info["schema_version"], Store::schema_version);
  EXPECT_EQ(info["measurements"], 5);
  EXPECT_EQ(info["best"], 2);
  EXPECT_EQ(info["runs"], 1);
  Result text = run({"cache", "--db", db.string(), "info"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("schema version  1"), std::string::npos) << text.out;
}

TEST_F(CacheCliTest, DatabaseComesFromTheOptionElseTheEnvironment) {
  auto from_env = make_db("env.db");
  Result r = run({"cache", "best", "--json"}, from_env.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).size(), 2u);
  auto empty_option = dir_ / "other.db";
  { Store store = Store::open(empty_option); }
  r = run({"cache", "best", "--json", "--db", empty_option.string()}, from_env.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).size(), 0u);
}

TEST_F(CacheCliTest, BestAndShowAgreeWithTheStore) {
  auto db = make_db("a.db");
  Result best = run({"cache", "best", "--json", "--db", db.string()});
  ASSERT_EQ(best.code, 0) << best.err;
  json entries = json::parse(best.out);
  ASSERT_EQ(entries.size(), 2u);
  for (const auto& e : entries) {
    if (e["shape"] == "B=2,T=32") {
      EXPECT_EQ(e["config"], "ALGORITHM=absorbed,TILE=32");
      EXPECT_DOUBLE_EQ(e["median_us"].get<double>(), 11.0);
    } else {
      EXPECT_EQ(e["config"], "ALGORITHM=absorbed,TILE=16");
    }
  }
  // The shape may be written in another order or with spaces.
  Result show = run({"cache", "show", "--kernel", "mla", "--shape", "T=32, B=2", "--json", "--db", db.string()});
  ASSERT_EQ(show.code, 0) << show.err;
  json rows = json::parse(show.out);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2]["outcome"], "compile_error");
  EXPECT_TRUE(rows[2]["timing"].is_null());
  Result none = run({"cache", "show", "--kernel", "gemm", "--db", db.string()});
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_NE(none.out.find("no measurements of kernel gemm"), std::string::npos) << none.out;
  Result table = run({"cache", "show", "--db", db.string()});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("5 measurement(s)"), std::string::npos) << table.out;
}

TEST_F(CacheCliTest, ExportCsvQuotesAsRfc4180AndJsonHoldsEverything) {
  auto db = make_db("a.db");
  Result csv = run({"cache", "export", "--format", "csv", "--db", db.string()});
  ASSERT_EQ(csv.code, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("id,run,kernel,", 0), 0u);
  EXPECT_NE(csv.out.find(",\"say \"\"hi\"\", then\nbye\","), std::string::npos) << csv.out;
  EXPECT_NE(csv.out.find(",\"B=2,T=32\",\"ALGORITHM=absorbed,TILE=32\",ok,11,"), std::string::npos) << csv.out;
  std::size_t records = 0;
  for (std::size_t at = csv.out.find("\r\n"); at != std::string::npos; at = csv.out.find("\r\n", at + 2)) ++records;
  EXPECT_EQ(records, 6u);  // header + 5 measurements; the quoted line break is not a record end

  auto out = dir_ / "all.json";
  Result js = run({"cache", "export", "--format", "json", "-o", out.string(), "--db", db.string()});
  ASSERT_EQ(js.code, 0) << js.err;
  json all = json::parse(read_file(out));
  EXPECT_EQ(all["measurements"].size(), 5u);
  EXPECT_EQ(all["best"].size(), 2u);
  EXPECT_EQ(all["measurements"][4]["message"], "say \"hi\", then\nbye");

  Result bad = run({"cache", "export", "--format", "xml", "--db", db.string()});
  EXPECT_EQ(bad.code, 2);
}

TEST_F(CacheCliTest, ExportNeverOverwritesTheDatabaseAndAnotherOneOnlyWithForce) {
  auto db = make_db("a.db");
  const std::string before = content_hash(read_file(db));
  fs::create_hard_link(db, dir_ / "hard.db");
  fs::create_symlink(db, dir_ / "soft.csv");
  for (const fs::path& target : {db, dir_ / "hard.db", dir_ / "soft.csv"}) {
    SCOPED_TRACE(target.string());
    Result r = run({"cache", "export", "--format", "csv", "-o", target.string(), "--force", "--db",
                    db.string()});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("is the database"), std::string::npos) << r.err;
  }
  EXPECT_EQ(content_hash(read_file(db)), before);

  auto other = make_db("other.db");
  const std::string other_before = content_hash(read_file(other));
  Result refused = run({"cache", "export", "--format", "csv", "-o", other.string(), "--db", db.string()});
  EXPECT_EQ(refused.code, 2) << refused.err;
  EXPECT_NE(refused.err.find("is an SQLite database"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--force"), std::string::npos) << refused.err;
  EXPECT_EQ(content_hash(read_file(other)), other_before);
  Result forced = run({"cache", "export", "--format", "csv", "-o", other.string(), "--force", "--db",
                       db.string()});
  EXPECT_EQ(forced.code, 0) << forced.err;
  EXPECT_EQ(read_file(other).rfind("id,run,kernel,", 0), 0u);
}

TEST_F(CacheCliTest, MergeTwiceEqualsMergeOnce) {
  auto db = make_db("main.db");
  auto shard = make_db("shard.db", -5.0);  // another run, faster everywhere
  Result first = run({"cache", "merge", shard.string(), "--db", db.string()});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.out.find("1 run(s), 5 measurement(s)"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("2 best entry(ies) changed"), std::string::npos) << first.out;
  Result best_once = run({"cache", "best", "--json", "--db", db.string()});
  Result second = run({"cache", "merge", shard.string(), "--db", db.string()});
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.out.find("0 run(s), 0 measurement(s)"), std::string::npos) << second.out;
  Result best_twice = run({"cache", "best", "--json", "--db", db.string()});
  EXPECT_EQ(best_once.out, best_twice.out);
  EXPECT_EQ(json::parse(run({"cache", "info", "--json", "--db", db.string()}).out)["measurements"], 10);
}

TEST_F(CacheCliTest, ForeignFilesAreRefusedWithExitCode2AndLeftAlone) {
  auto notes = dir_ / "notes.db";
  {
    std::ofstream out(notes, std::ios::binary);
    for (int i = 0; i < 50; ++i) out << "notes, not a database " << i << "\n";
  }
  std::string before = content_hash(read_file(notes));
  for (const char* command : {"info", "best", "vacuum"}) {
    Result r = run({"cache", command, "--db", notes.string()});
    EXPECT_EQ(r.code, 2) << command;
    EXPECT_NE(r.err.find("not an SQLite database"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  }
  auto db = make_db("a.db");
  Result merge = run({"cache", "merge", notes.string(), "--db", db.string()});
  EXPECT_EQ(merge.code, 2) << merge.err;
  EXPECT_EQ(content_hash(read_file(notes)), before);
  Result missing = run({"cache", "info", "--db", (dir_ / "missing.db").string()});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("no such database"), std::string::npos) << missing.err;
  EXPECT_FALSE(fs::exists(dir_ / "missing.db"));
}

TEST_F(CacheCliTest, VacuumKeepsTheContents) {
  auto db = make_db("a.db");
  Result r = run({"cache", "vacuum", "--db", db.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(" -> "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("repacked"), std::string::npos) << "nothing to repack: " << r.out;
  EXPECT_EQ(json::parse(run({"cache", "info", "--json", "--db", db.string()}).out)["measurements"], 5);
}

TEST_F(CacheCliTest, VacuumRepacksBinariesStoredBeforeZstd) {
  auto db = make_db("a.db");
  const std::vector<std::uint8_t> elf(4096, 0x33);
  test_support::insert_blob(db, "old", elf);
  Result r = run({"cache", "vacuum", "--db", db.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("repacked 1 binary(ies) stored before zstd: 4.0 KiB -> "), std::string::npos) << r.out;
  Store store = Store::open(db, StoreMode::read_only);
  EXPECT_EQ(store.get_binary("old")->cubin, elf);
  Result again = run({"cache", "vacuum", "--db", db.string()});
  EXPECT_EQ(again.out.find("repacked"), std::string::npos) << again.out;
}


// The whole loop with a real space file: results recorded under the current
// template are not stale; after the template changes on disk they are listed
// by `stale`, removed by `prune`, and `best` no longer offers them.
TEST_F(CacheCliTest, ATemplateChangeMakesEntriesStaleAndPruneRemovesThem) {
  fs::path space_dir = dir_ / "space";
  fs::create_directories(space_dir);
  for (const char* name : {"small.yaml", "tiny.cu", "tiny_reference.cu"})
    fs::copy_file(fs::path(MLATUNE_TEST_DATA_DIR) / "spaces" / name, space_dir / name);
  fs::path space_file = space_dir / "small.yaml";
  SearchSpace space = SearchSpace::load(space_file);
  fs::path db = dir_ / "stale.db";
  {
    Store store = Store::open(db);
    auto k = store.ensure_kernel({space.kernel_name(), space.template_hash(), space.definition_hash()});
    auto d = store.ensure_device({"NVIDIA H200", "sm_90", 132, 150'000'000'000, "13.0"});
    auto t = store.ensure_toolchain({nvrtc_version(), MLATUNE_VERSION});
    auto run = store.begin_run({k, d, t, space_file.string(), space.text(), "brute_force", "{}"});
    Measurement m;
    m.run_id = run;
    m.shape = space.shape_string(space.default_shapes().front());
    m.config = space.config_string(space.default_config());
    m.timing = Timing{12.5, 12.0, 13.0, 50, 0.08, "events"};
    store.record(m);
    store.finish_run(run, RunStatus::finished);
  }
  Result fresh = run({"cache", "stale", "--db", db.string()});
  ASSERT_EQ(fresh.code, 0) << fresh.err;
  EXPECT_NE(fresh.out.find("nothing stale"), std::string::npos) << fresh.out;

  {
    std::ofstream edit(space_dir / "tiny.cu", std::ios::app);
    edit << "\n// a user edit changes the template's hash\n";
  }
  Result stale = run({"cache", "stale", "--json", "--db", db.string()});
  ASSERT_EQ(stale.code, 0) << stale.err;
  json entries = json::parse(stale.out);
  ASSERT_FALSE(entries.empty()) << stale.out;
  EXPECT_NE(stale.out.find("template"), std::string::npos) << stale.out;

  Result pruned = run({"cache", "prune", "--db", db.string()});
  ASSERT_EQ(pruned.code, 0) << pruned.err;
  Result best = run({"cache", "best", "--json", "--db", db.string()});
  ASSERT_EQ(best.code, 0) << best.err;
  EXPECT_TRUE(json::parse(best.out).empty()) << best.out;
  Result after = run({"cache", "stale", "--db", db.string()});
  EXPECT_NE(after.out.find("nothing stale"), std::string::npos) << after.out;
}

}  // namespace
}  // namespace mlatune
