// Test support: runs a program as a separate process and captures its exit
// code, standard output and standard error (for tests of the mlatune CLI).
#pragma once
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace mlatune::test_support {

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct ProgramResult {
  int code = -1;  // exit status, or 128 + signal number
  long max_rss_kb = 0;  // the program's peak resident memory (getrusage's ru_maxrss)
  std::string out;
  std::string err;
};

/// Runs `program` with `args`; its output goes through files in `scratch`.
/// `environment` sets (value) or unsets (nullopt) one variable in the child.
/// `alarm_s` > 0: the program is killed by SIGALRM (code 142) after that
/// many seconds, so that a test of something that must finish cannot hang.
inline ProgramResult run_program(
    const std::filesystem::path& program, const std::vector<std::string>& args,
    const std::filesystem::path& scratch,
    const std::optional<std::pair<std::string, std::optional<std::string>>>& environment = {},
    unsigned alarm_s = 0) {
  auto out_file = scratch / "stdout";
  auto err_file = scratch / "stderr";
  std::fflush(nullptr);  // or the child would write this process's buffered output again
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    if (environment) {
      if (environment->second)
        setenv(environment->first.c_str(), environment->second->c_str(), 1);
      else
        unsetenv(environment->first.c_str());
    }
    std::string path = program.string();
    std::vector<std::string> copy = args;
    std::vector<char*> argv{path.data()};
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (alarm_s > 0) alarm(alarm_s);  // survives execv
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  ProgramResult r;
  r.max_rss_kb = usage.ru_maxrss;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out_file);
  r.err = read_file(err_file);
  return r;
}

}  // namespace mlatune::test_support
