// On a GPU: the real `mlatune tune`, mid-sweep (its worker holds a CUDA
// context and is validating and timing candidates), is killed by SIGKILL,
// SIGTERM or SIGINT, and its worker must be gone within 2 s; a sweep that ends
// normally, or with an error after its worker started, leaves no worker behind.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "cache/store.h"
#include "core/error.h"
#include "tests/gpu_worker.h"
#include "tests/process_watch.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace test_support;

const fs::path space_file = fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" /
                            "fused_mla_attention.yaml";
const std::string tune_program = (fs::path(MLATUNE_BINARY_DIR) / "mlatune").string();

class GpuWorkerLifetime : public ::testing::Test {
 protected:
  void SetUp() override {
    MLATUNE_REQUIRE_GPU();
    dir_ = fs::temp_directory_path() / ("mlatune_worker_lifetime_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (out_ >= 0) ::close(out_);
    for (pid_t pid : processes_marked(marker_)) ::kill(pid, SIGKILL);  // whatever a failure left
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  /// Starts `mlatune tune` on the flagship space into this test's database.
  pid_t start_tune(std::vector<std::string> extra) {
    std::vector<std::string> args = {"tune", space_file.string(), "--db", (dir_ / "sweep.db").string(), "-q"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_t pid = spawn_marked(tune_program, args, marker_, out_);
    return pid;
  }

  std::int64_t committed() {
    try {
      if (!fs::exists(dir_ / "sweep.db")) return 0;
      return Store::open(dir_ / "sweep.db", StoreMode::read_only).measurement_count();
    } catch (const Error&) {
      return 0;  // still being created
    }
  }

  void expect_no_worker_left() {
    auto until = std::chrono::steady_clock::now() + 2000ms;
    while (!processes_marked(marker_).empty() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(10ms);
    std::vector<pid_t> left = processes_marked(marker_);
    EXPECT_TRUE(left.empty()) << "a worker (pid " << (left.empty() ? 0 : left[0]) << ") outlived `mlatune tune`";
    for (pid_t pid : left) ::kill(pid, SIGKILL);
  }

  void kill_mid_sweep(int signal) {
    pid_t tune = start_tune({"--shape", "B=4,T=256,H=8,D=32,R=64", "--max-evals", "2000"});
    ASSERT_GT(tune, 0);
    ChildGuard guard(tune);
    // Mid-sweep: the worker is up and candidates are being committed.
    auto until = std::chrono::steady_clock::now() + 300s;
    while (committed() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(50ms);
    ASSERT_GT(committed(), 0) << "the sweep committed nothing in 300 s";
    std::vector<pid_t> family = processes_marked(marker_);
    ASSERT_GE(family.size(), 2u) << "no worker beside `mlatune tune`";
    ASSERT_EQ(::kill(tune, signal), 0);
    int status = guard.reap();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal) << status;
    expect_no_worker_left();
  }

  fs::path dir_;
  std::string marker_ = fresh_marker();
  int out_ = -1;
};

TEST_F(GpuWorkerLifetime, KilledTuneLeavesNoWorker) { kill_mid_sweep(SIGKILL); }
TEST_F(GpuWorkerLifetime, TerminatedTuneLeavesNoWorker) { kill_mid_sweep(SIGTERM); }
TEST_F(GpuWorkerLifetime, InterruptedTuneLeavesNoWorker) { kill_mid_sweep(SIGINT); }

TEST_F(GpuWorkerLifetime, FinishedTuneLeavesNoWorker) {
  pid_t tune = start_tune({"--shape", "B=2,T=32,H=4,D=16,R=24", "--max-evals", "3"});
  ASSERT_GT(tune, 0);
  int status = ChildGuard(tune).reap();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  expect_no_worker_left();
}

TEST_F(GpuWorkerLifetime, FailedTuneLeavesNoWorker) {
  // The worker starts (it finds the GPU), then the architecture check fails.
  const std::string other = gpu().device.arch() == "sm_80" ? "sm_90" : "sm_80";
  pid_t tune = start_tune({"--shape", "B=2,T=32,H=4,D=16,R=24", "--arch", other});
  ASSERT_GT(tune, 0);
  int status = ChildGuard(tune).reap();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
  expect_no_worker_left();
}

}  // namespace
}  // namespace mlatune
