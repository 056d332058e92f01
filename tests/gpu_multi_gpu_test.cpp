// On a host with two or more GPUs of one model: `mlatune tune --gpus all`
// spreads the faults space (tests/faults: correct kernels, and kernels that
// trap, write out of bounds, give wrong results...) over one worker per GPU.
// Every config must get the outcome it gets on one GPU (a crash on one GPU
// takes down only its worker), each worker must take a share, and the best
// config must be as fast as on one GPU.  Skips with fewer than two GPUs.
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/gpu_worker.h"
#include "tests/run_program.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class GpuMultiGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    MLATUNE_REQUIRE_GPU();
    if (gpu().device_count < 2) GTEST_SKIP() << "needs two GPUs; this host has " << gpu().device_count;
    dir_ = fs::temp_directory_path() / ("mlatune_multi_gpu_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  json tune(const std::string& gpus, const std::string& db) {
    const std::vector<std::string> args = {
        "tune", (fs::path(MLATUNE_TEST_DATA_DIR) / "faults" / "faults.yaml").string(), "--shape", "N=1048576",
        "--where", "MODE != hang", "--db", (dir_ / db).string(), "--seed", "5", "--json", "--gpus", gpus};
    auto r = test_support::run_program(fs::path(MLATUNE_BINARY_DIR) / "mlatune", args, dir_, std::nullopt, 600);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? json::parse(r.out) : json();
  }

  fs::path dir_;
};

TEST_F(GpuMultiGpu, EveryGpuTakesAShareWithOneGpusOutcomes) {
  const json one = tune("0", "one.db");
  const json all = tune("all", "all.db");
  ASSERT_FALSE(one.is_null());
  ASSERT_FALSE(all.is_null());
  ASSERT_EQ(all.at("workers").size(), static_cast<std::size_t>(gpu().device_count));
  for (const json& worker : all.at("workers")) {
    EXPECT_GT(worker.at("evaluated").get<int>(), 0) << worker.dump();
    EXPECT_TRUE(worker.at("busy_fraction").is_number()) << worker.dump();
  }
  const json& a = all.at("shapes").at(0);
  const json& o = one.at("shapes").at(0);
  EXPECT_EQ(a.at("evaluated"), o.at("evaluated"));
  EXPECT_EQ(a.at("outcomes"), o.at("outcomes"));
  // Crashing configs took down only their own worker.
  EXPECT_GE(all.at("worker_replacements").get<int>(), 1);
  const double best_one = o.at("best").at("median_us").get<double>();
  const double best_all = a.at("best").at("median_us").get<double>();
  EXPECT_LT(best_all, 1.25 * best_one) << a.at("best").dump() << " vs " << o.at("best").dump();
  EXPECT_LT(best_one, 1.25 * best_all) << a.at("best").dump() << " vs " << o.at("best").dump();
}

}  // namespace
}  // namespace mlatune
