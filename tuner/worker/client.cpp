#include "tuner/worker/client.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.h"
#include "tuner/worker/codec.h"
#include "tuner/worker/framing.h"
#include "tuner/worker/lifeline.h"

extern char** environ;

namespace mlatune {

using steady = std::chrono::steady_clock;

namespace {

std::string errno_text(int error) { return fmt::format("{} ({})", std::strerror(error), error); }

std::string signal_name(int signal) {
  const char* text = strsignal(signal);
  return fmt::format("signal {} ({})", signal, text ? text : "unknown");
}

std::string exit_text(int status) {
  if (WIFSIGNALED(status)) return "the worker was killed by " + signal_name(WTERMSIG(status));
  if (WIFEXITED(status)) return fmt::format("the worker exited with status {}", WEXITSTATUS(status));
  return fmt::format("the worker stopped (wait status {})", status);
}

std::filesystem::path default_worker_executable() {
  if (const char* env = std::getenv("MLATUNE_WORKER"); env && *env) return env;
  return worker_beside_this_program();
}

}  // namespace

std::filesystem::path worker_beside_this_program() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw EnvironmentError("cannot locate the running executable: " + ec.message());
  return self.parent_path() / "mlatune-worker";
}

namespace {

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

/// The variable an "NAME=value" entry sets, with its "=".
std::string_view variable_of(std::string_view entry) { return entry.substr(0, entry.find('=') + 1); }

/// This process's environment for the worker, with `overrides` ("NAME=value")
/// in place of inherited values; test faults only when allowed.
std::vector<std::string> worker_environment(bool allow_test_faults, std::vector<std::string> overrides) {
  if (allow_test_faults) overrides.emplace_back("MLATUNE_WORKER_TEST_FAULTS=1");
  auto overridden = [&](std::string_view entry) {
    if (variable_of(entry) == "MLATUNE_WORKER_TEST_FAULTS=") return true;
    for (const std::string& o : overrides)
      if (variable_of(o) == variable_of(entry)) return true;
    return false;
  };
  std::vector<std::string> environment;
  for (char** e = environ; *e; ++e)
    if (!overridden(*e)) environment.emplace_back(*e);
  environment.insert(environment.end(), overrides.begin(), overrides.end());
  return environment;
}

std::vector<char*> pointers(std::vector<std::string>& texts) {
  std::vector<char*> out;
  for (std::string& text : texts) out.push_back(text.data());
  out.push_back(nullptr);
  return out;
}

/// The reply a request expects; an error reply or another kind is an error.
template <class Expected>
Expected expect(Reply reply, std::string_view what) {
  if (auto* value = std::get_if<Expected>(&reply)) return std::move(*value);
  throw EnvironmentError(fmt::format("{}: the worker sent an unexpected reply", what));
}

}  // namespace

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

Worker::Worker(WorkerOptions options) : options_(std::move(options)) {
  if (options_.executable.empty()) options_.executable = default_worker_executable();
}

Worker::~Worker() { stop(); }

void Worker::stop() {
  if (!process_) return;
  try {
    write_message(process_->to_worker, encode_request(QuitRequest{}));
  } catch (...) {
    // Already gone: it is reaped below all the same.
  }
  ::close(process_->to_worker);
  process_->to_worker = -1;
  process_->finish(std::chrono::milliseconds(2000));
  process_.reset();
}

std::optional<int> Worker::process_id() const {
  if (!process_ || process_->reaped) return std::nullopt;
  return process_->pid;
}

void Worker::retire(bool wait_for_exit) {
  if (!process_) return;
  process_->finish(wait_for_exit ? std::chrono::milliseconds(5000) : std::chrono::milliseconds(0));
  process_.reset();
}

void Worker::spawn() {
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
  // The worker checks that this process is still its parent (lifeline.h).
  std::vector<std::string> arguments = {options_.executable.string(), std::string(parent_pid_option),
                                        std::to_string(::getpid())};
  std::vector<std::string> environment = worker_environment(options_.allow_test_faults, options_.environment);
  std::vector<char*> argv = pointers(arguments);
  std::vector<char*> envp = pointers(environment);
  auto process = std::make_unique<Process>();
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, arguments[0].c_str(), actions.get(), nullptr, argv.data(), envp.data());
  if (spawned != 0)
    throw EnvironmentError(fmt::format("cannot start the worker {}: {}", arguments[0], errno_text(spawned)));
  // The child holds its own copies; ours of its ends must close, or a dead
  // worker would never read as end-of-file.
  request_read = FileDescriptor();
  reply_write = FileDescriptor();
  process->to_worker = request_write.release();
  process->from_worker = reply_read.release();
  process->pid = pid;
  process->reader.emplace(process->from_worker);
  process_ = std::move(process);
}

void Worker::ensure_running() {
  if (process_) return;
  spawn();
  if (started_once_) ++replacements_;
  started_once_ = true;
  if (workload_request_) {
    // A replacement worker sets up the same workload (same seed: same inputs).
    expect<WorkloadInfo>(exchange_or_throw(*workload_request_, options_.setup_timeout_s,
                                           "setting up the workload in a replacement worker"),
                         "setting up the workload in a replacement worker");
  }
}

std::optional<Reply> Worker::exchange(const Request& request, double step_timeout_s, Failure& failure) {
  ensure_running();
  auto step = std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(step_timeout_s));
  try {
    write_message(process_->to_worker, encode_request(request));
  } catch (const EnvironmentError&) {
    process_->finish(std::chrono::milliseconds(5000));
    failure = {Outcome::crashed, exit_text(process_->status) + " before the request was sent"};
    process_.reset();
    return std::nullopt;
  }
  while (true) {
    std::vector<std::uint8_t> bytes;
    MessageReader::Status status = process_->reader->read(bytes, steady::now() + step);
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
    Reply reply = decode_reply(bytes);
    if (!std::holds_alternative<ProgressReply>(reply)) return reply;
  }
}

Reply Worker::exchange_or_throw(const Request& request, double step_timeout_s, std::string_view what) {
  Failure failure{};
  std::optional<Reply> reply = exchange(request, step_timeout_s, failure);
  if (!reply)
    throw EnvironmentError(fmt::format("{}: {} ({})", what, failure.reason, to_string(failure.outcome)));
  if (const auto* error = std::get_if<ErrorReply>(&*reply)) throw_error(*error, what);
  return std::move(*reply);
}

void Worker::throw_error(const ErrorReply& error, std::string_view what) {
  if (error.exiting) retire(true);
  if (error.kind == ErrorReply::Kind::input) throw InputError(error.message);
  if (error.kind == ErrorReply::Kind::internal) throw InternalError(fmt::format("{}: {}", what, error.message));
  throw EnvironmentError(fmt::format("{}: {}", what, error.message));
}

CompileResult Worker::compile(const CompileRequest& request, const Compiler& compiler) {
  Failure failure{};
  std::optional<Reply> reply = exchange(CompileJobRequest{request}, options_.compile_timeout_s, failure);
  // A process that died while idle (or on this request) gets one more try
  // in a fresh process; a config that kills NVRTC kills that one too.
  if (!reply) reply = exchange(CompileJobRequest{request}, options_.compile_timeout_s, failure);
  if (!reply) {
    CompileFailure f;
    f.key = compiler.key(request);
    f.options = compiler.options(request);
    f.log = fmt::format("the compile process ended while compiling: {} ({})", failure.reason,
                        to_string(failure.outcome));
    f.message = fmt::format("{} for {}, config {}: {}", request.source_name, request.arch, request.config, f.log);
    return CompileResult(std::move(f));
  }
  if (const auto* error = std::get_if<ErrorReply>(&*reply)) throw_error(*error, "compiling " + request.config);
  return expect<CompiledReply>(std::move(*reply), "compiling").result;
}

EvaluationResult Worker::result_of(std::optional<Reply> reply, const Failure& failure,
                                   std::string_view what) {
  if (!reply) {
    EvaluationResult result;
    result.outcome = failure.outcome;
    result.reason = failure.reason;
    result.context_lost = true;
    return result;
  }
  if (const auto* error = std::get_if<ErrorReply>(&*reply)) {
    if (error->exiting) retire(true);
    std::string message = what.empty() ? error->message : fmt::format("{}: {}", what, error->message);
    if (error->kind == ErrorReply::Kind::internal) throw InternalError(message);
    throw EnvironmentError(message);
  }
  EvaluationResult result = expect<ResultReply>(std::move(*reply), "evaluating").result;
  if (result.context_lost) retire(true);  // it exits after replying
  return result;
}

double Worker::step_timeout_s() const {
  double reference_s = workload_ ? workload_->reference_us * 1e-6 : 0.0;
  double budget_s = workload_request_ ? workload_request_->timing.budget_ms / 1000.0 : 0.0;
  return std::max(options_.timeout_floor_s, options_.timeout_reference_multiple * reference_s) +
         budget_s;
}

DeviceReport Worker::probe_device() {
  return expect<DeviceReport>(
      exchange_or_throw(ProbeRequest{}, options_.setup_timeout_s, "probing the GPU"), "probing the GPU");
}

WorkloadInfo Worker::set_workload(const WorkloadRequest& request) {
  SetWorkloadRequest message;
  if (request.seed) {
    message.seed = *request.seed;
  } else {
    std::random_device device;
    message.seed = (static_cast<std::uint64_t>(device()) << 32) | device();
  }
  message.space_file = std::filesystem::absolute(request.space_file).string();
  message.shape = request.shape;
  message.timing = request.timing;
  workload_request_.reset();
  workload_.reset();
  WorkloadInfo info = expect<WorkloadInfo>(
      exchange_or_throw(message, options_.setup_timeout_s, "setting up the workload"),
      "setting up the workload");
  workload_request_ = message;
  workload_ = info;
  return info;
}

EvaluationResult Worker::evaluate(const Candidate& candidate, const Cutoff& cutoff) {
  if (!workload_request_) throw EnvironmentError("evaluate() before set_workload()");
  Failure failure{};
  EvaluateRequest request{candidate, std::nullopt};
  if (cutoff.active()) request.cutoff = cutoff;
  std::optional<Reply> reply = exchange(request, step_timeout_s(), failure);
  return result_of(std::move(reply), failure, fmt::format("evaluating {}", candidate.label));
}

std::vector<std::optional<TimingStats>> Worker::retime(const std::vector<Candidate>& candidates,
                                                       int rounds) {
  if (!workload_request_) throw EnvironmentError("retime() before set_workload()");
  constexpr std::string_view what = "re-timing the fastest candidates";
  return expect<TimingsReply>(
             exchange_or_throw(RetimeRequest{candidates, rounds}, step_timeout_s() * 2, what), what)
      .timings;
}

EvaluationResult Worker::test_fault(std::string_view action, const EvaluationResult& echo) {
  Failure failure{};
  std::optional<Reply> reply =
      exchange(TestFaultRequest{std::string(action), echo}, options_.timeout_floor_s, failure);
  return result_of(std::move(reply), failure, "");
}

}  // namespace mlatune
