#include "tuner/worker.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

extern char** environ;

namespace mlatune {

using json = nlohmann::json;
using steady = std::chrono::steady_clock;

namespace {

std::string errno_text(int error) { return fmt::format("{} ({})", std::strerror(error), error); }

/// Writes all of `data`, with SIGPIPE blocked for this thread so that a dead
/// peer is an EPIPE error instead of the end of this process.
void write_all(int fd, const char* data, std::size_t size) {
  sigset_t pipe_only, previous;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigset_t pending_before;
  sigemptyset(&pending_before);
  if (sigpending(&pending_before) != 0)
    throw EnvironmentError("sigpending failed: " + errno_text(errno));
  bool was_pending = sigismember(&pending_before, SIGPIPE) == 1;
  if (int error = pthread_sigmask(SIG_BLOCK, &pipe_only, &previous); error != 0)
    throw EnvironmentError("pthread_sigmask failed: " + errno_text(error));
  int error = 0;
  while (size > 0) {
    ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      error = errno;
      break;
    }
    data += written;
    size -= static_cast<std::size_t>(written);
  }
  if (error == EPIPE && !was_pending) {
    // Consume the SIGPIPE this write raised before unblocking it.
    timespec zero{0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  if (int restore = pthread_sigmask(SIG_SETMASK, &previous, nullptr); restore != 0)
    throw EnvironmentError("pthread_sigmask failed: " + errno_text(restore));
  if (error == EPIPE) throw EnvironmentError("the worker's pipe is closed (the worker exited)");
  if (error != 0) throw EnvironmentError("write to the worker pipe failed: " + errno_text(error));
}

std::string signal_name(int signal) {
  const char* text = strsignal(signal);
  return fmt::format("signal {} ({})", signal, text ? text : "unknown");
}

std::string exit_text(int status) {
  if (WIFSIGNALED(status)) return "the worker was killed by " + signal_name(WTERMSIG(status));
  if (WIFEXITED(status)) return fmt::format("the worker exited with status {}", WEXITSTATUS(status));
  return fmt::format("the worker stopped (wait status {})", status);
}

}  // namespace

// ---- framing ------------------------------------------------------------------

void write_message(int fd, const json& message) {
  std::vector<std::uint8_t> body = json::to_cbor(message);
  if (body.size() > max_message_bytes)
    throw EnvironmentError(fmt::format("message of {} bytes exceeds the limit of {}", body.size(),
                                       max_message_bytes));
  auto size = static_cast<std::uint32_t>(body.size());
  std::string frame(4, '\0');
  for (int i = 0; i < 4; ++i) frame[static_cast<std::size_t>(i)] = static_cast<char>((size >> (8 * i)) & 0xff);
  frame.append(reinterpret_cast<const char*>(body.data()), body.size());
  write_all(fd, frame.data(), frame.size());
}

MessageReader::Status MessageReader::read(json& message, std::optional<steady::time_point> deadline) {
  while (true) {
    if (buffer_.size() >= 4) {
      std::uint32_t size = 0;
      for (int i = 0; i < 4; ++i)
        size |= static_cast<std::uint32_t>(static_cast<unsigned char>(buffer_[static_cast<std::size_t>(i)])) << (8 * i);
      if (size > max_message_bytes)
        throw EnvironmentError(fmt::format("malformed message: length {} exceeds the limit of {}",
                                           size, max_message_bytes));
      if (buffer_.size() >= 4 + static_cast<std::size_t>(size)) {
        try {
          message = json::from_cbor(buffer_.begin() + 4, buffer_.begin() + 4 + size);
        } catch (const json::exception& error) {
          throw EnvironmentError(fmt::format("malformed message: {}", error.what()));
        }
        buffer_.erase(0, 4 + static_cast<std::size_t>(size));
        return Status::message;
      }
    }
    int wait_ms = -1;
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - steady::now());
      if (left.count() <= 0) return Status::timeout;
      wait_ms = static_cast<int>(std::min<long long>(left.count() + 1, 1 << 30));
    }
    pollfd descriptor{fd_, POLLIN, 0};
    int ready = ::poll(&descriptor, 1, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw EnvironmentError("poll on the worker pipe failed: " + errno_text(errno));
    }
    if (ready == 0) continue;  // the deadline check above decides
    char chunk[65536];
    ssize_t got = ::read(fd_, chunk, sizeof chunk);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw EnvironmentError("read from the worker pipe failed: " + errno_text(errno));
    }
    if (got == 0) {
      if (!buffer_.empty())
        throw EnvironmentError(fmt::format("the pipe closed in the middle of a message ({} bytes)",
                                           buffer_.size()));
      return Status::closed;
    }
    buffer_.append(chunk, static_cast<std::size_t>(got));
  }
}

// ---- values on the wire -----------------------------------------------------------

namespace {

// A message that is valid CBOR but not what the protocol says (a missing key,
// a string where a number belongs, a number out of range) is the peer's
// fault like a broken frame: EnvironmentError, never nlohmann's own
// exception, which no caller maps to a clear message.
[[noreturn]] void malformed(const char* what, const json::exception& error) {
  throw EnvironmentError(fmt::format("malformed message: {}: {}", what, error.what()));
}

}  // namespace

json encode(const TimingStats& t) {
  return {{"median_us", t.median_us}, {"min_us", t.min_us}, {"p90_us", t.p90_us},
          {"spread", t.spread},       {"count", t.count},   {"cache", to_string(t.cache)},
          {"stable", t.stable},       {"cut", t.cut},       {"method", t.method}};
}

TimingStats decode_timing(const json& j) try {
  TimingStats t;
  t.median_us = j.at("median_us").get<double>();
  t.min_us = j.at("min_us").get<double>();
  t.p90_us = j.at("p90_us").get<double>();
  t.spread = j.at("spread").get<double>();
  t.count = j.at("count").get<int>();
  auto cache = parse_cache_mode(j.at("cache").get<std::string>());
  if (!cache) throw EnvironmentError("malformed message: unknown cache mode");
  t.cache = *cache;
  t.stable = j.at("stable").get<bool>();
  t.cut = j.at("cut").get<bool>();
  t.method = j.at("method").get<std::string>();
  return t;
} catch (const json::exception& error) {
  malformed("timing", error);
}

json encode(const Cutoff& c) { return {{"best_us", c.best_us}, {"factor", c.factor}}; }

Cutoff decode_cutoff(const json& j) try {
  Cutoff c;
  c.best_us = j.at("best_us").get<double>();
  c.factor = j.at("factor").get<double>();
  return c;
} catch (const json::exception& error) {
  malformed("cutoff", error);
}

json encode(const EvaluationResult& r) {
  json j = {{"outcome", to_string(r.outcome)}, {"reason", r.reason},
            {"registers", r.registers},        {"local_bytes", r.local_bytes},
            {"context_lost", r.context_lost}};
  if (r.validation) {
    const ValidationStats& v = *r.validation;
    j["validation"] = {{"relative_l2", v.relative_l2}, {"max_abs", v.max_abs},
                       {"nonfinite", v.nonfinite},     {"elements", v.elements},
                       {"input_sets", v.input_sets},   {"passed", v.passed}};
  }
  if (r.timing) j["timing"] = encode(*r.timing);
  return j;
}

EvaluationResult decode_result(const json& j) try {
  EvaluationResult r;
  auto outcome = parse_outcome(j.at("outcome").get<std::string>());
  if (!outcome) throw EnvironmentError("malformed message: unknown outcome");
  r.outcome = *outcome;
  r.reason = j.at("reason").get<std::string>();
  r.registers = j.at("registers").get<int>();
  r.local_bytes = j.at("local_bytes").get<std::int64_t>();
  r.context_lost = j.at("context_lost").get<bool>();
  if (j.contains("validation")) {
    const json& v = j.at("validation");
    ValidationStats s;
    s.relative_l2 = v.at("relative_l2").get<double>();
    s.max_abs = v.at("max_abs").get<double>();
    s.nonfinite = v.at("nonfinite").get<std::uint64_t>();
    s.elements = v.at("elements").get<std::uint64_t>();
    s.input_sets = v.at("input_sets").get<int>();
    s.passed = v.at("passed").get<bool>();
    r.validation = s;
  }
  if (j.contains("timing")) r.timing = decode_timing(j.at("timing"));
  return r;
} catch (const json::exception& error) {
  malformed("result", error);
}

namespace {

void encode_geometry(json& j, const LaunchGeometry& g) {
  j["grid"] = {g.grid[0], g.grid[1], g.grid[2]};
  j["block"] = {g.block[0], g.block[1], g.block[2]};
  j["shared_bytes"] = g.shared_bytes;
}

LaunchGeometry decode_geometry(const json& j) {
  LaunchGeometry g;
  for (int i = 0; i < 3; ++i) {
    g.grid[i] = j.at("grid").at(static_cast<std::size_t>(i)).get<std::int64_t>();
    g.block[i] = j.at("block").at(static_cast<std::size_t>(i)).get<std::int64_t>();
  }
  g.shared_bytes = j.at("shared_bytes").get<std::int64_t>();
  return g;
}

}  // namespace

json encode(const Candidate& c) {
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(c.cubin.data());
  json j = {{"label", c.label},
            {"cubin", json::binary(std::vector<std::uint8_t>(bytes, bytes + c.cubin.size()))},
            {"entry", c.entry}};
  encode_geometry(j, c.geometry);
  // Absent for a config without a prologue: such candidates travel as before.
  if (c.prologue) {
    json p = {{"entry", c.prologue->entry}};
    encode_geometry(p, c.prologue->geometry);
    j["prologue"] = std::move(p);
  }
  if (!c.workspace_bytes.empty()) j["workspace_bytes"] = c.workspace_bytes;
  return j;
}

Candidate decode_candidate(const json& j) try {
  Candidate c;
  c.label = j.at("label").get<std::string>();
  const auto& binary = j.at("cubin").get_binary();
  c.cubin.assign(reinterpret_cast<const char*>(binary.data()), binary.size());
  c.entry = j.at("entry").get<std::string>();
  c.geometry = decode_geometry(j);
  if (j.contains("prologue")) {
    const json& p = j.at("prologue");
    c.prologue = PrologueLaunch{p.at("entry").get<std::string>(), decode_geometry(p)};
  }
  if (j.contains("workspace_bytes"))
    c.workspace_bytes = j.at("workspace_bytes").get<std::vector<std::int64_t>>();
  return c;
} catch (const json::exception& error) {
  malformed("candidate", error);
}

json encode(const DeviceProperties& d) {
  return {{"ordinal", d.ordinal},
          {"name", d.name},
          {"cc", {d.cc_major, d.cc_minor}},
          {"multiprocessors", d.multiprocessors},
          {"l2_bytes", d.l2_bytes},
          {"total_memory", d.total_memory},
          {"shared_per_block_optin", d.shared_per_block_optin},
          {"shared_per_block", d.shared_per_block},
          {"max_threads_per_block", d.max_threads_per_block},
          {"driver_version", d.driver_version},
          {"max_grid", {d.max_grid[0], d.max_grid[1], d.max_grid[2]}},
          {"max_block", {d.max_block[0], d.max_block[1], d.max_block[2]}}};
}

DeviceProperties decode_device(const json& j) try {
  DeviceProperties d;
  d.ordinal = j.at("ordinal").get<int>();
  d.name = j.at("name").get<std::string>();
  d.cc_major = j.at("cc").at(0).get<int>();
  d.cc_minor = j.at("cc").at(1).get<int>();
  d.multiprocessors = j.at("multiprocessors").get<int>();
  d.l2_bytes = j.at("l2_bytes").get<std::int64_t>();
  d.total_memory = j.at("total_memory").get<std::int64_t>();
  d.shared_per_block_optin = j.at("shared_per_block_optin").get<std::int64_t>();
  d.shared_per_block = j.at("shared_per_block").get<std::int64_t>();
  d.max_threads_per_block = j.at("max_threads_per_block").get<int>();
  d.driver_version = j.at("driver_version").get<std::string>();
  for (std::size_t i = 0; i < 3; ++i) {
    d.max_grid[i] = j.at("max_grid").at(i).get<std::int64_t>();
    d.max_block[i] = j.at("max_block").at(i).get<std::int64_t>();
  }
  return d;
} catch (const json::exception& error) {
  malformed("device", error);
}

// ---- the worker process -------------------------------------------------------------

/// A running worker: its pid and our ends of the two pipes.
struct Worker::Process {
  pid_t pid = -1;
  int to_worker = -1;
  int from_worker = -1;
  std::optional<MessageReader> reader;
  bool reaped = false;
  int status = 0;

  ~Process() {
    if (to_worker >= 0) ::close(to_worker);
    if (from_worker >= 0) ::close(from_worker);
    if (pid > 0 && !reaped) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }

  /// Waits up to `patience` for the worker to exit, then kills it.
  void finish(std::chrono::milliseconds patience) {
    if (reaped || pid <= 0) return;
    auto until = steady::now() + patience;
    while (true) {
      pid_t done = ::waitpid(pid, &status, WNOHANG);
      if (done == pid) break;
      if (done < 0 && errno != EINTR) {
        status = 0;
        break;
      }
      if (steady::now() >= until) {
        ::kill(pid, SIGKILL);
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    reaped = true;
  }
};

namespace {

std::filesystem::path default_worker_executable() {
  if (const char* env = std::getenv("MLATUNE_WORKER"); env && *env) return env;
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw EnvironmentError("cannot locate the running executable: " + ec.message());
  return self.parent_path() / "mlatune-worker";
}

/// Owner of a file descriptor.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

/// A pipe whose ends are moved above the standard descriptors and marked
/// close-on-exec, so only the two descriptors we hand over reach the child.
std::pair<FileDescriptor, FileDescriptor> make_pipe() {
  int ends[2];
  if (::pipe(ends) != 0) throw EnvironmentError("pipe() failed: " + errno_text(errno));
  FileDescriptor raw[2] = {FileDescriptor(ends[0]), FileDescriptor(ends[1])};
  FileDescriptor moved[2];
  for (int i = 0; i < 2; ++i) {
    int fd = ::fcntl(raw[i].get(), F_DUPFD_CLOEXEC, 10);
    if (fd < 0) throw EnvironmentError("fcntl(F_DUPFD_CLOEXEC) failed: " + errno_text(errno));
    moved[i] = FileDescriptor(fd);
  }
  return {std::move(moved[0]), std::move(moved[1])};
}

/// Owner of posix_spawn file actions.
class SpawnActions {
 public:
  SpawnActions() {
    if (int error = posix_spawn_file_actions_init(&actions_); error != 0)
      throw EnvironmentError("posix_spawn_file_actions_init failed: " + errno_text(error));
  }
  ~SpawnActions() { posix_spawn_file_actions_destroy(&actions_); }
  SpawnActions(const SpawnActions&) = delete;
  SpawnActions& operator=(const SpawnActions&) = delete;
  void dup2(int from, int to) {
    if (int error = posix_spawn_file_actions_adddup2(&actions_, from, to); error != 0)
      throw EnvironmentError("posix_spawn_file_actions_adddup2 failed: " + errno_text(error));
  }
  const posix_spawn_file_actions_t* get() const { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

}  // namespace

Worker::Worker(WorkerOptions options) : options_(std::move(options)) {
  if (options_.executable.empty()) options_.executable = default_worker_executable();
}

Worker::~Worker() {
  if (!process_) return;
  try {
    write_message(process_->to_worker, json{{"type", "quit"}});
  } catch (...) {
    // Already gone: it is reaped below all the same.
  }
  ::close(process_->to_worker);
  process_->to_worker = -1;
  process_->finish(std::chrono::milliseconds(2000));
}

void Worker::retire(bool wait_for_exit) {
  if (!process_) return;
  process_->finish(wait_for_exit ? std::chrono::milliseconds(5000) : std::chrono::milliseconds(0));
  process_.reset();
}

void Worker::ensure_running() {
  if (process_) return;
  std::error_code ec;
  if (!std::filesystem::exists(options_.executable, ec))
    throw EnvironmentError(fmt::format("worker program {} not found (set MLATUNE_WORKER)",
                                       options_.executable.string()));
  auto [request_read, request_write] = make_pipe();
  auto [reply_read, reply_write] = make_pipe();

  SpawnActions actions;
  // dup2 clears close-on-exec on the copies: the child sees exactly fds 3 and 4.
  actions.dup2(request_read.get(), 3);
  actions.dup2(reply_write.get(), 4);
  std::string program = options_.executable.string();
  std::vector<char*> argv = {program.data(), nullptr};
  std::vector<std::string> environment_text;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "MLATUNE_WORKER_TEST_FAULTS=", 27) != 0) environment_text.emplace_back(*e);
  if (options_.allow_test_faults) environment_text.emplace_back("MLATUNE_WORKER_TEST_FAULTS=1");
  std::vector<char*> environment;
  for (std::string& e : environment_text) environment.push_back(e.data());
  environment.push_back(nullptr);
  auto process = std::make_unique<Process>();
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, program.c_str(), actions.get(), nullptr, argv.data(), environment.data());
  if (spawned != 0)
    throw EnvironmentError(fmt::format("cannot start the worker {}: {}", program, errno_text(spawned)));
  // The child holds its own copies; ours of its ends must close, or a dead
  // worker would never read as end-of-file.
  request_read = FileDescriptor();
  reply_write = FileDescriptor();
  process->to_worker = request_write.release();
  process->from_worker = reply_read.release();
  process->pid = pid;
  process->reader.emplace(process->from_worker);
  process_ = std::move(process);
  if (started_once_) ++replacements_;
  started_once_ = true;

  if (workload_request_) {
    // A replacement worker sets up the same workload (same seed: same inputs).
    json reply = exchange_or_throw(*workload_request_, options_.setup_timeout_s,
                                   "setting up the workload in a replacement worker");
    (void)reply;
  }
}

std::optional<json> Worker::exchange(const json& request, double step_timeout_s, Failure& failure) {
  ensure_running();
  auto step = std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(step_timeout_s));
  try {
    write_message(process_->to_worker, request);
  } catch (const EnvironmentError&) {
    process_->finish(std::chrono::milliseconds(5000));
    failure = {Outcome::crashed, exit_text(process_->status) + " before the request was sent"};
    process_.reset();
    return std::nullopt;
  }
  while (true) {
    json message;
    MessageReader::Status status = process_->reader->read(message, steady::now() + step);
    if (status == MessageReader::Status::timeout) {
      ::kill(process_->pid, SIGKILL);
      retire(true);
      failure = {Outcome::timeout,
                 fmt::format("no progress within {:.3g} s; the worker was killed", step_timeout_s)};
      return std::nullopt;
    }
    if (status == MessageReader::Status::closed) {
      process_->finish(std::chrono::milliseconds(5000));
      std::string text = exit_text(process_->status);
      process_.reset();
      failure = {Outcome::crashed, text};
      return std::nullopt;
    }
    if (message.is_object() && message.value("type", "") == "progress") continue;
    return message;
  }
}

json Worker::exchange_or_throw(const json& request, double step_timeout_s, std::string_view what) try {
  Failure failure{};
  std::optional<json> reply = exchange(request, step_timeout_s, failure);
  if (!reply)
    throw EnvironmentError(fmt::format("{}: {} ({})", what, failure.reason, to_string(failure.outcome)));
  if (reply->value("type", "") == "error") {
    if (reply->value("exiting", false)) retire(true);
    std::string message = reply->value("message", "unknown error");
    if (reply->value("kind", "") == "input") throw InputError(message);
    throw EnvironmentError(fmt::format("{}: {}", what, message));
  }
  return *reply;
} catch (const json::exception& error) {
  malformed("reply", error);
}

double Worker::step_timeout_s() const {
  double reference_s = workload_ ? workload_->reference_us * 1e-6 : 0.0;
  double budget_s =
      workload_request_ ? workload_request_->value("budget_ms", TimingOptions{}.budget_ms) / 1000.0 : 0.0;
  return std::max(options_.timeout_floor_s, options_.timeout_reference_multiple * reference_s) +
         budget_s;
}

DeviceReport Worker::probe_device() try {
  json reply = exchange_or_throw(json{{"type", "probe"}}, options_.setup_timeout_s, "probing the GPU");
  DeviceReport report;
  report.usable = reply.at("usable").get<bool>();
  report.reason = reply.at("reason").get<std::string>();
  if (report.usable) report.device = decode_device(reply.at("device"));
  return report;
} catch (const json::exception& error) {
  malformed("probe reply", error);
}

WorkloadInfo Worker::set_workload(const WorkloadRequest& request) try {
  std::uint64_t seed = 0;
  if (request.seed) {
    seed = *request.seed;
  } else {
    std::random_device device;
    seed = (static_cast<std::uint64_t>(device()) << 32) | device();
  }
  json message = {{"type", "set_workload"},
                  {"space", std::filesystem::absolute(request.space_file).string()},
                  {"shape", request.shape},
                  {"seed", seed},
                  {"cache", to_string(request.timing.cache)},
                  {"budget_ms", request.timing.budget_ms},
                  {"max_repetitions", request.timing.max_repetitions},
                  {"min_repetitions", request.timing.min_repetitions},
                  {"stability", request.timing.stability},
                  {"cut_min_samples", request.timing.cut_min_samples}};
  workload_request_.reset();
  workload_.reset();
  json reply = exchange_or_throw(message, options_.setup_timeout_s, "setting up the workload");
  WorkloadInfo info;
  info.device = decode_device(reply.at("device"));
  info.seed = reply.at("seed").get<std::uint64_t>();
  info.reference_us = reply.at("reference_us").get<double>();
  info.floor = decode_timing(reply.at("floor"));
  info.input_sets = reply.at("input_sets").get<int>();
  info.device_bytes = reply.at("device_bytes").get<std::int64_t>();
  workload_request_ = message;
  workload_ = info;
  return info;
} catch (const json::exception& error) {
  malformed("workload reply", error);
}

EvaluationResult Worker::evaluate(const Candidate& candidate, const Cutoff& cutoff) try {
  if (!workload_request_) throw EnvironmentError("evaluate() before set_workload()");
  Failure failure{};
  json request = {{"type", "evaluate"}, {"candidate", encode(candidate)}};
  if (cutoff.active()) request["cutoff"] = encode(cutoff);
  std::optional<json> reply = exchange(request, step_timeout_s(), failure);
  if (!reply) {
    EvaluationResult result;
    result.outcome = failure.outcome;
    result.reason = failure.reason;
    result.context_lost = true;
    return result;
  }
  if (reply->value("type", "") == "error") {
    if (reply->value("exiting", false)) retire(true);
    throw EnvironmentError(fmt::format("evaluating {}: {}", candidate.label,
                                       reply->value("message", "unknown error")));
  }
  EvaluationResult result = decode_result(reply->at("result"));
  if (result.context_lost) retire(true);  // it exits after replying
  return result;
} catch (const json::exception& error) {
  malformed("evaluation reply", error);
}

std::vector<std::optional<TimingStats>> Worker::retime(const std::vector<Candidate>& candidates,
                                                       int rounds) try {
  if (!workload_request_) throw EnvironmentError("retime() before set_workload()");
  json list = json::array();
  for (const Candidate& c : candidates) list.push_back(encode(c));
  json reply = exchange_or_throw(json{{"type", "retime"}, {"candidates", list}, {"rounds", rounds}},
                                 step_timeout_s() * 2, "re-timing the fastest candidates");
  std::vector<std::optional<TimingStats>> timings;
  for (const json& t : reply.at("timings")) {
    if (t.is_null())
      timings.emplace_back();
    else
      timings.emplace_back(decode_timing(t));
  }
  return timings;
} catch (const json::exception& error) {
  malformed("re-timing reply", error);
}

EvaluationResult Worker::test_fault(std::string_view action, const EvaluationResult& echo) try {
  Failure failure{};
  std::optional<json> reply = exchange(
      json{{"type", "test_fault"}, {"action", action}, {"result", encode(echo)}},
      options_.timeout_floor_s, failure);
  if (!reply) {
    EvaluationResult result;
    result.outcome = failure.outcome;
    result.reason = failure.reason;
    result.context_lost = true;
    return result;
  }
  if (reply->value("type", "") == "error")
    throw EnvironmentError(reply->value("message", "unknown error"));
  EvaluationResult result = decode_result(reply->at("result"));
  if (result.context_lost) retire(true);
  return result;
} catch (const json::exception& error) {
  malformed("test fault reply", error);
}

}  // namespace mlatune
