// The runtime dispatcher: launches a kernel family at any shape with the
// caller's device pointers on the caller's stream, using the config the
// store's sweeps found best (or the best guess for an untuned shape: see
// cache/dispatch_index.h).
//
// Per shape, the first launch chooses the config, loads its cubin from the
// store, evaluates the launch geometry and scalar arguments, and records a
// miss for an untuned shape (once per shape and process) so that `mlatune
// tune --misses` tunes it.
//
// The caller's thread never waits for NVRTC while something else can run:
// when the chosen config's binary is neither loaded nor stored, the shape
// starts on a stand-in (the first config of DispatchIndex::ranked() whose
// binary is loaded in this process or stored in the database), its entry is
// marked provisional, and the chosen binary compiles on one background
// thread (cache/compile_queue.h).  Once compiled it is stored (when the
// database is writable), loaded, and the shape's entry switches to it
// atomically; a compile that fails leaves the stand-in in place (counted in
// stats, said by describe()).  Only when no usable binary exists at all does
// the caller's thread compile (a blocking compile), and always with
// CompileMode::blocking; CompileMode::nonblocking never compiles there: such
// a launch throws NotReadyError at once (nothing is launched) while the
// binary compiles in the background, so the caller can run the call another
// way meanwhile.  Every later
// launch of that shape (a cache hit) takes no lock and allocates nothing: a
// look in the calling thread's memo of its last shapes, or else a lock-free
// probe of the shape table (cache/shape_table.h), then cudaLaunchKernel.
// Tuning never happens here.
//
// At a shape nobody tuned (any reason but hit), the dispatcher also races
// the selector's first few configs (RaceOptions, cache/dispatch_race.h): a
// background job readies each candidate's binary (loaded, read from the
// store or compiled there), then the shape's next launches each run one
// candidate between two CUDA events on the caller's stream, and once every
// candidate has its samples the one with the lowest median runs from then
// on.  Times are read with cudaEventQuery, so a launch never waits for the
// GPU; a launch during stream capture is not timed (it runs the leader).
// Every candidate is valid at the shape, so outputs are right throughout;
// their last bits may differ from one candidate to the next until the race
// settles.  Hits never race.  Racing is on by default with RaceOptions'
// four candidates (the H200 measurements behind that: docs/performance.md,
// eighth session), plus up to two of the choice's filling variants where its
// grid leaves SMs idle (DispatchIndex::filling_variants; MLATUNE_RACE_FILL=N
// races N of them); MLATUNE_RACE=N races N instead, and 0 or 1 turns it off,
// as do DispatcherOptions::race{.candidates = 0} with race_from_environment
// false.
//
// Thread safety: every member function may be called from many threads at
// once.  CUDA headers stay out of this header (streams are opaque pointers).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/call_signature.h"
#include "cache/dispatch_index.h"
#include "cache/dispatch_race.h"
#include "core/error.h"
#include "core/space.h"

namespace mlatune {

/// background: a shape whose chosen binary is not ready runs a ready
/// stand-in while the chosen one compiles on a background thread, and only
/// a shape with no ready binary at all compiles on the caller's thread;
/// blocking: the first launch compiles the chosen binary on the caller's
/// thread (the best config from the first call, at the price of 0.1-2 s of
/// NVRTC); nonblocking: as background, except that where no binary at all
/// is ready the launch throws NotReadyError instead of compiling (the
/// shape's launches keep throwing it until its background compile or race
/// has a binary ready; wait_compiles() waits for that).
///
/// Why nonblocking is a mode the caller asks for rather than the default: a
/// caller of background mode is promised that a launch that returns has
/// run, so where nothing is compiled yet the only non-blocking answer, "run
/// it another way", must be one the caller has said it can handle (a
/// framework that falls back to its own attention, say).
enum class CompileMode { background, blocking, nonblocking };

/// A launch in CompileMode::nonblocking at a shape with no binary ready: no
/// kernel ran; the shape's binary compiles in the background.  Retrying the
/// launch later is how the caller learns it is ready.
class NotReadyError : public EnvironmentError {
 public:
  using EnvironmentError::EnvironmentError;
};

struct DispatcherOptions {
  int device = 0;            // CUDA device ordinal the launches run on
  CompileMode compile = CompileMode::background;
  /// Count untuned shapes in the store (when writable).  The background
  /// thread writes them (wait_compiles() waits for that too); the ones not
  /// written yet are written when the dispatcher is destroyed.
  bool record_misses = true;
  /// Read-only never writes (no misses, no compiled binaries stored); the
  /// default opens read-write and falls back to read-only when it cannot.
  bool read_only = false;
  /// Races at untuned shapes (see the top of this file): four candidates
  /// unless said otherwise.  With race_from_environment, MLATUNE_RACE (when
  /// set to a number) replaces race.candidates, so that a deployment can turn
  /// races off or widen them without a rebuild.
  RaceOptions race{};
  bool race_from_environment = true;
  /// Workspace memory (a prologue's materialized K/V, per launch) the
  /// dispatcher's own stream-ordered pool keeps across synchronizations,
  /// instead of giving it back to the driver and mapping it again at the
  /// next launch.  A shape's first launch raises what is kept to its
  /// workspaces' size, up to an eighth of the device's memory, so that its
  /// later launches map nothing afresh.  0 keeps nothing, ever (each launch
  /// after a synchronization maps its workspace afresh).
  std::uint64_t workspace_keep_bytes = std::uint64_t{1} << 30;
  /// Workspace memory mapped at open and kept from then on (0: none), so
  /// that no first launch up to that size maps any: mapping is host time the
  /// caller's first call pays, 4.2 ms on the H100 for the 1.9 GB of K/V at
  /// B=6,T=2759,H=59,D=240,R=291.  The environment variable
  /// MLATUNE_WORKSPACE_RESERVE (bytes, or with a K, M or G suffix: 4G), when
  /// set, replaces it.  Ignored for a space without a prologue.
  std::uint64_t workspace_reserve_bytes = 0;
  /// Load, on a thread of its own started at open, every stored binary this
  /// dispatcher could run (its kernel family and template, this NVRTC, an
  /// architecture the device runs), so that a first use whose binary is
  /// stored (inside a range `mlatune cache warm` covered) reads and loads
  /// nothing: on the H100 those two steps were 1.5-2 ms of a 2.3 ms first
  /// call.  It costs the device memory of the loaded code and about a
  /// millisecond of that thread per binary; a first use meanwhile may wait
  /// for the driver.  wait_compiles() waits for it.  The environment
  /// variable MLATUNE_PRELOAD (1 or 0), when set, replaces it.
  bool preload_stored = false;
};

/// A byte count as MLATUNE_WORKSPACE_RESERVE takes it: digits, optionally
/// followed by K, M or G (times 1024, 1024^2, 1024^3).  Anything else (a
/// sign, a space, more than 19 digits, a product past 2^64) is an
/// InputError that quotes `name` and the text.
std::uint64_t parse_byte_count(std::string_view text, std::string_view name);

/// Counters since open (for tests and logs).
struct DispatcherStats {
  std::uint64_t shapes = 0;            // distinct shapes prepared
  std::uint64_t binaries_loaded = 0;   // cubins loaded into the context
  std::uint64_t binaries_from_store = 0; // by first uses and background work, not the preload
  std::uint64_t binaries_preloaded = 0;  // by the preload (preload_stored), so far
  std::uint64_t preload_failures = 0;    // stored binaries the preload could not read or load
  std::uint64_t compiles = 0;          // NVRTC compilations (absent binaries), both kinds
  std::uint64_t blocking_compiles = 0; // on a caller's thread (no stand-in, or blocking mode)
  std::uint64_t not_ready_shapes = 0;  // shapes whose first launch threw NotReadyError (nonblocking mode)
  std::uint64_t not_ready_launches = 0; // launches that threw NotReadyError, first ones included
  std::uint64_t background_compiles = 0;  // finished on the background thread
  std::uint64_t background_failures = 0;  // background compiles or loads that failed
  std::uint64_t stand_in_shapes = 0;   // shapes whose first launch ran a stand-in
  std::uint64_t switches = 0;          // shapes switched from a stand-in to their choice
  std::uint64_t races = 0;             // untuned shapes whose candidates were readied for a race
  std::uint64_t races_settled = 0;     // races whose winner runs now
  std::uint64_t race_launches = 0;     // launches timed for a race
  std::string last_background_error;
  std::uint64_t binaries_stored = 0;
  std::uint64_t misses_recorded = 0;   // written to the store so far (see record_misses)
  std::uint64_t misses_unrecorded = 0; // untuned shapes a read-only store could not count
  /// What the workspace pool keeps across synchronizations now (0 for a
  /// space without a prologue): workspace_keep_bytes, or the largest
  /// workspace a shape's first launch needed since.
  std::uint64_t workspace_kept_bytes = 0;
  /// What the pool holds mapped now (the driver's reserved memory of it).
  std::uint64_t workspace_mapped_bytes = 0;
  /// Host time of first uses on callers' threads, by phase, summed over
  /// shapes (nanoseconds): the choice (index lookup and repairs:
  /// DispatchIndex::choose), reading
  /// cubins from the store, loading them into the context (main kernel and
  /// prologue), readying the launch (attributes, shared-memory opt-in),
  /// noting the miss for the background thread to count, ranking the
  /// stand-ins (only where the choice's binary is absent), queueing the choice's
  /// background compile, the first launch's enqueue (its kernels and, inside
  /// it, the workspaces' allocation and release), and waiting for the lock
  /// that first uses share with the background thread's loads and stores.
  /// The same steps run for a race or a background compile are not counted.
  std::uint64_t choose_ns = 0, store_read_ns = 0, load_ns = 0, ready_ns = 0, miss_ns = 0, rank_ns = 0,
                queue_ns = 0, first_launch_ns = 0, workspace_ns = 0, lock_wait_ns = 0;
};

/// A race at one untuned shape, as describe() saw it.
struct RaceReport {
  struct Runner {
    Choice choice;
    std::vector<double> times_us;  // the launches timed so far
    double median_us = 0;          // of times_us; 0 when none
  };
  std::vector<Runner> runners;  // in the selector's order
  std::size_t samples = 0;      // times each runner needs
  bool settled = false;
  std::size_t leader = 0;       // the fastest so far; the winner once settled
  /// "race settled: ..." or "racing ...": one line for logs.
  std::string text() const;
};

/// What describe() reports for one shape.
struct DispatchDescription {
  Choice choice;  // the chosen config
  /// Set while the shape runs a stand-in for `choice` (whose binary is
  /// compiling, or failed to: background_error).
  std::optional<Choice> stand_in;
  std::string background_error;
  /// Set while the shape's launches throw NotReadyError (nonblocking mode).
  bool not_ready = false;
  /// Set from the moment a race's candidates are ready (untuned shapes).
  std::optional<RaceReport> race;
  std::string shape_text;
  std::string text;  // one line for logs: shape, reason, config, where from
};

class Dispatcher {
 public:
  /// Probes the GPU (EnvironmentError "no GPU: ..." without one), loads the
  /// space (InputError when malformed), opens the database and builds the
  /// index.  A database that does not exist is an InputError.
  static std::unique_ptr<Dispatcher> open(const std::filesystem::path& database,
                                          const std::filesystem::path& space_file,
                                          DispatcherOptions options = {});
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  /// Launches at `shape` with the complete argument list (`arguments[i]`
  /// points to the value of the space's i-th argument, as cudaLaunchKernel
  /// takes them) on `stream` (a cudaStream_t; null = default stream).  The
  /// entries of workspace arguments are ignored (may be null): where the
  /// chosen config's prologue runs, the dispatcher allocates the workspace
  /// with cudaMallocAsync on `stream`, launches prologue then main, and frees
  /// it with cudaFreeAsync on `stream`; elsewhere it passes null pointers.
  /// Throws InputError when the shape does not have one positive value per
  /// shape variable or no config can run it, EnvironmentError
  /// when its binary cannot be compiled or loaded, CudaError when the launch
  /// call fails, NotReadyError (CompileMode::nonblocking only) when no
  /// binary for the shape is ready yet.  Asynchronous like any launch.
  void launch(std::span<const std::int64_t> shape, void** arguments, void* stream);
  void launch(const Shape& shape, void** arguments, void* stream) {
    launch(std::span<const std::int64_t>(shape.values), arguments, stream);
  }
  /// Same, with only the buffer arguments (device pointers, in the order the
  /// space lists its buffers, workspace buffers left out); scalar arguments
  /// are evaluated from the shape once and supplied by the dispatcher, and
  /// workspace buffers as launch() says.
  void launch_buffers(std::span<const std::int64_t> shape, void* const* buffers, std::size_t buffer_count,
                      void* stream);
  void launch_buffers(const Shape& shape, void* const* buffers, std::size_t buffer_count, void* stream) {
    launch_buffers(std::span<const std::int64_t>(shape.values), buffers, buffer_count, stream);
  }
  /// launch_buffers for callers that know their buffers' sizes:
  /// `buffer_bytes[i]` is the size of `buffers[i]`.  A buffer smaller than
  /// its argument at `shape` is an InputError naming the argument, the bytes
  /// it needs and the bytes given, and nothing is launched.  The sizes an
  /// argument needs are computed once per shape, with the rest of its launch.
  void launch_buffers_checked(std::span<const std::int64_t> shape, void* const* buffers,
                              const std::size_t* buffer_bytes, std::size_t buffer_count, void* stream);

  /// The choice for `shape` (from the index; no GPU work, no miss recorded).
  /// InputError for a malformed shape, as launch() says.
  DispatchDescription describe(const Shape& shape) const;

  /// Blocks until every background compile queued so far has finished and
  /// its shapes have switched (or kept their stand-in after a failure), and
  /// every race queued so far has its candidates ready (the race itself
  /// goes on over the shape's next launches), and the misses noted so far
  /// are counted in the store, and the preload (preload_stored) is done.
  void wait_compiles();
  /// Changes the compile mode for shapes prepared from now on.
  void set_compile_mode(CompileMode mode);
  const SearchSpace& space() const;
  /// What callers pass: shape variables and buffers (see call_signature.h).
  const CallSignature& signature() const;
  const DispatchIndex& index() const;
  const DeviceInfo& device() const;
  bool store_writable() const;
  DispatcherStats stats() const;

  struct Impl;

 private:
  explicit Dispatcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlatune
