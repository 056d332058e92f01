// A fixed pool of threads that compiles requests in parallel, with an
// in-memory cache of results keyed by BinaryKey: identical work is compiled
// once, even when the duplicates are submitted at the same time (the second
// submitter waits on the first one's result).  An optional external cache
// (the SQLite store, later) is consulted before compiling and told about
// every new binary.
#pragma once
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>

#include "core/compiler.h"
#include "tuner/worker/client.h"

namespace mlatune {

/// A second-level binary cache the pool consults (e.g. a database).  Either
/// function may be empty.  Both are called from the pool's threads, possibly
/// concurrently; they must be thread-safe.  Failures are not stored.
struct BinaryCacheHooks {
  std::function<std::optional<CompiledBinary>(const BinaryKey&)> lookup;
  std::function<void(const CompiledBinary&)> store;
};

/// Counts of what the pool did since it was made.
struct CompilePoolStats {
  std::uint64_t submitted = 0;
  std::uint64_t compiled = 0;         // NVRTC actually ran
  std::uint64_t memory_hits = 0;      // answered by a finished or in-flight identical request
  std::uint64_t external_hits = 0;    // answered by BinaryCacheHooks::lookup
  /// Summed over the compilations NVRTC ran: wall time and the compiling
  /// threads' CPU time.  Wall well above CPU means the threads waited for
  /// cores (more compile threads, or other work, than cores).
  double nvrtc_seconds = 0;
  double nvrtc_cpu_seconds = 0;
  /// Wall time the pool's threads spent in BinaryCacheHooks (lookups and
  /// stores), which holds a compile thread as much as NVRTC does.
  double cache_seconds = 0;
};

/// Where the pool runs NVRTC.
enum class CompileIn {
  /// On the pool's threads, in this process.
  threads,
  /// Each pool thread hands its requests to a worker process of its own
  /// (Worker::compile; no GPU, no CUDA context), started on its first
  /// request.  NVRTC's compilations in one process wait for one another: on
  /// the H200 host's 16 cores, 16 threads spent 2.7x their CPU time per
  /// flagship config at S0 (1.8x at S2), four processes of four threads
  /// 1.5x (1.2x).  A compiler that crashes then fails its config only.
  processes,
};
std::string_view to_string(CompileIn where);
std::optional<CompileIn> parse_compile_in(std::string_view text);

/// How much lower a compile thread runs than the thread that made the pool
/// (nice value, capped at 19), and so the compile process it starts, which
/// inherits it: compilation fills every core with work that can wait, while
/// the GPU worker's host thread and the sweep's, which keep the GPU fed, run
/// first whenever they need a core.
inline constexpr int compile_niceness = 10;
/// Lowers the calling thread's priority by compile_niceness; false where the
/// system refused (the thread keeps its priority).
bool lower_this_threads_priority();

/// The pool.  Thread-safe: submit() may be called from any thread.  The
/// compiler and the hooks must outlive the pool.
class CompilePool {
 public:
  /// `threads` == 0 means one per core (std::thread::hardware_concurrency()).
  /// With CompileIn::processes, `helper` says which worker program to start;
  /// without an executable there, $MLATUNE_COMPILE_WORKER, else the
  /// mlatune-worker beside the running program (not $MLATUNE_WORKER, which
  /// may name a stand-in for the GPU worker).  When that program does not
  /// exist, the pool compiles in threads (where() says so).
  explicit CompilePool(const Compiler& compiler, unsigned threads = 0, BinaryCacheHooks hooks = {},
                       CompileIn where = CompileIn::threads, WorkerOptions helper = {});
  /// Finishes the compilations already running; requests still queued get an
  /// EnvironmentError ("compile pool shut down") in their futures.
  ~CompilePool();
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  /// Queues a request (or finds its result).  The future holds the result,
  /// or an EnvironmentError when NVRTC itself failed.
  std::shared_future<CompileResult> submit(CompileRequest request);

  unsigned threads() const;
  CompileIn where() const;
  CompilePoolStats stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mlatune
