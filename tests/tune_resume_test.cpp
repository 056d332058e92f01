// A sweep killed with SIGKILL at a random moment and started again evaluates
// nothing twice and misses nothing: `mlatune tune --replay` (the real program,
// measurements served from the recorded H200 sweep, so no GPU is needed) on S1's
// 3205 valid configs, killed and resumed in several trials.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.h"
#include "core/error.h"
#include "core/space.h"
#include "tests/h200_sweeps_where.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path space_file = fs::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";
const fs::path replay_file = fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv";
const char* shape_text = "B=4,T=256,H=8,D=32,R=64";

pid_t start_tune(const fs::path& db, std::vector<std::string> extra = {}) {
  std::fflush(nullptr);  // or the child would write this process's buffered output again
  pid_t pid = fork();
  if (pid == 0) {
    std::string program = (fs::path(MLATUNE_BINARY_DIR) / "mlatune").string();
    std::vector<std::string> args = {program, "tune", space_file.string(), "--db", db.string(), "-q"};
    if (extra.empty()) extra = {"--replay", replay_file.string()};
    // The recorded sweeps measured exact configs only (shape-bucketed ones
    // did not exist yet): replay serves that subspace.
    if (std::find(extra.begin(), extra.end(), "--replay") != extra.end())
      extra.insert(extra.end(), {"--where", kH200SweepsWhere});
    if (std::find(extra.begin(), extra.end(), "--misses") == extra.end())
      args.insert(args.end(), {"--shape", shape_text});
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

/// Committed measurements in `db`, 0 while it is absent or still being created.
std::int64_t committed(const fs::path& db) {
  try {
    if (fs::exists(db)) return Store::open(db, StoreMode::read_only).measurement_count();
  } catch (const Error&) {
    // Created but not yet an mlatune database (the schema is being written),
    // or busy: nothing to count yet.
  }
  return 0;
}

/// Waits (at most `limit`) until the sweep writing `db` has committed a
/// measurement: the whole replayed sweep takes about 0.2 s, so a kill timed
/// from the start alone lands before it or after it on a loaded machine.
void wait_for_a_commit(const fs::path& db, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (committed(db) == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(500));
}

TEST(TuneResume, KilledSweepsResumeWithoutDuplicatesOrGaps) {
  ASSERT_TRUE(fs::exists(fs::path(MLATUNE_BINARY_DIR) / "mlatune"));
  SearchSpace space = SearchSpace::load(space_file).restrict({kH200SweepsWhere});
  Shape shape = space.parse_shape(shape_text);
  const std::uint64_t valid = space.count(shape);
  ASSERT_EQ(valid, 3205u);
  std::mt19937_64 rng(20261129);
  int killed_midway = 0;
  for (int trial = 0; trial < 6; ++trial) {
    fs::path dir = fs::temp_directory_path() / ("mlatune_resume_" + std::to_string(getpid()) + "_" +
                                               std::to_string(trial));
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::path db = dir / "sweep.db";

    pid_t first = start_tune(db);
    // The first two trials kill early, maybe while the database is being
    // created; the others once a measurement is committed, a little later.
    if (trial >= 2) wait_for_a_commit(db, std::chrono::seconds(30));
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(0, trial >= 2 ? 30 : 60)(rng)));
    kill(first, SIGKILL);
    int status = 0;
    waitpid(first, &status, 0);
    // Killed while the file was being created: nothing was committed, and
    // the resumed sweep must start it over.
    const std::int64_t before = committed(db);
    std::printf("trial %d: %lld of %llu committed when killed\n", trial, static_cast<long long>(before),
                static_cast<unsigned long long>(valid));
    if (WIFSIGNALED(status) && before > 0 && before < static_cast<std::int64_t>(valid)) ++killed_midway;

    pid_t second = start_tune(db);
    waitpid(second, &status, 0);
    ASSERT_TRUE(WIFEXITED(status)) << "trial " << trial;
    ASSERT_EQ(WEXITSTATUS(status), 0) << "trial " << trial;

    Store store = Store::open(db, StoreMode::read_only);
    std::vector<MeasurementRecord> records = store.measurements({space.kernel_name(), space.shape_string(shape)});
    std::set<std::string> configs;
    for (const MeasurementRecord& r : records) configs.insert(r.measurement.config);
    EXPECT_EQ(records.size(), valid) << "trial " << trial << ": " << before << " committed before the kill";
    EXPECT_EQ(configs.size(), valid) << "trial " << trial << ": a config was measured twice or never";
    fs::remove_all(dir);
  }
  // The kills must land mid-sweep for the test to mean anything (the last
  // four wait for a commit first).
  EXPECT_GE(killed_midway, 2);
}

// `--replay RUN_ID` replays a run stored in the database: a model-guided
// sweep of 400 configs (13% of S1) over the replayed exhaustive run comes
// within 3% of its optimum (random search needs about 1100 for that).
TEST(TuneReplay, ARunOfTheDatabaseCanBeReplayed) {
  fs::path dir = fs::temp_directory_path() / ("mlatune_replay_run_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::path db = dir / "sweep.db";
  int status = 0;
  waitpid(start_tune(db), &status, 0);  // run 1: the whole recorded S1 sweep, from the CSV
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  waitpid(start_tune(db, {"--replay", "1", "--strategy", "model", "--max-evals", "400", "--seed", "5"}), &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  Store store = Store::open(db, StoreMode::read_only);
  std::vector<RunRecord> runs = store.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].strategy, "model");
  std::optional<double> best_first, best_second;
  std::size_t second_count = 0;
  for (const MeasurementRecord& r : store.measurements({"fused_mla_attention", shape_text})) {
    if (!r.measurement.timing) continue;
    std::optional<double>& best = r.run_uuid == runs[0].uuid ? best_first : best_second;
    if (r.run_uuid != runs[0].uuid) ++second_count;
    if (!best || r.measurement.timing->median_us < *best) best = r.measurement.timing->median_us;
  }
  EXPECT_EQ(second_count, 400u);
  ASSERT_TRUE(best_first && best_second);
  EXPECT_LE(*best_second, 1.03 * *best_first);
  fs::remove_all(dir);
}

// `tune --where` searches a subspace and records under the space itself:
// exactly the tf32x3 configs at S1 are evaluated, and they are the space's
// results (the dispatcher's best query finds them).
TEST(TuneWhere, ASubspaceIsSweptAndRecordedUnderTheSpace) {
  fs::path dir = fs::temp_directory_path() / ("mlatune_where_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::path db = dir / "where.db";
  SearchSpace space = SearchSpace::load(space_file);
  SearchSpace tc = space.restrict({"ALGORITHM == tf32x3", "SHAPE_BUCKETS == exact", "KEY_SPLITS == 1", "UNROLL == 1"});
  const Shape shape = space.parse_shape(shape_text);
  const std::uint64_t expected = tc.count(shape);
  ASSERT_GT(expected, 0u);
  ASSERT_LT(expected, space.count(shape));
  int status = 0;
  waitpid(start_tune(db, {"--replay", replay_file.string(), "--where", "ALGORITHM == tf32x3"}), &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  Store store = Store::open(db, StoreMode::read_only);
  std::uint64_t count = 0;
  for (const MeasurementRecord& r : store.measurements({"fused_mla_attention", shape_text})) {
    EXPECT_EQ(r.measurement.config.rfind("ALGORITHM=tf32x3,", 0), 0u) << r.measurement.config;
    ++count;
  }
  EXPECT_EQ(count, expected);
  // The best entry is kept for the space itself (the kernel record the
  // dispatcher looks up), and it is a tf32x3 config.
  bool found = false;
  for (const BestRecord& record : store.all_best()) {
    if (record.kernel.definition_hash != space.definition_hash() || record.entry.shape != shape_text) continue;
    found = true;
    EXPECT_EQ(record.entry.config.rfind("ALGORITHM=tf32x3,", 0), 0u) << record.entry.config;
  }
  EXPECT_TRUE(found);
  fs::remove_all(dir);
}

// `tune --misses` tunes exactly the shapes the dispatcher recorded as
// untuned: here one miss (S1) and a miss of another kernel family.
TEST(TuneMisses, TunesTheShapesTheDispatcherMissed) {
  fs::path dir = fs::temp_directory_path() / ("mlatune_misses_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::path db = dir / "misses.db";
  SearchSpace space = SearchSpace::load(space_file);
  {
    Store store = Store::open(db);
    auto kernel = store.ensure_kernel({space.kernel_name(), space.template_hash(), space.definition_hash()});
    auto other = store.ensure_kernel({"another_family", "a", "b"});
    auto device = store.ensure_device({"NVIDIA H200", "sm_90", 132, 150'000'000'000, "13.0"});
    ASSERT_TRUE(store.record_miss(kernel, device, shape_text));
    ASSERT_TRUE(store.record_miss(kernel, device, shape_text));
    ASSERT_TRUE(store.record_miss(other, device, "B=1,T=1,H=1,D=1,R=1"));
  }
  int status = 0;
  waitpid(start_tune(db, {"--misses", "--replay", replay_file.string()}), &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  Store store = Store::open(db, StoreMode::read_only);
  std::set<std::string> shapes;
  for (const MeasurementRecord& r : store.measurements()) shapes.insert(r.measurement.shape);
  EXPECT_EQ(shapes, std::set<std::string>{shape_text});
  EXPECT_EQ(store.measurement_count(), 3205);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mlatune
