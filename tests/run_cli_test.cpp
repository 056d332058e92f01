// `mlatune run` as a real program against a database written by the Store.
// Without a GPU it must still print the choice, then say plainly that there
// is no GPU (exit 1); with one it launches and exits 0.
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
#include "tests/tuned_entry.h"
#include "tests/run_program.h"
#include "tests/space_parameter.h"
#include "core/cuda.h"
#include "core/space.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path space_file = fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" /
                            "fused_mla_attention.yaml";

using Result = test_support::ProgramResult;

class RunCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cli_ = fs::path(MLATUNE_BINARY_DIR) / "mlatune";
    if (!fs::exists(cli_)) GTEST_SKIP() << "the mlatune program is not built at " << cli_;
    dir_ = fs::temp_directory_path() / ("mlatune_run_cli_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = dir_ / "tuned.db";
    space_ = std::make_unique<SearchSpace>(SearchSpace::load(space_file));
    gpu_ = probe_gpu().usable;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Result run(const std::vector<std::string>& args) { return test_support::run_program(cli_, args, dir_); }

  void tune(const Shape& shape, const Config& config, double median_us) {
    record_tuned_entry(db_, *space_, space_file, DeviceInfo{"NVIDIA Test GPU", "sm_90", 1, 1, "13.0"},
                       space_->shape_string(shape), space_->config_string(config), "test",
                       Timing{median_us, median_us, median_us, 5, 0, "test"}, ErrorFigures{1e-8, 1e-7});
  }

  fs::path cli_, dir_, db_;
  std::unique_ptr<SearchSpace> space_;
  bool gpu_ = false;
};

bool float4(const SearchSpace& space, const Config& config) {
  std::size_t p = parameter_index(space, "FLOAT4");
  return space.parameters()[p].numeric[config.choice[p]] != 0;
}

TEST_F(RunCliTest, PrintsTheNearestValidChoiceAndSaysWhenThereIsNoGpu) {
  const Shape s0 = space_->parse_shape("B=2,T=32,H=4,D=16,R=24");
  const Shape s1 = space_->parse_shape("B=4,T=256,H=8,D=32,R=64");
  const Shape wanted = space_->parse_shape("B=2,T=32,H=4,D=16,R=22");  // R % 4 != 0
  std::optional<Config> vector_config, scalar_config;
  space_->for_each_valid(s0, [&](const Config& c) {
    if (float4(*space_, c)) vector_config = c;
    return !vector_config;
  });
  space_->for_each_valid(wanted, [&](const Config& c) {
    if (c != space_->default_config() && space_->check(c, s1)) scalar_config = c;
    return !scalar_config;
  });
  ASSERT_TRUE(vector_config && scalar_config);
  tune(s0, *vector_config, 5.0);
  tune(s1, *scalar_config, 9.0);

  Result r = run({"run", space_file.string(), "--shape", "B=2,T=32,H=4,D=16,R=22", "--db", db_.string(), "--json"});
  if (!gpu_) {
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("no GPU"), std::string::npos) << r.err;
  } else {
    EXPECT_EQ(r.code, 0) << r.err;
  }
  nlohmann::json report = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << r.out;
  EXPECT_EQ(report["shape"], "B=2,T=32,H=4,D=16,R=22");
  EXPECT_EQ(report["choice"]["reason"], "nearest");
  // S0 is closer, but its FLOAT4 config cannot run R=22: S1's is used.
  EXPECT_EQ(report["choice"]["config"], space_->config_string(*scalar_config));
  EXPECT_EQ(report["choice"]["source_shape"], space_->shape_string(s1));

  Result text = run({"run", space_file.string(), "--shape", "B=2,T=32,H=4,D=16,R=24", "--db", db_.string()});
  EXPECT_NE(text.out.find("config:  " + space_->config_string(*vector_config)), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("why:     "), std::string::npos) << text.out;
}

TEST_F(RunCliTest, SaysWhatARepairChangedAndWhy) {
  const Shape s0 = space_->parse_shape("B=2,T=32,H=4,D=16,R=24");
  std::optional<Config> vector_config;
  space_->for_each_valid(s0, [&](const Config& c) {
    if (float4(*space_, c)) vector_config = c;
    return !vector_config;
  });
  ASSERT_TRUE(vector_config);
  tune(s0, *vector_config, 5.0);
  Result r = run({"run", space_file.string(), "--shape", "B=2,T=32,H=4,D=16,R=22", "--db", db_.string(), "--json"});
  EXPECT_EQ(r.code, gpu_ ? 0 : 1) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << r.out;
  EXPECT_EQ(report["choice"]["reason"], "repaired");
  EXPECT_EQ(report["choice"]["tuned_config"], space_->config_string(*vector_config));
  ASSERT_EQ(report["choice"]["changes"].size(), 1u) << report.dump(2);
  EXPECT_EQ(report["choice"]["changes"][0]["parameter"], "FLOAT4");
  EXPECT_EQ(report["choice"]["changes"][0]["from"], "true");
  EXPECT_EQ(report["choice"]["changes"][0]["to"], "false");
  EXPECT_EQ(report["choice"]["repair"],
            "FLOAT4 true -> false (constraint 'FLOAT4 == 0 || (R % 4 == 0 && D % 4 == 0)' fails at D=16,R=22)");

  Result text = run({"run", space_file.string(), "--shape", "B=2,T=32,H=4,D=16,R=22", "--db", db_.string()});
  EXPECT_NE(text.out.find("choice:  repaired"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("repair:  FLOAT4 true -> false"), std::string::npos) << text.out;
}

TEST_F(RunCliTest, MissingDatabaseAndBadShapeAreInputErrors) {
  Result missing = run({"run", space_file.string(), "--shape", "B=2,T=32,H=4,D=16,R=24", "--db",
                        (dir_ / "absent.db").string()});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("no database"), std::string::npos) << missing.err;
  EXPECT_FALSE(fs::exists(dir_ / "absent.db"));
  Store::open(db_);
  Result bad = run({"run", space_file.string(), "--shape", "B=2,T=32,H=4,D=16", "--db", db_.string()});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("R"), std::string::npos) << bad.err;
}

// mlatune's own parts disagreeing (here a worker that does not understand the
// tuner's requests) is a bug to report: exit 3 and a message that says so,
// not exit 2 ("your input") or 1 ("your system").
TEST_F(RunCliTest, PartsOfMlatuneDisagreeingIsAnInternalErrorExit3) {
  Result r = test_support::run_program(
      cli_, {"tune", space_file.string(), "--compile-only", "--shape", "B=2,T=32,H=4,D=16,R=24", "--db",
             db_.string()},
      dir_, std::pair<std::string, std::optional<std::string>>{"MLATUNE_WORKER", MLATUNE_DISAGREEING_WORKER});
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("internal error"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown request 'probe'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("please report it"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mlatune
