// (Options and their checks; tests/tune_cli_test.cpp pins what tune prints.)
// `mlatune tune` run as the built program, where no GPU is needed: every
// option is checked whether the run would use it, compile-only honours
// --max-evals and refuses --strategy, and a space far too large to enumerate
// is counted, listed and compiled from in small memory and little time.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/run_program.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
const fs::path spaces_dir = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";
const fs::path program = fs::path(MLATUNE_BINARY_DIR) / "mlatune";

class TuneCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(program)) GTEST_SKIP() << "the mlatune program is not built at " << program;
    dir_ = fs::temp_directory_path() /
           ("mlatune_tune_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Killed after two minutes: everything here must finish in seconds.
  test_support::ProgramResult run(std::vector<std::string> args,
                                  const std::optional<std::pair<std::string, std::optional<std::string>>>&
                                      environment = {}) {
    return test_support::run_program(program, args, dir_, environment, 120);
  }

  std::vector<std::string> compile_only(const std::string& space, std::vector<std::string> more) {
    std::vector<std::string> args = {"tune",  (spaces_dir / space).string(), "--compile-only",
                                     "--arch", "sm_90", "--quiet", "--db", db().string()};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  fs::path db() const { return dir_ / "tune.db"; }

  static void expect_clean_error(const test_support::ProgramResult& r) {
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
  }

  fs::path dir_;
};

TEST_F(TuneCli, EveryOptionIsCheckedWhetherTheRunUsesItOrNot) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--seed", "-1"}, "--seed: '-1' is not a whole number of at least 0"},
      {{"--seed", "12x"}, "--seed: '12x' is not a whole number"},
      {{"--max-evals", "0"}, "--max-evals: '0' is not a whole number of at least 1"},
      {{"--max-evals", "-3"}, "--max-evals: '-3' is not a whole number"},
      {{"--strategy", "bogus"}, "--strategy: unknown strategy 'bogus' (valid: auto, brute_force"},
      {{"--time-budget", "10x"}, "--time-budget '10x': column 3: unknown unit 'x'"},
      {{"--time-budget", "90"}, "--time-budget '90': column 3: a unit must follow 90"},
      {{"--budget-ms", "nan"}, "--budget-ms: 'nan' is not a finite number above 0"},
      {{"--budget-ms", "inf"}, "--budget-ms: 'inf' is not a finite number above 0"},
      {{"--cutoff", "inf"}, "--cutoff: must be 0 (no early cut) or a finite number above 1"},
      {{"--cutoff", "1"}, "--cutoff: must be 0 (no early cut) or a finite number above 1"},
      {{"--first-launch-cut", "0.5"}, "--first-launch-cut: must be 0 (never) or a finite number of at least 1"},
      {{"--first-launch-cut", "2x"}, "--first-launch-cut: must be 0 (never) or a finite number of at least 1"},
      {{"--jobs", "-1"}, "--jobs: '-1' is not a whole number from 0 to 1024"},
      {{"--cache", "warm"}, "--cache"},
  };
  for (const auto& [options, message] : cases) {
    SCOPED_TRACE(options[0] + " " + options[1]);
    auto r = run(compile_only("small.yaml", options));
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_LT(r.err.size(), 400u) << r.err;  // no 300-digit range
    expect_clean_error(r);
    EXPECT_FALSE(fs::exists(db())) << "it ran";
  }
}

TEST_F(TuneCli, CompileOnlyRefusesAStrategyAndHonoursMaxEvals) {
  auto refused = run(compile_only("small.yaml", {"--strategy", "random"}));
  EXPECT_EQ(refused.code, 2) << refused.err;
  EXPECT_NE(refused.err.find("--strategy random cannot be used with --compile-only"), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("--max-evals"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(db()));

  auto text = run(compile_only("small.yaml", {"--shape", "N=64,M=3", "--max-evals", "3", "--seed", "5"}));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("35 valid configs, compiling a uniform random 3 of them"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("total: 3 configs for sm_90"), std::string::npos) << text.out;

  auto json = run(compile_only("small.yaml", {"--shape", "N=64,M=3", "--max-evals", "3", "--seed", "5", "--json"}));
  ASSERT_EQ(json.code, 0) << json.err;
  nlohmann::json report = nlohmann::json::parse(json.out);
  ASSERT_EQ(report["shapes"].size(), 1u);
  const nlohmann::json& configs = report["shapes"][0]["configs"];
  ASSERT_EQ(configs.size(), 3u);
  std::set<std::string> distinct;
  for (const auto& c : configs) {
    distinct.insert(c["config"].get<std::string>());
    // The same seed draws the same subset, in the same order.
    EXPECT_NE(text.out.find(c["config"].get<std::string>()), std::string::npos) << c["config"];
  }
  EXPECT_EQ(distinct.size(), 3u);
  EXPECT_EQ(report["totals"]["configs"], 3);

  // More than there are: every valid config, once.
  auto all = run(compile_only("small.yaml", {"--shape", "N=64,M=3", "--max-evals", "1000", "--json"}));
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_EQ(nlohmann::json::parse(all.out)["totals"]["configs"], 35);
}

// Errors in --where and --shape name the option and a column of its text,
// not a line of the space file or of text generated from it.
TEST_F(TuneCli, WhereAndShapeErrorsPointIntoTheOption) {
  auto r = run(compile_only("small.yaml", {"--where", "THREADS = 64"}));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("mlatune: error: --where 'THREADS = 64': column 9: '=' is an assignment", 0), 0u)
      << r.err;
  r = run(compile_only("small.yaml", {"--where", "ITEMS <= 2", "--where", "THREDS > 32"}));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("mlatune: error: --where 'THREDS > 32': column 1: unknown name 'THREDS'", 0), 0u)
      << r.err;
  EXPECT_EQ(r.err.find("(restricted)"), std::string::npos) << r.err;
  r = run(compile_only("small.yaml", {"--shape", ""}));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err, "mlatune: error: --shape: empty shape; expected NAME=VALUE for each of N, M\n");
  r = run(compile_only("small.yaml", {"--shape", "N=64,M=3,K=1"}));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("mlatune: error: --shape: shape 'N=64,M=3,K=1': unknown shape variable 'K'", 0), 0u)
      << r.err;
  EXPECT_FALSE(fs::exists(db()));
}

// Hidden from CUDA, no machine has a GPU: a strategy, which needs timing,
// is refused as an environment problem rather than quietly dropped.
TEST_F(TuneCli, WithoutAGpuAStrategyIsRefused) {
  auto r = run({"tune", (spaces_dir / "small.yaml").string(), "--strategy", "annealing", "--arch",
                "sm_90", "--quiet", "--db", db().string()},
               std::pair{std::string("CUDA_VISIBLE_DEVICES"), std::optional<std::string>("")});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("no GPU present"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--strategy annealing needs timing"), std::string::npos) << r.err;
  expect_clean_error(r);
}

// huge.yaml has more than 2^64 raw and valid configs: anything that
// materialized them would never finish.  Peak memory is the program's own
// (wait4's ru_maxrss), NVRTC included.
TEST_F(TuneCli, AHugeSpaceIsCountedListedAndCompiledFromInSmallMemory) {
  const std::string space = (spaces_dir / "huge.yaml").string();
  constexpr long limit_kb = 256 * 1024;
  auto count = run({"space", "count", space});
  ASSERT_EQ(count.code, 0) << count.err;
  EXPECT_EQ(count.out,
            "at least 18446744073709551615 valid of at least 18446744073709551615 raw configs at "
            "N=4096\n");
  EXPECT_LT(count.max_rss_kb, limit_kb);

  auto list = run({"space", "list", space, "--limit", "5"});
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_EQ(std::count(list.out.begin(), list.out.end(), '\n'), 5) << list.out;
  EXPECT_LT(list.max_rss_kb, limit_kb);

  auto tune = run(compile_only("huge.yaml", {"--max-evals", "3", "--seed", "1", "--json"}));
  ASSERT_EQ(tune.code, 0) << tune.err;
  nlohmann::json report = nlohmann::json::parse(tune.out);
  EXPECT_EQ(report["totals"]["configs"], 3);
  EXPECT_EQ(report["totals"]["compiled"], 3);
  EXPECT_LT(tune.max_rss_kb, limit_kb);
}

}  // namespace
}  // namespace mlatune
