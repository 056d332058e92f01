// The isolation between the tuner and the GPU: candidates run in a separate
// worker process (the mlatune-worker program, tuner/worker/main.cpp) that the
// tuner starts and talks to over two pipes (tuner/worker/framing.h,
// tuner/worker/codec.h).  A candidate that crashes the CUDA context or hangs
// takes only the worker down: it is recorded as crashed or timeout, a fresh
// worker is started, and the sweep goes on.  The tuner process itself never
// initializes CUDA.  The worker never outlives the tuner
// (tuner/worker/lifeline.h).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tuner/evaluator.h"
#include "tuner/timing.h"
#include "tuner/worker/messages.h"

namespace mlatune {

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
  /// One compilation (compile()) may take this long; the slowest config
  /// seen took about 25 s in ptxas, so only a hung NVRTC meets it.
  double compile_timeout_s = 600.0;
  /// Lets the worker honour test_fault requests (tests of this file only).
  bool allow_test_faults = false;
  /// "NAME=value" entries set in the worker's environment only, replacing
  /// any inherited value of NAME: how one worker is given one GPU
  /// (CUDA_VISIBLE_DEVICES, tuner/worker/gpus.h) while its code keeps using
  /// device 0, and the tuner's own environment stays as it was.
  std::vector<std::string> environment;
};

/// mlatune-worker in the directory of the running program (/proc/self/exe);
/// EnvironmentError when that cannot be read.
std::filesystem::path worker_beside_this_program();

/// What the worker should set up: a space file, a shape, inputs and timing.
struct WorkloadRequest {
  std::filesystem::path space_file;
  std::string shape;                  // "B=2,T=32,..."
  std::optional<std::uint64_t> seed;  // unset: a fresh random seed
  TimingOptions timing;
};

/// A worker process and the sweep-level logic around it: requests, timeouts,
/// replacement after a crash.  Not thread-safe; one request at a time, from
/// the thread that made the first one (the worker is tied to that thread's
/// life: tuner/worker/lifeline.h).
class Worker {
 public:
  explicit Worker(WorkerOptions options = {});
  /// Asks the worker to quit, and kills it if it has not within 2 s.
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
  /// Compiles `request` with NVRTC in the worker process, which makes no
  /// CUDA context for it (needs no GPU, nor a workload).  A process that
  /// dies or hangs gets one more try in a fresh process; dying again gives a
  /// CompileFailure of this request (key and options from `compiler`);
  /// a failing NVRTC call throws EnvironmentError, as Compiler::compile does.
  CompileResult compile(const CompileRequest& request, const Compiler& compiler);
  /// How many workers were started to replace one that crashed or hung.
  int replacements() const { return replacements_; }
  /// Asks the running worker process (if any) to quit, and kills it if it
  /// has not within 2 s; the next request starts a fresh one with the same
  /// workload.  For a worker that one thread lends to another: a process is
  /// tied to the thread that started it (tuner/worker/lifeline.h).
  void stop();
  /// The current per-step timeout in seconds.
  double step_timeout_s() const;
  /// The running worker's process id; nullopt while none runs.
  std::optional<int> process_id() const;
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
  std::optional<Reply> exchange(const Request& request, double step_timeout_s, Failure& failure);
  Reply exchange_or_throw(const Request& request, double step_timeout_s, std::string_view what);
  [[noreturn]] void throw_error(const ErrorReply& error, std::string_view what);
  EvaluationResult result_of(std::optional<Reply> reply, const Failure& failure, std::string_view what);
  void ensure_running();
  void spawn();
  void retire(bool wait_for_exit);

  WorkerOptions options_;
  std::unique_ptr<Process> process_;
  std::optional<SetWorkloadRequest> workload_request_;
  std::optional<WorkloadInfo> workload_;
  bool started_once_ = false;
  int replacements_ = 0;
};

}  // namespace mlatune
