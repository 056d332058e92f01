// The messages between the tuner and its worker process, as typed values.
// The tuner sends one request and reads replies until the answer; the worker
// sends a ProgressReply after each step that synchronized with the GPU, and
// every such heartbeat restarts the tuner's timeout.  Bytes on the wire:
// tuner/worker/codec.h; framing: tuner/worker/framing.h.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/compiler.h"
#include "core/cuda.h"
#include "tuner/evaluator.h"
#include "tuner/timing.h"

namespace mlatune {

/// What the worker set up for a shape.
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
  DeviceProperties device;            // meaningful when usable
  /// Devices the worker's process sees (`tune --gpus all` asks a worker,
  /// since the tuner must not initialize CUDA); 0 when it could not ask.
  int device_count = 0;
};

// ---- requests (tuner -> worker) ----------------------------------------------

/// Can this process use a GPU?  Answered by DeviceReport.
struct ProbeRequest {};

/// Load a space, set up the workload of one shape.  Answered by WorkloadInfo.
struct SetWorkloadRequest {
  std::string space_file;             // absolute
  std::string shape;                  // "B=2,T=32,..."
  std::uint64_t seed = 0;
  TimingOptions timing;
};

/// Validate and time one candidate.  Answered by ResultReply.
struct EvaluateRequest {
  Candidate candidate;
  std::optional<Cutoff> cutoff;       // absent: time to the end
};

/// Time validated candidates again, interleaved.  Answered by TimingsReply.
struct RetimeRequest {
  std::vector<Candidate> candidates;
  int rounds = 0;
};

/// Tests only (honoured when the worker runs with test faults allowed):
/// "echo" `result` back, or "abort", "hang", "exit", "lost".
struct TestFaultRequest {
  std::string action;
  EvaluationResult result;
};

/// Leave: answered by ByeReply, then the worker exits 0.
struct QuitRequest {};

/// Compile one request with NVRTC (no GPU needed, no CUDA context made):
/// a worker that only compiles is how the tuner's compile pool keeps each
/// NVRTC run in a process of its own (CompilePool, CompileIn::processes).
struct CompileJobRequest {
  CompileRequest request;
};

using Request = std::variant<ProbeRequest, SetWorkloadRequest, EvaluateRequest, RetimeRequest,
                             TestFaultRequest, QuitRequest, CompileJobRequest>;

// ---- replies (worker -> tuner) -----------------------------------------------

/// Heartbeat: a step that synchronized with the GPU finished.
struct ProgressReply {};

struct ResultReply {
  EvaluationResult result;
};

struct TimingsReply {
  std::vector<std::optional<TimingStats>> timings;  // nullopt: no longer runs correctly
};

/// A request failed.  `input`: bad input (an unknown shape...); `internal`:
/// a bug in mlatune (a request out of order, an unknown fault); else the
/// environment.  `exiting`: the worker leaves after this reply (its CUDA
/// context is gone), so no further request may be sent to it.
struct ErrorReply {
  enum class Kind { input, environment, internal };
  Kind kind = Kind::environment;
  std::string message;
  bool exiting = false;
};

struct ByeReply {};

/// What a CompileJobRequest gave: a binary or the compiler's failure.
struct CompiledReply {
  CompileResult result;
};

using Reply = std::variant<ProgressReply, DeviceReport, WorkloadInfo, ResultReply, TimingsReply,
                           ErrorReply, ByeReply, CompiledReply>;

}  // namespace mlatune
