// A sharded sweep, end to end through the mlatune program and without a GPU:
// the recorded H200 sweeps replayed once into one database, then as 4 shards
// into 4 databases merged with `mlatune cache merge`; the merge must hold the
// same best config per shape and the same measurements (by content: row ids,
// run ids and time stamps differ) as the one sweep, and the shards must not
// overlap.  For exhaustive search, a seeded random search, an adaptive one
// (which splits shapes), and timings quantized, so
// that ties at the best must be broken the same way in both.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cache/store.h"
#include "tests/run_program.h"
#include "tests/h200_sweeps_where.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using Result = test_support::ProgramResult;

const fs::path flagship = fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" / "fused_mla_attention.yaml";
const fs::path recorded = fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv";
// The two exhaustively recorded shapes (S0, S1): 1354 and 3205 configs.
const char* const s0 = "B=2,T=32,H=4,D=16,R=24";
const char* const s1 = "B=4,T=256,H=8,D=32,R=64";

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// A measurement's content: everything but its row id, run and time stamp.
using Row = std::tuple<std::string, std::string, std::string, std::string, std::string, std::string, double, double,
                       double, int, std::string, std::string>;

std::multiset<Row> rows_of(const fs::path& database) {
  std::multiset<Row> rows;
  Store store = Store::open(database, StoreMode::read_only);
  for (const MeasurementRecord& r : store.measurements()) {
    const Measurement& m = r.measurement;
    const Timing t = m.timing.value_or(Timing{-1, -1, -1, -1, -1, ""});
    rows.emplace(r.kernel.name + " " + r.kernel.template_hash + " " + r.kernel.definition_hash,
                 r.device.name + " " + r.device.arch, r.toolchain.nvrtc_version + " " + r.toolchain.mlatune_version,
                 m.shape, m.config, std::string(to_string(m.outcome)), t.median_us, t.min_us, t.p90_us, t.samples,
                 t.method, m.message);
  }
  return rows;
}

/// (kernel, device, shape) -> (config, median) of every best entry.
std::set<std::tuple<std::string, std::string, std::string, std::string, double>> best_of(const fs::path& database) {
  std::set<std::tuple<std::string, std::string, std::string, std::string, double>> best;
  Store store = Store::open(database, StoreMode::read_only);
  for (const BestRecord& b : store.all_best())
    best.emplace(b.kernel.name, b.device.name, b.entry.shape, b.entry.config, b.entry.median_us);
  return best;
}

class ShardReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cli_ = fs::path(MLATUNE_BINARY_DIR) / "mlatune";
    if (!fs::exists(cli_)) GTEST_SKIP() << "the mlatune program is not built at " << cli_;
    dir_ = fs::temp_directory_path() / ("mlatune_shard_replay_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Result mlatune(const std::vector<std::string>& args) { return test_support::run_program(cli_, args, dir_); }

  /// `mlatune tune` of the flagship by replay of `data` into `database`.
  Result tune(const fs::path& data, const fs::path& database, std::vector<std::string> extra) {
    std::vector<std::string> args{"tune", flagship.string(), "--replay", data.string(), "--where", kH200SweepsWhere, "--shape", s0,
                                  "--shape", s1, "--db", database.string(), "-q"};
    args.insert(args.end(), extra.begin(), extra.end());
    return mlatune(args);
  }

  /// One sweep and the same as 4 shards, merged: equal by content, disjoint.
  void expect_shards_merge_to_the_full_sweep(const fs::path& data, const std::vector<std::string>& extra) {
    const fs::path full = dir_ / "full.db";
    Result one = tune(data, full, extra);
    ASSERT_EQ(one.code, 0) << one.err;
    std::vector<std::string> merge{"cache", "merge"};
    std::size_t shard_rows = 0;
    std::set<std::pair<std::string, std::string>> seen;  // (shape, config) over all shards
    for (int i = 0; i < 4; ++i) {
      const fs::path shard = dir_ / ("shard" + std::to_string(i) + ".db");
      std::vector<std::string> with_shard = extra;
      with_shard.insert(with_shard.end(), {"--shard", std::to_string(i) + "/4"});
      Result r = tune(data, shard, with_shard);
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_TRUE(has(r.err, "mlatune: shard " + std::to_string(i) + "/4 (--shard): ")) << r.err;
      for (const Row& row : rows_of(shard)) {
        ++shard_rows;
        EXPECT_TRUE(seen.emplace(std::get<3>(row), std::get<4>(row)).second)
            << std::get<4>(row) << " at " << std::get<3>(row) << " evaluated by two shards";
      }
      merge.push_back(shard.string());
    }
    const fs::path merged = dir_ / "merged.db";
    merge.insert(merge.end(), {"--db", merged.string()});
    Result m = mlatune(merge);
    ASSERT_EQ(m.code, 0) << m.err;

    const std::multiset<Row> expected = rows_of(full);
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(shard_rows, expected.size());
    EXPECT_TRUE(rows_of(merged) == expected) << "the merged shards' measurements differ from the one sweep's";
    const auto best = best_of(full);
    EXPECT_EQ(best.size(), 2u);
    EXPECT_EQ(best_of(merged), best);
  }

  fs::path cli_, dir_;
};

TEST_F(ShardReplayTest, ExhaustiveSweepInFourShardsMergesToTheFullSweep) {
  expect_shards_merge_to_the_full_sweep(recorded, {});
}

TEST_F(ShardReplayTest, SeededRandomSweepInFourShardsMergesToTheFullSweep) {
  expect_shards_merge_to_the_full_sweep(recorded, {"--strategy", "random", "--max-evals", "150", "--seed", "11"});
}

// Annealing adapts to what it measures, so shards take whole shapes: with two
// shapes, shards 0 and 1 search one each exactly as the one sweep does, and
// shards 2 and 3 have nothing to do.
TEST_F(ShardReplayTest, AdaptiveSweepShardsSplitShapesAndMergeToTheFullSweep) {
  expect_shards_merge_to_the_full_sweep(recorded, {"--strategy", "annealing", "--max-evals", "120", "--seed", "5"});
}

// Bayes (what auto chooses with a budget) adapts too.  Without the warm
// start, which reads the shapes a database already holds (a shard's holds
// only its own), the shards search each shape as the one sweep does.
TEST_F(ShardReplayTest, BayesShardsSplitShapesAndMergeToTheFullSweepWithoutWarmStart) {
  expect_shards_merge_to_the_full_sweep(recorded, {"--max-evals", "60", "--seed", "5", "--no-warm-start"});
}

/// `us` rounded to one significant digit (26.3 -> 30, 6.59 -> 7).
double one_digit(double us) {
  const double unit = std::pow(10.0, std::floor(std::log10(us)));
  return std::round(us / unit) * unit;
}

// Event times are quantized: rounded (coarsely, to one significant digit),
// many configs tie at the best, and the merge must still name the one sweep's
// best.
TEST_F(ShardReplayTest, TiesAtTheBestAreBrokenAsInTheFullSweep) {
  std::ifstream in(recorded);
  std::ofstream out(dir_ / "quantized.csv");
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    // Rows are: "shape","config",outcome,median_us,min_us,p90_us,relative_l2.
    const std::size_t after_config = line.find("\",", line.find("\",\"") + 3);
    if (line.empty() || line[0] == '#' || header || after_config == std::string::npos) {
      header = header && (line.empty() || line[0] == '#');
      out << line << '\n';
      continue;
    }
    std::stringstream rest(line.substr(after_config + 2));
    std::string outcome, median;
    std::getline(rest, outcome, ',');
    std::getline(rest, median, ',');
    std::string remainder;
    std::getline(rest, remainder);
    out << line.substr(0, after_config + 2) << outcome << ','
        << (median.empty() ? median : std::to_string(one_digit(std::stod(median)))) << ',' << remainder << '\n';
  }
  out.close();
  Result full = tune(dir_ / "quantized.csv", dir_ / "check.db", {});
  ASSERT_EQ(full.code, 0) << full.err;
  // The fixture really has ties at the best.
  std::map<std::string, std::pair<double, int>> fastest;  // shape -> (best, how many reach it)
  Store store = Store::open(dir_ / "check.db", StoreMode::read_only);
  for (const MeasurementRecord& r : store.measurements()) {
    if (!r.measurement.timing) continue;
    auto& [best, count] = fastest.try_emplace(r.measurement.shape, 1e300, 0).first->second;
    const double t = r.measurement.timing->median_us;
    if (t < best) best = t, count = 0;
    if (t == best) ++count;
  }
  ASSERT_EQ(fastest.size(), 2u);
  for (const auto& [shape, best] : fastest) EXPECT_GT(best.second, 1) << shape;
  expect_shards_merge_to_the_full_sweep(dir_ / "quantized.csv", {});
}

TEST_F(ShardReplayTest, BadShardsAreRefusedBeforeAnythingRuns) {
  const fs::path db = dir_ / "refused.db";
  Result over = tune(recorded, db, {"--shard", "4/4"});
  EXPECT_EQ(over.code, 2);
  EXPECT_TRUE(has(over.err, "mlatune: error: --shard '4/4': shard 4 is not below the shard count 4")) << over.err;
  Result unseeded = tune(recorded, db, {"--shard", "1/4", "--strategy", "random", "--max-evals", "10"});
  EXPECT_EQ(unseeded.code, 2);
  EXPECT_TRUE(has(unseeded.err, "--strategy random draws its candidates at random, so every shard needs the same "
                                "--seed"))
      << unseeded.err;
  Result misses = mlatune({"tune", flagship.string(), "--misses", "--shard", "0/2", "--db", db.string()});
  EXPECT_EQ(misses.code, 2);
  EXPECT_TRUE(has(misses.err, "--misses reads the shapes from each shard's own database")) << misses.err;
  EXPECT_FALSE(fs::exists(db));
}

// A Slurm job-array task takes its shard from the environment and says so.
TEST_F(ShardReplayTest, SlurmArrayTaskChoosesTheShard) {
  ::setenv("SLURM_ARRAY_TASK_COUNT", "4", 1);
  ::setenv("SLURM_ARRAY_TASK_MIN", "1", 1);
  Result r = test_support::run_program(
      cli_, {"tune", flagship.string(), "--replay", recorded.string(), "--where", kH200SweepsWhere, "--shape", s0, "--db", (dir_ / "s.db").string()},
      dir_, std::pair{std::string("SLURM_ARRAY_TASK_ID"), std::optional<std::string>("3")});
  ::unsetenv("SLURM_ARRAY_TASK_COUNT");
  ::unsetenv("SLURM_ARRAY_TASK_MIN");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "mlatune: shard 2/4 (from SLURM_ARRAY_TASK_ID=3, SLURM_ARRAY_TASK_COUNT=4, "
                         "SLURM_ARRAY_TASK_MIN=1): one candidate in 4 of each shape's sequence"))
      << r.err;
  EXPECT_TRUE(has(r.out, "  configs: 1354 valid, 338 planned, 0 already in the database, 338 evaluated now (1016 "
                         "left to other shards)"))
      << r.out;
}

}  // namespace
}  // namespace mlatune
