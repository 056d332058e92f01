// The isolation between the tuner and the GPU: candidates run in a separate
// worker process (the mlatune-worker program) that the tuner starts and talks
// to over two pipes.  A candidate that crashes the CUDA context or hangs takes
// only the worker down: it is recorded as crashed or timeout, a fresh worker
// is started, and the sweep goes on.  The tuner process itself never
// initializes CUDA.
//
// Protocol: each message is a 4-byte little-endian length followed by that
// many bytes of CBOR (a JSON value, so cubins travel as byte strings).  The
// tuner sends a request and reads messages until the reply; the worker sends
// {"type":"progress"} after each step that synchronized with the GPU, and
// every such heartbeat restarts the timeout.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cuda.h"
#include "tuner/evaluator.h"

namespace mlatune {

// ---- framing ------------------------------------------------------------------

/// The largest message either side accepts (a cubin is a few MiB at most).
inline constexpr std::uint32_t max_message_bytes = 256u << 20;

/// Writes one framed message; throws EnvironmentError when the pipe is
/// closed (the peer died) or the write fails.  Never raises SIGPIPE.
void write_message(int fd, const nlohmann::json& message);

/// Reads framed messages from a file descriptor, with a deadline.
class MessageReader {
 public:
  enum class Status { message, timeout, closed };
  explicit MessageReader(int fd) : fd_(fd) {}
  /// Waits for one message until `deadline` (forever when nullopt).
  /// Throws EnvironmentError for a malformed frame or a failing read.
  Status read(nlohmann::json& message,
              std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

 private:
  int fd_;
  std::string buffer_;
};

// ---- values on the wire -----------------------------------------------------------

nlohmann::json encode(const EvaluationResult&);
nlohmann::json encode(const TimingStats&);
nlohmann::json encode(const Candidate&);
nlohmann::json encode(const DeviceProperties&);
nlohmann::json encode(const Cutoff&);
/// The decoders throw EnvironmentError ("malformed message: ...") for a
/// message that lacks a key or holds a value of the wrong type.
EvaluationResult decode_result(const nlohmann::json&);
TimingStats decode_timing(const nlohmann::json&);
Candidate decode_candidate(const nlohmann::json&);
DeviceProperties decode_device(const nlohmann::json&);
Cutoff decode_cutoff(const nlohmann::json&);

// ---- the tuner's side -------------------------------------------------------------

struct WorkerOptions {
  /// The worker program; empty: $MLATUNE_WORKER, else mlatune-worker beside
  /// the running executable.
  std::filesystem::path executable;
  /// A step (one launch plus its check, or one timing batch) may take
  /// max(timeout_floor_s, timeout_reference_multiple × reference time) plus
  /// the timing budget; past that the worker is killed and the candidate
  /// recorded as timeout.
  double timeout_floor_s = 2.0;
  double timeout_reference_multiple = 50.0;
  /// Setting up a workload (compiling and running the reference) may take this long.
  double setup_timeout_s = 600.0;
  /// Lets the worker honour test_fault requests (tests of this file only).
  bool allow_test_faults = false;
};

/// What the worker should set up: a space file, a shape, inputs and timing.
struct WorkloadRequest {
  std::filesystem::path space_file;
  std::string shape;                  // "B=2,T=32,..."
  std::optional<std::uint64_t> seed;  // unset: a fresh random seed
  TimingOptions timing;
};

/// What the worker set up.
struct WorkloadInfo {
  DeviceProperties device;
  std::uint64_t seed = 0;             // the seed in use (reproduce with it)
  double reference_us = 0.0;
  TimingStats floor;                  // empty kernel, same method
  int input_sets = 0;
  std::int64_t device_bytes = 0;
};

/// Whether the worker's process can use a GPU, and which.
struct DeviceReport {
  bool usable = false;
  std::string reason;
  DeviceProperties device;
};

/// A worker process and the sweep-level logic around it: requests, timeouts,
/// replacement after a crash.  Not thread-safe; one request at a time.
class Worker {
 public:
  explicit Worker(WorkerOptions options = {});
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Asks a worker whether it can use a GPU (the tuner must not ask CUDA itself).
  DeviceReport probe_device();
  /// Sets up the workload; a replacement worker gets the same request, with
  /// the same seed.  Throws InputError / EnvironmentError as the worker reports.
  WorkloadInfo set_workload(const WorkloadRequest& request);
  /// Evaluates one candidate; timing ends early once it is slower than an
  /// active `cutoff` allows (TimingStats::cut).  Crash and timeout are
  /// results: the worker is replaced before the next request.
  EvaluationResult evaluate(const Candidate& candidate, const Cutoff& cutoff = {});
  /// Interleaved re-timing of validated candidates (drift guard at the end
  /// of a sweep).  Throws EnvironmentError if the worker fails meanwhile.
  std::vector<std::optional<TimingStats>> retime(const std::vector<Candidate>& candidates,
                                                 int rounds);
  /// How many workers were started to replace one that crashed or hung.
  int replacements() const { return replacements_; }
  /// The current per-step timeout in seconds.
  double step_timeout_s() const;
  /// Test hook, honoured only with WorkerOptions::allow_test_faults: the
  /// worker "echo"es `echo` back, or does "abort", "hang", "exit" (status 3,
  /// no reply) or "lost" (replies crashed with context_lost, then exits).
  EvaluationResult test_fault(std::string_view action, const EvaluationResult& echo = {});

 private:
  struct Process;
  struct Failure {
    Outcome outcome;
    std::string reason;
  };
  std::optional<nlohmann::json> exchange(const nlohmann::json& request, double step_timeout_s,
                                         Failure& failure);
  nlohmann::json exchange_or_throw(const nlohmann::json& request, double step_timeout_s,
                                   std::string_view what);
  void ensure_running();
  void retire(bool wait_for_exit);

  WorkerOptions options_;
  std::unique_ptr<Process> process_;
  std::optional<nlohmann::json> workload_request_;
  std::optional<WorkloadInfo> workload_;
  bool started_once_ = false;
  int replacements_ = 0;
};

/// The worker program's loop: serves requests from `in_fd`, replies on
/// `out_fd`, until "quit" or end of input.  Returns the exit status.
int run_worker_server(int in_fd, int out_fd);

}  // namespace mlatune
