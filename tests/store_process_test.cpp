// The store under real processes: concurrent writers into one file, and
// writers killed with SIGKILL at random moments.  The writers are the
// store_writer helper (tests/store_writer_main.cpp), run with fork/exec.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cache/sqlite.h"
#include "cache/store.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

/// A running store_writer with its stdout on a pipe.
struct Writer {
  pid_t pid = -1;
  int out = -1;  // read end of the pipe
  std::string buffer;
};

Writer spawn_writer(const fs::path& db, int index, long count) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::string db_arg = db.string();
    std::string index_arg = std::to_string(index);
    std::string count_arg = std::to_string(count);
    execl(MLATUNE_STORE_WRITER, MLATUNE_STORE_WRITER, db_arg.c_str(), index_arg.c_str(), count_arg.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  return Writer{pid, fds[0], {}};
}

/// Reads what is available within `timeout_ms`; false at end of file.
bool read_some(Writer& w, int timeout_ms) {
  pollfd p{w.out, POLLIN, 0};
  int ready = poll(&p, 1, timeout_ms);
  if (ready <= 0) return true;
  char chunk[4096];
  ssize_t n = read(w.out, chunk, sizeof chunk);
  if (n <= 0) return false;
  w.buffer.append(chunk, static_cast<std::size_t>(n));
  return true;
}

void read_to_end(Writer& w) {
  while (read_some(w, 1000)) {
  }
  close(w.out);
  w.out = -1;
}

int wait_for(const Writer& w) {
  int status = 0;
  waitpid(w.pid, &status, 0);
  return status;
}

struct Reported {
  std::int64_t id;
  std::string shape;
  std::string config;
};

/// The complete lines a writer printed: each is a committed measurement.
std::vector<Reported> reported(const std::string& text) {
  std::vector<Reported> result;
  std::size_t start = 0;
  while (true) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // a line cut by the kill
    std::istringstream line(text.substr(start, end - start));
    Reported r{};
    line >> r.id >> r.shape >> r.config;
    result.push_back(r);
    start = end + 1;
  }
  return result;
}

std::string integrity(sqlite::Connection& db) {
  auto s = db.prepare("PRAGMA integrity_check");
  std::string result;
  while (s.step()) result += s.column_text(0);
  return result;
}

/// Every best entry is the minimum over its ok measurements, points at one of
/// them, and every key that has an ok measurement has a best entry.
void expect_consistent_best(sqlite::Connection& db) {
  auto wrong = db.prepare(
      "SELECT count(*) FROM best b WHERE b.median_us <> ("
      "  SELECT min(median_us) FROM measurements m WHERE m.outcome = 'ok' AND m.kernel_id = b.kernel_id "
      "  AND m.device_id = b.device_id AND m.toolchain_id = b.toolchain_id AND m.shape = b.shape) "
      "OR NOT EXISTS (SELECT 1 FROM measurements m WHERE m.id = b.measurement_id AND m.config = b.config "
      "  AND m.median_us = b.median_us AND m.shape = b.shape AND m.outcome = 'ok')");
  ASSERT_TRUE(wrong.step());
  EXPECT_EQ(wrong.column_int64(0), 0) << "best entries that are not the fastest ok measurement";
  auto missing = db.prepare(
      "SELECT count(*) FROM (SELECT DISTINCT kernel_id, device_id, toolchain_id, shape FROM measurements "
      "WHERE outcome = 'ok') k WHERE NOT EXISTS (SELECT 1 FROM best b WHERE b.kernel_id = k.kernel_id "
      "AND b.device_id = k.device_id AND b.toolchain_id = k.toolchain_id AND b.shape = k.shape)");
  ASSERT_TRUE(missing.step());
  EXPECT_EQ(missing.column_int64(0), 0) << "shapes with ok measurements but no best entry";
}

class StoreProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mlatune_store_process_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(StoreProcessTest, FourConcurrentWritersLoseNothing) {
  const auto db_path = dir_ / "shared.db";
  constexpr int writers = 4;
  constexpr long per_writer = 500;
  // No one creates the file in advance: the writers race for that too.
  std::vector<Writer> running;
  for (int w = 0; w < writers; ++w) running.push_back(spawn_writer(db_path, w, per_writer));
  std::map<int, std::vector<Reported>> lines;
  for (int w = 0; w < writers; ++w) {
    read_to_end(running[static_cast<std::size_t>(w)]);
    int status = wait_for(running[static_cast<std::size_t>(w)]);
    ASSERT_TRUE(WIFEXITED(status)) << "writer " << w << " did not exit normally";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "writer " << w << " failed (an error escaped; see its stderr)";
    lines[w] = reported(running[static_cast<std::size_t>(w)].buffer);
    EXPECT_EQ(lines[w].size(), static_cast<std::size_t>(per_writer));
  }

  auto db = sqlite::Connection::open(db_path, sqlite::OpenMode::read_only);
  EXPECT_EQ(integrity(db), "ok");
  auto total = db.prepare("SELECT count(*), count(DISTINCT config) FROM measurements");
  ASSERT_TRUE(total.step());
  EXPECT_EQ(total.column_int64(0), writers * per_writer);
  EXPECT_EQ(total.column_int64(1), writers * per_writer);
  expect_consistent_best(db);

  auto finished = db.prepare("SELECT count(*) FROM runs WHERE status = 'finished'");
  ASSERT_TRUE(finished.step());
  EXPECT_EQ(finished.column_int64(0), writers);
  auto best_rows = db.prepare("SELECT count(*) FROM best");
  ASSERT_TRUE(best_rows.step());
  EXPECT_EQ(best_rows.column_int64(0), 10);  // the writers' ten shapes

  Store store = Store::open(db_path, StoreMode::read_only);
  std::set<std::int64_t> ids;
  for (const auto& m : store.measurements()) ids.insert(m.id);
  for (const auto& [w, list] : lines) {
    for (const auto& r : list) EXPECT_TRUE(ids.count(r.id)) << "writer " << w << " id " << r.id;
  }
}

TEST_F(StoreProcessTest, WriterKilledAtRandomPointsLosesNothingCommitted) {
  const auto db_path = dir_ / "killed.db";
  std::mt19937 rng(20261129);
  // From the very start (the file not yet created) to well into the sweep.
  std::uniform_int_distribution<int> delay_ms(0, 400);
  std::vector<Reported> committed;
  int killed_mid_sweep = 0;
  for (int trial = 0; trial < 20; ++trial) {
    Writer w = spawn_writer(db_path, trial, 1'000'000);
    auto deadline = Clock::now() + std::chrono::milliseconds(delay_ms(rng));
    bool open = true;
    while (open && Clock::now() < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      open = read_some(w, static_cast<int>(std::max<long long>(left, 0)));
    }
    ASSERT_EQ(kill(w.pid, SIGKILL), 0);
    read_to_end(w);
    int status = wait_for(w);
    ASSERT_TRUE(WIFSIGNALED(status)) << "trial " << trial << ": the writer ended before it was killed";
    auto lines = reported(w.buffer);
    if (!lines.empty()) ++killed_mid_sweep;
    committed.insert(committed.end(), lines.begin(), lines.end());

    // After each kill: the file is sound and holds everything reported.  A
    // writer killed before it created the file or its tables left nothing to
    // check yet.
    if (!fs::exists(db_path)) {
      ASSERT_TRUE(committed.empty());
      continue;
    }
    auto db = sqlite::Connection::open(db_path, sqlite::OpenMode::read_only);
    ASSERT_EQ(integrity(db), "ok") << "trial " << trial;
    auto tables = db.prepare("SELECT count(*) FROM sqlite_schema WHERE name = 'measurements'");
    ASSERT_TRUE(tables.step());
    if (tables.column_int64(0) == 0) {
      ASSERT_TRUE(committed.empty());
      continue;
    }
    auto find = db.prepare("SELECT shape, config FROM measurements WHERE id = ?1");
    for (const auto& r : committed) {
      find.reset();
      find.bind(1, r.id);
      ASSERT_TRUE(find.step()) << "trial " << trial << ": committed measurement " << r.id << " is gone";
      EXPECT_EQ(find.column_text(0), r.shape);
      EXPECT_EQ(find.column_text(1), r.config);
    }
    expect_consistent_best(db);
  }
  EXPECT_GT(killed_mid_sweep, 10) << "too few kills landed inside the sweep to mean anything";
  // And the store opens for writing again.
  Store store = Store::open(db_path);
  EXPECT_GE(store.measurement_count(), static_cast<std::int64_t>(committed.size()));
}

}  // namespace
}  // namespace mlatune
