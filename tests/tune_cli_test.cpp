// `mlatune tune` run as the built program, where no GPU is needed: every
// option is checked whether the run would use it.
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
      {{"--strategy", "bogus"}, "--strategy: unknown strategy 'bogus' (valid: brute_force"},
      {{"--budget-ms", "nan"}, "--budget-ms: 'nan' is not a finite number above 0"},
      {{"--budget-ms", "inf"}, "--budget-ms: 'inf' is not a finite number above 0"},
      {{"--cutoff", "inf"}, "--cutoff: must be 0 (no early cut) or a finite number above 1"},
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

}  // namespace
}  // namespace mlatune
