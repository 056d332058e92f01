// `mlatune tune --gpus` end to end without a GPU: the CLI is pointed at the
// fake worker (tests/fake_gpu_worker_main.cpp, through MLATUNE_WORKER), which
// reports two GPUs; `--gpus all` must ask a worker how many there are, start
// one worker per GPU, report each one's rate and busy share, refuse GPUs of
// different models, and refuse GPUs that are not there.
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/run_program.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

class TuneGpusCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlatune_tune_gpus_cli_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  /// `mlatune tune` on the faults space (its 128-thread configs) with the
  /// fake worker and `settings` in its environment.
  test_support::ProgramResult tune(std::vector<std::string> settings, std::vector<std::string> extra) {
    std::vector<std::string> args = {"MLATUNE_WORKER=" + std::string(MLATUNE_FAKE_GPU_WORKER)};
    args.insert(args.end(), settings.begin(), settings.end());
    std::vector<std::string> command = {(fs::path(MLATUNE_BINARY_DIR) / "mlatune").string(), "tune",
                                        (fs::path(MLATUNE_TEST_DATA_DIR) / "faults" / "faults.yaml").string(),
                                        "--shape", "N=4096", "--where", "THREADS == 128", "--db",
                                        (dir_ / "t.db").string(), "-q", "-j", "2", "--seed", "3"};
    args.insert(args.end(), command.begin(), command.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return test_support::run_program("/usr/bin/env", args, dir_, std::nullopt, 300);
  }

  fs::path dir_;
};

TEST_F(TuneGpusCli, AllMeansEveryGpuAWorkerSeesEachReported) {
  auto r = tune({"MLATUNE_FAKE_GPU_COUNT=2"}, {"--gpus", "all", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  ASSERT_EQ(report.at("workers").size(), 2u) << r.out;
  EXPECT_EQ(report["workers"][0]["label"], "GPU 0");
  EXPECT_EQ(report["workers"][1]["label"], "GPU 1");
  EXPECT_EQ(report["totals"]["workers"], 2);
  const auto evaluated = report["workers"][0]["evaluated"].get<int>() + report["workers"][1]["evaluated"].get<int>();
  EXPECT_EQ(evaluated, report["totals"]["evaluated"].get<int>());
  EXPECT_TRUE(report["workers"][1]["busy_fraction"].is_number());
  EXPECT_NE(r.err.find("timing on 2 GPUs (GPU 0, GPU 1)"), std::string::npos) << r.err;

  auto text = tune({"MLATUNE_FAKE_GPU_COUNT=2"}, {"--gpus", "0,1"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("GPU workers (2):"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("    GPU 1: "), std::string::npos) << text.out;
}

TEST_F(TuneGpusCli, DifferentModelsAndMissingGpusAreRefused) {
  auto mixed = tune({"MLATUNE_FAKE_GPU_NAMES=Fake A,Fake B"}, {"--gpus", "all"});
  EXPECT_EQ(mixed.code, 2) << mixed.err;
  EXPECT_NE(mixed.err.find("different models"), std::string::npos) << mixed.err;

  auto missing = tune({"MLATUNE_FAKE_GPU_COUNT=2"}, {"--gpus", "0,2"});
  EXPECT_EQ(missing.code, 2) << missing.err;
  EXPECT_NE(missing.err.find("there is no GPU 2"), std::string::npos) << missing.err;

  auto bad = tune({}, {"--gpus", "0,x"});
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("'x' is not a GPU ordinal"), std::string::npos) << bad.err;

  auto replayed = tune({}, {"--gpus", "all", "--replay", "1"});
  EXPECT_EQ(replayed.code, 2) << replayed.err;
  EXPECT_NE(replayed.err.find("--gpus"), std::string::npos) << replayed.err;
}

}  // namespace
}  // namespace mlatune
