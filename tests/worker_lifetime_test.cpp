// The worker never outlives the tuner that started it (tuner/worker/lifeline.h),
// with real processes and no GPU needed: a stand-in tuner (worker_parent, the
// real client code) is killed while its worker idles or is busy, and the
// worker must be gone within 2 s; a worker whose request pipe closes leaves
// even while busy; one whose parent is not the one named on its command line
// does not start serving at all.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/process_watch.h"
#include "tuner/worker/codec.h"
#include "tuner/worker/framing.h"
#include "tuner/worker/lifeline.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace test_support;

const std::string worker_program = (fs::path(MLATUNE_BINARY_DIR) / "mlatune-worker").string();

/// A stand-in tuner whose worker is up: the parent's pid and the worker's.
struct Family {
  pid_t parent = -1;
  pid_t worker = -1;
  std::string marker = fresh_marker();
};

Family start_family(const std::string& mode) {
  Family family;
  int out = -1;
  family.parent = spawn_marked(MLATUNE_WORKER_PARENT, {worker_program, mode}, family.marker, out);
  const std::string line = read_line(out);
  ::close(out);
  if (line.rfind("worker ", 0) == 0) family.worker = static_cast<pid_t>(std::stol(line.substr(7)));
  return family;
}

int reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

/// Kills every process that carries `marker` (a worker left behind by a failure).
void kill_marked(const std::string& marker) {
  for (pid_t pid : processes_marked(marker)) ::kill(pid, SIGKILL);
}

void expect_worker_dies_with_parent(const std::string& mode, int signal) {
  Family family = start_family(mode);
  ASSERT_GT(family.parent, 0);
  ChildGuard parent(family.parent);
  ASSERT_GT(family.worker, 0) << "the stand-in tuner did not report its worker";
  ASSERT_TRUE(running(family.worker));
  if (mode == "busy") std::this_thread::sleep_for(200ms);  // let the hanging request arrive
  ASSERT_EQ(::kill(family.parent, signal), 0);
  parent.reap();
  EXPECT_TRUE(gone_within(family.worker, 2000ms))
      << "worker " << family.worker << " outlived its parent (" << mode << ", signal " << signal << ")";
  EXPECT_TRUE(processes_marked(family.marker).empty());
  kill_marked(family.marker);  // never leave one behind
}

TEST(WorkerLifetime, IdleWorkerDiesWhenItsTunerIsKilled) { expect_worker_dies_with_parent("idle", SIGKILL); }

TEST(WorkerLifetime, BusyWorkerDiesWhenItsTunerIsKilled) { expect_worker_dies_with_parent("busy", SIGKILL); }

TEST(WorkerLifetime, WorkerDiesWhenItsTunerIsTerminatedOrInterrupted) {
  expect_worker_dies_with_parent("busy", SIGTERM);
  expect_worker_dies_with_parent("idle", SIGINT);
}

TEST(WorkerLifetime, NormalEndLeavesNoWorker) {
  Family family = start_family("return");
  ChildGuard parent(family.parent);
  ASSERT_GT(family.worker, 0);
  int status = parent.reap();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The client's destructor asked it to quit and reaped it.
  EXPECT_FALSE(running(family.worker));
  EXPECT_TRUE(processes_marked(family.marker).empty());
  kill_marked(family.marker);
}

/// A worker started by this test process itself, with the pipes the client
/// would hand over (fd 3: requests, fd 4: replies).
struct DirectWorker {
  pid_t pid = -1;
  int requests = -1;
  int replies = -1;
};

/// `fd` moved above the descriptors the worker is handed (3 and 4), so that
/// dup2 onto them never meets itself.
int moved_high(int fd) {
  int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  ::close(fd);
  return high;
}

DirectWorker spawn_worker(const std::vector<std::string>& args) {
  int request_pipe[2], reply_pipe[2];
  if (::pipe2(request_pipe, O_CLOEXEC) != 0 || ::pipe2(reply_pipe, O_CLOEXEC) != 0) return {};
  for (int* fd : {&request_pipe[0], &request_pipe[1], &reply_pipe[0], &reply_pipe[1]}) *fd = moved_high(*fd);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(request_pipe[0], 3);
    ::dup2(reply_pipe[1], 4);
    ::setenv("MLATUNE_WORKER_TEST_FAULTS", "1", 1);
    std::vector<std::string> copy = args;
    std::vector<char*> argv{const_cast<char*>(worker_program.c_str())};
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(worker_program.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(request_pipe[0]);
  ::close(reply_pipe[1]);
  return {pid, request_pipe[1], reply_pipe[0]};
}

/// Waits up to `limit` for `pid` (our child) to exit; its wait status, or -1.
int exit_status_within(pid_t pid, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < until) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

TEST(WorkerLifetime, BusyWorkerLeavesWhenItsRequestPipeCloses) {
  DirectWorker worker = spawn_worker({std::string(parent_pid_option), std::to_string(::getpid())});
  ASSERT_GT(worker.pid, 0);
  // Busy for ever in its main thread: only the pipe watchdog can notice.
  write_message(worker.requests, encode_request(TestFaultRequest{"hang", {}}));
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(running(worker.pid)) << "the worker left before the pipe closed";
  ::close(worker.requests);
  int status = exit_status_within(worker.pid, 2000ms);
  if (status == -1) {
    ::kill(worker.pid, SIGKILL);
    reap(worker.pid);
  }
  ::close(worker.replies);
  ASSERT_NE(status, -1) << "the worker kept running after its request pipe closed";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(WorkerLifetime, WorkerWhoseParentIsNotTheNamedOneExitsAtOnce) {
  // As if the tuner that spawned it had died before the worker could ask for
  // the parent-death signal: its parent (this test) is not the one it was told.
  pid_t not_the_parent = ::getpid() + 1;
  DirectWorker worker = spawn_worker({std::string(parent_pid_option), std::to_string(not_the_parent)});
  ASSERT_GT(worker.pid, 0);
  int status = exit_status_within(worker.pid, 2000ms);
  if (status == -1) {
    ::kill(worker.pid, SIGKILL);
    reap(worker.pid);
  }
  ::close(worker.requests);
  ::close(worker.replies);
  ASSERT_NE(status, -1) << "the worker served although its parent is not the named one";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
}

TEST(WorkerLifetime, ParentPidArgument) {
  auto parse = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    return parent_pid_argument(static_cast<int>(args.size()), argv.data());
  };
  EXPECT_EQ(parse({"mlatune-worker"}), std::nullopt);
  EXPECT_EQ(parse({"mlatune-worker", "--parent-pid", "4242"}), 4242);
  EXPECT_THROW(parse({"mlatune-worker", "--parent-pid", "42x"}), InputError);
  EXPECT_THROW(parse({"mlatune-worker", "--parent-pid", "0"}), InputError);
  EXPECT_THROW(parse({"mlatune-worker", "--parent-pid", "-5"}), InputError);
}

}  // namespace
}  // namespace mlatune
