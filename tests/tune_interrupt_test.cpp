// `mlatune tune` stopped by SIGINT (Ctrl-C) or SIGTERM mid-sweep, replayed
// (no GPU): it stops between candidates, prints its report saying where it
// stopped, records the run as interrupted with every candidate it measured,
// and dies of the signal, as a shell expects; the same command again goes
// on from there and measures each config once.
//
// Deterministic without sleeping: the test reads the child's stderr only up
// to its first progress line (the handlers are installed by then), then
// signals it.  The sweep writes far more progress than a pipe holds, so the
// child cannot finish before the signal: at worst it waits on the full pipe,
// which the test drains after signalling.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "cache/store.h"
#include "core/space.h"
#include "tuner/replay.h"
#include "tests/run_program.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path program = fs::path(MLATUNE_BINARY_DIR) / "mlatune";
const fs::path space_file = fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" /
                            "fused_mla_attention.yaml";
const fs::path fixture = fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps_2026-12.csv.gz";
const char* const s0 = "B=2,T=32,H=4,D=16,R=24";  // 1762 configs: about 400 kB of progress

/// The valid configs at S0 of the space restricted as the fixture's "# where:"
/// lines say, all of them in the fixture (replay refuses anything less).
long s0_configs() {
  const SearchSpace whole = SearchSpace::load(space_file);
  const SearchSpace space = whole.restrict(ReplayData::load(fixture, whole).restriction());
  return static_cast<long>(space.count(space.parse_shape(s0)));
}

struct Finished {
  int status = 0;
  std::string out, err;
};

class TuneInterrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(program)) GTEST_SKIP() << "the mlatune program is not built at " << program;
    dir_ = fs::temp_directory_path() /
           ("mlatune_tune_interrupt_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::vector<std::string> args() const {
    return {"tune",          space_file.string(), "--replay",   fixture.string(), "--shape", s0,
            "--strategy",    "brute_force",       "--db",       (dir_ / "sweep.db").string()};
  }

  /// Starts the tune, waits for its first progress line, sends `signal`,
  /// and collects everything until it ends.
  Finished interrupt_with(int signal) {
    int out[2], err[2];
    if (::pipe(out) != 0 || ::pipe(err) != 0) {
      ADD_FAILURE() << "pipe: " << std::strerror(errno);
      return {};
    }
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::close(out[0]);
      ::close(err[0]);
      ::close(out[1]);
      ::close(err[1]);
      ::alarm(120);  // a hang ends the child (SIGALRM), which the test reports
      std::vector<std::string> copy = args();
      std::string path = program.string();
      std::vector<char*> argv{path.data()};
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(path.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    Finished f;
    // Up to the first progress line.
    char buffer[4096];
    while (f.err.find("\n[1/") == std::string::npos) {
      const ssize_t n = ::read(err[0], buffer, sizeof buffer);
      if (n <= 0) break;
      f.err.append(buffer, static_cast<std::size_t>(n));
    }
    EXPECT_NE(f.err.find("\n[1/"), std::string::npos) << "no progress line before the output ended:\n" << f.err;
    EXPECT_EQ(::kill(pid, signal), 0);
    // Everything else, from both pipes, until both close.
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string* sinks[2] = {&f.out, &f.err};
    int open_pipes = 2;
    while (open_pipes > 0) {
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        ADD_FAILURE() << "poll: " << std::strerror(errno);
        break;
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
        if (n > 0) {
          sinks[i]->append(buffer, static_cast<std::size_t>(n));
        } else {
          ::close(fds[i].fd);
          fds[i].fd = -1;
          --open_pipes;
        }
      }
    }
    ::waitpid(pid, &f.status, 0);
    return f;
  }

  /// The evaluations the report says the interrupted shape had.
  static long interrupted_after(const std::string& out) {
    std::smatch m;
    static const std::regex line("interrupted after ([0-9]+) evaluations");
    return std::regex_search(out, m, line) ? std::stol(m[1]) : -1;
  }

  void expect_stopped_and_resumable(int signal) {
    const Finished f = interrupt_with(signal);
    ASSERT_TRUE(WIFSIGNALED(f.status)) << "status " << f.status << "\n" << f.out << f.err;
    EXPECT_EQ(WTERMSIG(f.status), signal) << f.out << f.err;
    EXPECT_NE(f.err.find("mlatune: stopping after the candidate being measured"), std::string::npos) << f.err;
    const long measured = interrupted_after(f.out);
    ASSERT_GT(measured, 0) << f.out;
    const long all = s0_configs();
    ASSERT_LT(measured, all) << f.out;
    EXPECT_NE(f.out.find("interrupted: the " + std::to_string(measured) + " configs evaluated are in "),
              std::string::npos)
        << f.out;
    EXPECT_EQ(f.out.find("fastest, timed again"), std::string::npos) << f.out;
    {
      Store store = Store::open(dir_ / "sweep.db", StoreMode::read_only);
      EXPECT_EQ(store.measurement_count(), measured);
      const std::vector<RunRecord> runs = store.runs();
      ASSERT_EQ(runs.size(), 1u);
      EXPECT_EQ(runs[0].status, "interrupted");
    }

    // The same command again: the rest, each config once.
    const test_support::ProgramResult again = test_support::run_program(program, args(), dir_, {}, 120);
    ASSERT_EQ(again.code, 0) << again.out << again.err;
    EXPECT_NE(again.out.find(fmt::format("configs: {} valid, {} planned, {} already in the database, {} evaluated now",
                                         all, all, measured, all - measured)),
              std::string::npos)
        << again.out;
    EXPECT_EQ(again.out.find("interrupted"), std::string::npos) << again.out;
    Store store = Store::open(dir_ / "sweep.db", StoreMode::read_only);
    EXPECT_EQ(store.measurement_count(), all);
    EXPECT_EQ(store.runs().at(1).status, "finished");
  }

  fs::path dir_;
};

TEST_F(TuneInterrupt, SigintStopsBetweenCandidatesKeepsWhatWasMeasuredAndTheSameCommandGoesOn) {
  expect_stopped_and_resumable(SIGINT);
}

TEST_F(TuneInterrupt, SigtermDoesTheSame) { expect_stopped_and_resumable(SIGTERM); }

}  // namespace
}  // namespace mlatune
