// Test support for the worker's lifetime: start a program with a marker in
// its environment (inherited by the workers it starts), find the processes
// that carry the marker (even after they were re-parented), and wait for a
// process to be gone.  Linux /proc only.
#pragma once
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace mlatune::test_support {

/// A fresh "MLATUNE_TEST_MARK=<random>" to put in a child's environment.
inline std::string fresh_marker() {
  return "MLATUNE_TEST_MARK=" + std::to_string(getpid()) + "_" + std::to_string(std::random_device{}());
}

/// Whether `pid` runs: absent, a zombie or dead is not running.
inline bool running(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  char state = stat[close + 2];
  return state != 'Z' && state != 'X';
}

/// The running processes whose environment holds `marker` exactly.
inline std::vector<pid_t> processes_marked(const std::string& marker) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    std::string environment((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::size_t at = 0;
    while (at < environment.size()) {
      std::size_t end = environment.find('\0', at);
      if (end == std::string::npos) end = environment.size();
      if (environment.compare(at, end - at, marker) == 0) {
        pid_t pid = static_cast<pid_t>(std::stol(name));
        if (running(pid)) found.push_back(pid);
        break;
      }
      at = end + 1;
    }
  }
  return found;
}

/// Waits up to `limit` for `pid` to stop running; true when it did.
inline bool gone_within(pid_t pid, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (running(pid)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

/// Starts `program args...` with `marker` added to its environment and its
/// standard output on a pipe (returned in `stdout_fd`); stderr is inherited.
inline pid_t spawn_marked(const std::string& program, const std::vector<std::string>& args,
                          const std::string& marker, int& stdout_fd) {
  int ends[2];
  if (::pipe(ends) != 0) return -1;
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(ends[1], STDOUT_FILENO);
    ::close(ends[0]);
    ::close(ends[1]);
    ::putenv(const_cast<char*>(marker.c_str()));
    std::vector<std::string> copy = args;
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(program.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(ends[1]);
  stdout_fd = ends[0];
  return pid;
}

/// Kills and reaps a child process this test started unless it was reaped
/// already (release()), so that a failed assertion leaves nothing running.
class ChildGuard {
 public:
  explicit ChildGuard(pid_t pid) : pid_(pid) {}
  ~ChildGuard() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  ChildGuard(const ChildGuard&) = delete;
  ChildGuard& operator=(const ChildGuard&) = delete;
  /// Waits for the child to exit; its wait status.
  int reap() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

/// Reads one line from `fd` (without the newline); empty at end of input.
inline std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

}  // namespace mlatune::test_support
