#include "cache/dispatcher.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <deque>
#include <future>
#include <thread>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cache/compile_queue.h"
#include "cache/shape_table.h"
#include "cache/store.h"
#include "cache/dispatch_launch.h"
#include "core/compiler.h"
#include "core/cuda.h"
#include "core/error.h"
#include "core/launch_issue.h"
#include "core/launch_plan.h"

namespace mlatune {
namespace {

/// Set on a caller's thread while it makes a shape's first use (and its
/// first launch): the phases count only that time, not the same steps run by
/// the background thread for a race or a compile.
thread_local bool in_first_use = false;

/// Marks the calling thread as making a first use for its scope.
class FirstUseScope {
 public:
  FirstUseScope() : outer_(in_first_use) { in_first_use = true; }
  ~FirstUseScope() { in_first_use = outer_; }
  FirstUseScope(const FirstUseScope&) = delete;
  FirstUseScope& operator=(const FirstUseScope&) = delete;

 private:
  bool outer_;
};

/// Adds the host time of its scope to a counter when it runs inside a
/// caller's first use (FirstUseScope); elsewhere it does nothing.  Never on
/// the hit path.
class PhaseTimer {
 public:
  explicit PhaseTimer(std::atomic<std::uint64_t>& sum)
      : sum_(in_first_use ? &sum : nullptr),
        start_(sum_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{}) {}
  ~PhaseTimer() {
    if (sum_)
      *sum_ += static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  std::atomic<std::uint64_t>* sum_;
  std::chrono::steady_clock::time_point start_;
};

/// A loaded cubin, shared by every shape whose choice names its key.
struct KernelSlot {
  explicit KernelSlot(LoadedEntry loaded) : main(std::move(loaded)) {}
  LoadedEntry main;
  /// The prologue entry of the same cubin (its library loaded once, with
  /// main), looked up on the first shape whose prologue runs (a config may
  /// compile it out where it never runs).
  std::optional<LoadedEntry> prologue;
};

/// Everything a launch at one shape needs, computed on its first launch and
/// never changed after (a hit reads it without a lock).  What a hit reads
/// comes first.
struct Race;

struct Prepared {
  DispatchLaunch launch;  // ready() only when `error` is empty
  /// Set while the shape races its candidates: a launch then goes through
  /// the race.
  bool racing = false;
  /// The shape's race, racing or settled (for describe()).
  Race* race = nullptr;
  /// Bytes each caller buffer needs at this shape, when the shape is
  /// well-formed (shape_ok); launch_buffers_checked compares against them.
  std::vector<std::int64_t> buffer_bytes;
  bool shape_ok = false;
  Choice choice;  // the config that runs: the chosen one, or a stand-in for it
  Choice target;  // the chosen config (the index's choice)
  /// Provisional: `choice` stands in for `target`, whose binary compiles on
  /// the background thread (or failed to: background_error).
  bool stand_in = false;
  std::string background_error;
  std::string error;
  bool input_error = false;  // a malformed shape or none that a config can run (the caller's input)
  /// CompileMode::nonblocking found no binary ready: `error` says so, a
  /// launch throws NotReadyError, and the background compile (or race)
  /// replaces this entry once a binary is ready (or with its failure).
  bool not_ready = false;
};

/// A shape's entry in the table: the Prepared it runs now.  Published with a
/// release store and read with an acquire load, so a switch from a stand-in
/// is atomic for launches on other threads; every Prepared ever published
/// stays alive until the dispatcher is destroyed (a launch may still read
/// the old one).
struct ShapeSlot {
  explicit ShapeSlot(const Prepared* p) : current(p) {}
  ShapeSlot(ShapeSlot&& other) noexcept : current(other.current.load(std::memory_order_relaxed)) {}
  mutable std::atomic<const Prepared*> current;
  const Prepared& get() const { return *current.load(std::memory_order_acquire); }
};

/// A race at one untuned shape (see dispatcher.h and dispatch_race.h): the
/// candidates' launches, the book, and the CUDA events of the timed launches
/// not read yet.  Lives until the dispatcher is destroyed (a launch may
/// still hold a Prepared that points here).
struct Race {
  struct Runner {
    Choice choice;
    DispatchLaunch launch;
  };
  struct InFlight {
    std::size_t runner;
    cudaEvent_t start, stop;
  };
  Race(std::vector<Runner> r, std::size_t samples) : runners(std::move(r)), book(runners.size(), samples) {}
  ~Race() { release_events(); }
  Race(const Race&) = delete;
  Race& operator=(const Race&) = delete;

  /// Destroys every event (one still pending is released by CUDA once it
  /// completes).  Never throws: also called from the destructor.
  void release_events() noexcept {
    for (const InFlight& f : in_flight) {
      cudaEventDestroy(f.start);
      cudaEventDestroy(f.stop);
    }
    in_flight.clear();
    for (cudaEvent_t e : spare) cudaEventDestroy(e);
    spare.clear();
  }

  std::mutex mutex;  // everything below
  std::vector<Runner> runners;
  RaceBook book;
  std::vector<InFlight> in_flight;
  std::vector<cudaEvent_t> spare;  // events whose times were read, for the next timed launches
  bool settled = false;            // the winner's Prepared is published
  std::size_t winner = 0;
};

/// How many alternatives the search for a stand-in looks through.
constexpr std::size_t stand_in_candidates = 8;
// The most a dispatcher's workspace pool keeps across synchronizations, as
// a share of the device's memory (WorkspacePool::keep_at_least): 1/8, 17.6 GB
// on the H200, past the 4.3 GB of K/V the benchmark's largest shape needs.
constexpr std::uint64_t workspace_keep_share = 8;

/// How many nearest tuned entries a race's candidates are drawn from (the
/// selector itself repairs and compares 4: SelectorOptions).
constexpr std::size_t race_neighbors = 8;

constexpr std::size_t max_stack_arguments = 32;

/// A count from the environment variable `name` (at most 64); unset or not a
/// number leaves the options alone.  MLATUNE_RACE: N >= 2 races N
/// candidates, 0 or 1 turns races off.  MLATUNE_RACE_FILL: the filling
/// variants raced beside them (0: none).
std::optional<std::size_t> count_from_environment(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(value, &end, 10);
  if (*end != '\0' || value[0] == '-') return std::nullopt;
  return static_cast<std::size_t>(std::min<unsigned long long>(n, 64));
}

/// parse_byte_count of the environment variable `name`; unset or empty
/// gives nullopt.
std::optional<std::uint64_t> bytes_from_environment(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  return parse_byte_count(value, name);
}

/// The environment variable `name` as a switch: "1" or "0"; unset or empty
/// gives nullopt; anything else is an InputError that quotes it.
std::optional<bool> switch_from_environment(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  if (std::strcmp(value, "1") == 0) return true;
  if (std::strcmp(value, "0") == 0) return false;
  throw InputError(fmt::format("{}='{}': expected 1 (on) or 0 (off)", name, value));
}

bool logging_enabled() {
  const char* value = std::getenv("MLATUNE_DISPATCH_LOG");
  return value && *value && std::strcmp(value, "0") != 0;
}

/// The stream-ordered pool a dispatcher's workspaces come from (launches
/// whose prologue runs allocate the materialized K/V per launch, then free it
/// on the stream).  The device's default pool gives its memory back to the
/// driver at every synchronization (release threshold 0), so a caller that
/// synchronizes between calls paid a fresh mapping per launch: on the H200,
/// 50-90 us at the small shapes and up to 0.4 ms at the large ones, measured
/// as the gap between a raced launch's events and the benchmark's time of the
/// same binary (docs/performance.md, eighth session).  This pool keeps up to
/// `keep_bytes` across synchronizations instead, without touching the
/// default pool other code in the process relies on.  Creating it and one
/// byte allocated and freed move the pool's setup (6.5 ms on the H200 for the
/// first pool of a process) to open.  A shape whose workspaces outgrow what
/// the pool keeps raises it (keep_at_least, up to `cap`): else every launch
/// there after a synchronization would map the excess afresh, host time a
/// first call on the H200 paid once (2.76 ms with the 1.9 GB of K/V at
/// 6,2759,59,240,291).  `reserve` bytes are mapped at open and kept (so
/// kept and cap are at least that): no first launch up to it maps any.
class WorkspacePool {
 public:
  WorkspacePool(int device, std::uint64_t keep_bytes, std::uint64_t cap, std::uint64_t reserve)
      : kept_(std::max(keep_bytes, reserve)), cap_(std::max(cap, reserve)) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    MLATUNE_CUDA(cudaMemPoolCreate(&pool_, &props));
    try {
      MLATUNE_CUDA(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &kept_));
      void* pointer = nullptr;
      const auto bytes = static_cast<std::size_t>(std::max<std::uint64_t>(reserve, 1));
      if (cudaError_t code = cudaMallocFromPoolAsync(&pointer, bytes, pool_, nullptr); code != cudaSuccess) {
        cuda_take_last_error();
        if (reserve == 0) MLATUNE_CUDA(code);
        throw EnvironmentError(fmt::format(
            "the workspace reserve of {} bytes (DispatcherOptions::workspace_reserve_bytes or "
            "MLATUNE_WORKSPACE_RESERVE) cannot be mapped on device {}: {}; lower it or leave it unset",
            reserve, device, cudaGetErrorString(code)));
      }
      MLATUNE_CUDA(cudaFreeAsync(pointer, nullptr));
      MLATUNE_CUDA(cudaStreamSynchronize(nullptr));
    } catch (...) {
      cudaMemPoolDestroy(pool_);
      throw;
    }
  }
  WorkspacePool(const WorkspacePool&) = delete;
  WorkspacePool& operator=(const WorkspacePool&) = delete;
  /// Memory still allocated (a launch in flight) is released by the driver
  /// once freed: destroying the pool does not wait for it.
  ~WorkspacePool() { cudaMemPoolDestroy(pool_); }
  cudaMemPool_t get() const { return pool_; }
  std::uint64_t kept() const {
    std::lock_guard lock(mutex_);
    return kept_;
  }
  /// What the pool holds mapped now.
  std::uint64_t mapped() const {
    std::uint64_t bytes = 0;  // the attribute is a cuuint64_t
    MLATUNE_CUDA(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &bytes));
    return bytes;
  }
  /// Keeps at least min(bytes, cap) across synchronizations from now on.
  void keep_at_least(std::uint64_t bytes) {
    bytes = std::min(bytes, cap_);
    std::lock_guard lock(mutex_);
    if (bytes <= kept_) return;
    MLATUNE_CUDA(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &bytes));
    kept_ = bytes;
  }

 private:
  cudaMemPool_t pool_ = nullptr;
  mutable std::mutex mutex_;  // first launches on several threads
  std::uint64_t kept_;        // the release threshold now
  const std::uint64_t cap_;
};

}  // namespace

std::uint64_t parse_byte_count(std::string_view text, std::string_view name) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string_view unit = text.substr(digits);
  int shift = 0;
  bool ok = digits > 0 && digits <= 19;
  if (unit == "K" || unit == "k") shift = 10;
  else if (unit == "M" || unit == "m") shift = 20;
  else if (unit == "G" || unit == "g") shift = 30;
  else if (!unit.empty()) ok = false;
  std::uint64_t n = 0;
  if (ok) {
    for (char c : text.substr(0, digits)) n = n * 10 + static_cast<std::uint64_t>(c - '0');
    ok = n <= (std::numeric_limits<std::uint64_t>::max() >> shift);
  }
  if (!ok)
    throw InputError(fmt::format("{}='{}': expected a byte count such as 4294967296 or 4G (a suffix K, M or G "
                                 "multiplies by 1024, 1024^2 or 1024^3)",
                                 name, text));
  return n << shift;
}

struct Dispatcher::Impl {
  DispatcherOptions options;
  DeviceProperties properties;
  DeviceInfo device;
  std::unique_ptr<SearchSpace> space;
  std::unique_ptr<CallSignature> signature;  // of *space
  std::unique_ptr<DispatchIndex> index;
  bool log = false;

  std::mutex slow_mutex;  // serializes preparation: the store, compiler and context setup
  Store store;
  Compiler compiler;
  std::map<BinaryKey, std::unique_ptr<KernelSlot>> kernels;  // under slow_mutex
  std::optional<std::int64_t> kernel_id, device_id;           // under slow_mutex
  std::deque<std::unique_ptr<Prepared>> published;           // under slow_mutex; never freed before *this
  /// Shapes running a stand-in, by the binary hash they wait for (under slow_mutex).
  std::map<std::string, std::vector<std::vector<std::int64_t>>> waiting;
  std::map<std::string, std::string> failed_binaries;  // hash -> why (under slow_mutex)
  std::deque<std::unique_ptr<Race>> races;             // under slow_mutex; never freed before *this
  std::atomic<CompileMode> mode{CompileMode::background};

  ShapeTable<ShapeSlot> prepared;  // every shape launched (or refused) so far

  std::atomic<std::uint64_t> shapes{0}, binaries_loaded{0}, binaries_from_store{0}, compiles{0},
      binaries_stored{0}, misses_recorded{0}, misses_unrecorded{0}, blocking_compiles{0}, not_ready_shapes{0},
      not_ready_launches{0},
      background_compiles{0}, background_failures{0}, stand_in_shapes{0}, switches{0}, races_started{0},
      races_settled{0}, race_launches{0}, binaries_preloaded{0}, preload_failures{0};
  std::atomic<std::uint64_t> choose_ns{0}, store_read_ns{0}, load_ns{0}, ready_ns{0}, miss_ns{0}, rank_ns{0},
      queue_ns{0}, first_launch_ns{0}, workspace_ns{0}, lock_wait_ns{0};
  /// Where workspaces come from; null (the device's default pool) for a
  /// space without a prologue.  Declared before `queue`, so it outlives the
  /// background worker.
  std::unique_ptr<WorkspacePool> workspace_pool;
  mutable std::mutex error_mutex;     // for last_background_error (stats() must not wait on a compile)
  std::string last_background_error;

  /// Untuned shapes not yet counted in the store (record_miss), and how
  /// many write jobs were queued for them; under slow_mutex.
  std::vector<std::string> pending_misses;
  std::uint64_t miss_jobs = 0;

  /// The preload (options.preload_stored): its thread's end (shared, so
  /// that wait_compiles() may wait for it on several threads at once), and
  /// the stop it checks between binaries.
  std::shared_future<void> preloading;
  std::atomic<bool> closing{false};

  // Last: destroyed first, so the worker is joined before anything its jobs use.
  CompileQueue queue;

  Impl(Store s) : store(std::move(s)) {}
  /// Stops the preload, then counts the misses whose write job has not run:
  /// `queue`, destroyed first, drops the jobs it has not started.
  ~Impl() {
    closing = true;
    if (preloading.valid()) preloading.wait();
    try {
      std::lock_guard lock(slow_mutex);
      write_misses();
    } catch (...) {  // a count is not worth terminating the process from a destructor
    }
  }

  const Prepared* find(std::span<const std::int64_t> shape) const {
    const auto* entry = prepared.find(shape);
    return entry ? &entry->value.get() : nullptr;
  }

  // The hit path: no lock, no allocation.  `first` is set when this call
  // prepared the shape (its launch is then timed: first_launch_ns).
  const Prepared& get(std::span<const std::int64_t> shape, bool& first) {
    if (const auto* entry = prepared.find(shape)) return entry->value.get();
    first = true;
    return first_use(shape);
  }

  /// Keeps `p` alive for the dispatcher's life; under slow_mutex.
  const Prepared* keep(Prepared&& p) {
    published.push_back(std::make_unique<Prepared>(std::move(p)));
    return published.back().get();
  }

  const Prepared& first_use(std::span<const std::int64_t> values) {
    FirstUseScope scope;
    std::unique_lock slow(slow_mutex, std::defer_lock);
    {
      PhaseTimer timed(lock_wait_ns);
      slow.lock();
    }
    if (const auto* entry = prepared.find(values)) return entry->value.get();  // another thread prepared it meanwhile
    Prepared made;
    std::optional<Shape> shape = checked_shape(values, made);
    if (shape) prepare(*shape, made);
    // A shape not ready compiles in the background as a stand-in's choice
    // does (or races, which readies its choice too).
    const bool stand_in = (made.stand_in && made.background_error.empty()) || made.not_ready;
    const bool race = options.race.enabled() && (made.error.empty() || made.not_ready) && made.target.ok() &&
                      made.target.reason != ChoiceReason::hit;
    if (made.not_ready) ++not_ready_shapes;
    const Prepared& result = prepared.insert(values, ShapeSlot(keep(std::move(made)))).value.get();
    ++shapes;
    if (race) {
      PhaseTimer timed(queue_ns);
      race_in_background(result.target, *shape);
    } else if (stand_in) {
      PhaseTimer timed(queue_ns);
      compile_in_background(result.target, *shape, values);
    }
    if (log)
      std::fprintf(stderr, "mlatune dispatch: %s %s: %s\n", space->kernel_name().c_str(),
                   shape ? space->shape_string(*shape).c_str() : fmt::format("{}", fmt::join(values, ",")).c_str(),
                   result.error.empty() ? log_text(result).c_str() : result.error.c_str());
    return result;
  }

  static std::string log_text(const Prepared& p) {
    std::string text = p.target.config_text + " (" + p.target.explanation + ")";
    if (p.stand_in)
      text += fmt::format("; running stand-in {} {} {}", to_string(p.choice.reason), p.choice.config_text,
                          p.background_error.empty() ? "while it compiles in the background"
                                                     : "(the chosen binary failed: " + p.background_error + ")");
    return text;
  }

  /// The shape of these values with its buffers' sizes in p, or nullopt with
  /// p's input error set when it is malformed (kept like any refused shape).
  std::optional<Shape> checked_shape(std::span<const std::int64_t> values, Prepared& p) const {
    try {
      Shape shape = signature->shape(values);
      p.buffer_bytes = signature->buffer_bytes(shape);
      p.shape_ok = true;
      return shape;
    } catch (const InputError& e) {
      p.error = e.what();
      p.input_error = true;
      return std::nullopt;
    }
  }

  void prepare(const Shape& shape, Prepared& p) {
    {
      PhaseTimer timed(choose_ns);
      p.target = index->choose(shape);
    }
    p.choice = p.target;
    if (p.target.reason != ChoiceReason::hit) {
      PhaseTimer timed(miss_ns);
      record_miss(shape);
    }
    if (!p.target.ok()) {
      p.error = p.target.explanation;
      p.input_error = true;
      return;
    }
    std::optional<LaunchPlan> plan = plan_for(p.target, shape, p);
    if (!plan) return;
    try {
      if (KernelSlot* slot = ready_slot(p.target)) return ready_kernels(*slot, *plan, p.target, shape, p);
      const CompileMode now = mode.load();
      if (now != CompileMode::blocking && run_stand_in(shape, p)) return;
      if (now == CompileMode::nonblocking) return not_ready(shape, p);
      ++blocking_compiles;
      ready_kernels(install(p.target, compile(p.target, shape)), *plan, p.target, shape, p);
    } catch (const Error& e) {
      p.error = e.what();
    }
  }

  /// Marks p not ready (nonblocking mode, no binary ready); first_use then
  /// queues its compile.  A binary whose compile failed in this process
  /// already is not tried again: the shape fails with that reason.  Under
  /// slow_mutex.
  void not_ready(const Shape& shape, Prepared& p) const {
    if (auto failed = failed_binaries.find(p.target.binary.hash); failed != failed_binaries.end()) {
      p.error = fmt::format("{} at {}: its compile failed: {}", p.target.config_text, space->shape_string(shape),
                            failed->second);
      return;
    }
    p.not_ready = true;
    p.error = fmt::format("{} at {}: not ready: neither its binary nor any stand-in's is loaded or in the "
                          "database, and the compile mode is nonblocking, so nothing ran; it compiles in the "
                          "background (wait_compiles() waits for it): run this call another way meanwhile, or "
                          "warm the range first (`mlatune cache warm`)",
                          p.target.config_text, space->shape_string(shape));
  }

  /// The launch plan of `choice` at `shape`, or nullopt with p's input error
  /// set when it cannot launch there.
  std::optional<LaunchPlan> plan_for(const Choice& choice, const Shape& shape, Prepared& p) const {
    const std::string where = fmt::format("{} at {}", choice.config_text, space->shape_string(shape));
    // The index checked the geometry; the plan's refusal is kept for a clear
    // message regardless, and it also catches a scalar out of its range.
    std::optional<LaunchPlan> plan;
    try {
      plan = plan_launch(*space, choice.config, shape);
      p.error = dispatch_refusal(*plan, where);
    } catch (const InputError& e) {  // a buffer extent the shape makes no integer
      p.error = e.what();
    }
    if (p.error.empty()) return plan;
    p.input_error = true;
    return std::nullopt;
  }

  /// Readies the first alternative ranked after the choice
  /// (DispatchIndex::ranked) whose binary is loaded or stored and that can
  /// launch here; false when there is none.  Ranked only here: inside a
  /// warmed range the choice's binary is almost always ready, and choose()
  /// alone costs a first call a fraction of a full ranking.  Each candidate
  /// is finished (its binary key) only when its turn comes.
  bool run_stand_in(const Shape& shape, Prepared& p) {
    std::vector<Choice> ranked;
    {
      PhaseTimer timed(rank_ns);
      ranked = index->ranked_unfinished(shape, stand_in_candidates);
    }
    for (Choice& candidate : ranked) {
      if (!candidate.ok() || candidate.config == p.target.config) continue;
      {
        PhaseTimer timed(rank_ns);
        index->finish(candidate, shape);
      }
      Prepared trial;
      try {
        KernelSlot* slot = ready_slot(candidate);
        if (!slot) continue;
        std::optional<LaunchPlan> plan = plan_for(candidate, shape, trial);
        if (!plan) continue;
        ready_kernels(*slot, *plan, candidate, shape, trial);
      } catch (const Error& e) {  // a stored cubin that does not load: not a stand-in
        if (log) std::fprintf(stderr, "mlatune dispatch: stand-in %s refused: %s\n", candidate.config_text.c_str(), e.what());
        continue;
      }
      if (!trial.error.empty()) continue;  // e.g. a device limit: try the next
      p.launch = std::move(trial.launch);
      p.choice = candidate;
      p.stand_in = true;
      if (auto failed = failed_binaries.find(p.target.binary.hash); failed != failed_binaries.end())
        p.background_error = failed->second;  // compiled once already and failed: not again
      ++stand_in_shapes;
      return true;
    }
    return false;
  }

  /// Loads the kernels of `slot` for `plan` and readies them on the device
  /// (p.launch), or says why they cannot launch there (p.error).
  void ready_kernels(KernelSlot& slot, const LaunchPlan& plan, const Choice& choice, const Shape& shape,
                     Prepared& p) {
    const std::string where = fmt::format("{} at {}", choice.config_text, space->shape_string(shape));
    LoadedEntry* prologue = plan.steps.prologue ? &prologue_of(slot) : nullptr;
    PhaseTimer timed(ready_ns);
    LaunchReadiness readiness = prepare_launch(plan.steps, slot.main, prologue, properties);
    if (!readiness.refusal.empty())
      p.error = fmt::format("{} on {}: {}", where, properties.name, readiness.refusal);
    else if (!readiness.opt_in.ok())
      p.error = launch_error_text(readiness.opt_in,
                                  "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) for " + where);
    else
      p.launch = dispatch_launch(plan, &slot.main.kernel, prologue ? &prologue->kernel : nullptr);
  }

  /// The prologue entry of `slot`'s cubin, loaded on first use.
  LoadedEntry& prologue_of(KernelSlot& slot) {
    if (!slot.prologue) {
      PhaseTimer timed(load_ns);
      slot.prologue.emplace(slot.main, space->prologue()->kernel.entry);
    }
    return *slot.prologue;
  }

  /// The loaded binary of `choice`, loading it from the store when it is
  /// stored there; null when neither (it must be compiled).  Under slow_mutex.
  KernelSlot* ready_slot(const Choice& choice) {
    if (auto it = kernels.find(choice.binary); it != kernels.end()) return it->second.get();
    std::optional<BinaryRecord> record;
    {
      PhaseTimer timed(store_read_ns);
      record = index->stored_binary(store, choice);
    }
    if (!record) return nullptr;
    ++binaries_from_store;
    return &load(choice, std::string(record->cubin.begin(), record->cubin.end()));
  }

  /// Compiles the binary of `choice` (NVRTC; no lock needed) and stores it
  /// when the database is writable.  Throws EnvironmentError when it fails.
  CompiledBinary compile(const Choice& choice, const Shape& shape) {
    CompileRequest request = compile_request(*space, choice.config, shape, device.arch);
    // Only the code matters here, not its resource report (which NVRTC's
    // compute cache, on in a library caller's process, may leave out).
    request.require_resource_report = false;
    CompileResult result = compiler.compile(request);
    ++compiles;
    if (result.ok() && !(result.key() == choice.binary))
      throw InternalError(fmt::format("compiled binary key {} differs from the expected {} for {}",
                                      result.key().hash, choice.binary.hash, choice.config_text));
    if (!result.ok()) throw EnvironmentError(result.failure().message);
    CompiledBinary binary = result.binary();
    binary.key = choice.binary;
    return binary;
  }

  /// Stores (when it may) and loads a compiled binary.  Under slow_mutex.
  KernelSlot& install(const Choice& choice, const CompiledBinary& binary) {
    // A binary whose report the compute cache left out is not stored: the
    // tuner reads registers and spills from stored binaries.
    if (!store.read_only() && binary.usage.registers > 0) {
      try {
        store.put_binary(index->binary_record(binary));
        ++binaries_stored;
      } catch (const Error& e) {  // a busy or full database must not fail the launch
        if (log) std::fprintf(stderr, "mlatune dispatch: binary not stored: %s\n", e.what());
      }
    }
    return load(choice, binary.cubin);
  }

  KernelSlot& load(const Choice& choice, std::string cubin) {
    if (auto it = kernels.find(choice.binary); it != kernels.end()) return *it->second;  // loaded meanwhile
    PhaseTimer timed(load_ns);
    auto slot = std::make_unique<KernelSlot>(LoadedEntry(cubin, space->kernel().entry));
    ++binaries_loaded;
    KernelSlot& result = *slot;
    kernels.emplace(choice.binary, std::move(slot));
    return result;
  }

  // ---- the preload -----------------------------------------------------------

  /// On the preload's thread: every stored binary this dispatcher could run,
  /// read through a connection of its own and loaded without the lock (a
  /// first use meanwhile waits for neither), then published under it unless
  /// a first use loaded the same binary meanwhile.  A binary that cannot be
  /// read or loaded is counted and skipped (its first use then reads it and
  /// reports why, as without the preload).  Never throws.
  void preload_job() {
    std::vector<std::string> runnable;
    std::optional<Store> reader;
    try {
      use_device_here();
      reader.emplace(Store::open(store.path(), StoreMode::read_only));
      runnable = index->runnable_binaries(*reader);
    } catch (const std::exception& e) {
      ++preload_failures;
      return note_preload_failure("the store", e.what());
    }
    for (const std::string& hash : runnable) {
      if (closing) return;
      const BinaryKey key{hash};
      {
        std::lock_guard slow(slow_mutex);
        if (kernels.count(key)) continue;
      }
      try {
        std::optional<BinaryRecord> record = reader->get_binary(hash);
        if (!record || record->cubin.empty()) continue;
        auto slot = std::make_unique<KernelSlot>(
            LoadedEntry(std::string(record->cubin.begin(), record->cubin.end()), space->kernel().entry));
        // The prologue's entry too, so that a first use whose prologue runs
        // looks nothing up (measured on the H200: 46 us of load time left on
        // the caller's thread without this).  A binary compiled without it
        // (its config never runs the prologue) keeps the lazy lookup, and the
        // failed lookup's error is cleared from this thread.
        if (space->prologue()) {
          try {
            slot->prologue.emplace(slot->main, space->prologue()->kernel.entry);
          } catch (const CudaError&) {
            (void)cudaGetLastError();
          }
        }
        std::lock_guard slow(slow_mutex);
        if (kernels.emplace(key, std::move(slot)).second) {
          ++binaries_loaded;
          ++binaries_preloaded;
        }
      } catch (const std::exception& e) {
        ++preload_failures;
        note_preload_failure(hash, e.what());
      }
    }
  }

  void note_preload_failure(const std::string& what, const std::string& error) {
    if (log) std::fprintf(stderr, "mlatune dispatch: preload of %s failed: %s\n", what.c_str(), error.c_str());
  }

  // ---- background compiles ---------------------------------------------------

  /// Queues the compile of `target`'s binary (once per binary) and notes that
  /// the shape `values` waits for it.  Under slow_mutex.
  void compile_in_background(const Choice& target, const Shape& shape, std::span<const std::int64_t> values) {
    waiting[target.binary.hash].emplace_back(values.begin(), values.end());
    queue.submit(target.binary.hash, [this, target, shape] { background_job(target, shape); });
  }

  /// On the worker thread: compile without the lock, then install and switch
  /// every shape waiting for this binary.  Never throws (the queue would only
  /// count it): a failure is recorded and the stand-ins stay.
  void background_job(const Choice& target, const Shape& shape) {
    std::optional<CompiledBinary> binary;
    std::string error;
    try {
      binary = compile(target, shape);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::lock_guard slow(slow_mutex);
    std::vector<std::vector<std::int64_t>> shapes_waiting = std::move(waiting[target.binary.hash]);
    waiting.erase(target.binary.hash);
    KernelSlot* slot = nullptr;
    if (binary) {
      try {
        int code = cudaSetDevice(options.device);  // this thread's context for the load and opt-in
        if (code != cudaSuccess) throw CudaError(code, "cudaSetDevice (background compile)", __FILE__, __LINE__);
        slot = &install(target, *binary);
        ++background_compiles;
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (!slot) return background_failed(target, error, shapes_waiting);
    for (const auto& values : shapes_waiting) switch_shape(*slot, values);
  }

  /// What replaces a published shape's Prepared keeps what does not depend
  /// on the config that runs: the buffers' sizes and the index's choice.
  static Prepared successor(const Prepared& old) {
    Prepared next;
    next.buffer_bytes = old.buffer_bytes;
    next.shape_ok = old.shape_ok;
    next.target = old.target;
    return next;
  }

  /// Publishes the chosen binary's launch for one waiting shape; keeps the
  /// stand-in (with the reason) where the chosen config cannot launch.
  void switch_shape(KernelSlot& slot, const std::vector<std::int64_t>& values) {
    const auto* entry = prepared.find(values);
    if (!entry) return;
    Prepared next = successor(entry->value.get());
    next.choice = next.target;
    const Shape shape{values};
    std::optional<LaunchPlan> plan = plan_for(next.target, shape, next);
    if (plan) {
      try {
        ready_kernels(slot, *plan, next.target, shape, next);
      } catch (const Error& e) {
        next.error = e.what();
      }
    }
    if (!next.error.empty()) return keep_after_choice_failed(*entry, next.error);
    entry->value.current.store(keep(std::move(next)), std::memory_order_release);
    ++switches;
  }

  void background_failed(const Choice& target, const std::string& error,
                         const std::vector<std::vector<std::int64_t>>& shapes_waiting) {
    ++background_failures;
    {
      std::lock_guard lock(error_mutex);
      last_background_error = fmt::format("{}: {}", target.config_text, error);
    }
    failed_binaries[target.binary.hash] = error;
    if (log) std::fprintf(stderr, "mlatune dispatch: background compile failed: %s: %s\n", target.config_text.c_str(), error.c_str());
    for (const auto& values : shapes_waiting)
      if (const auto* entry = prepared.find(values)) keep_after_choice_failed(*entry, error);
  }

  /// What a shape keeps when its choice cannot take over: its stand-in,
  /// republished with why; or, for a shape that was not ready (it has no
  /// stand-in), that reason as its failure from then on, as a blocking
  /// compile's failure would be.
  void keep_after_choice_failed(const ShapeTable<ShapeSlot>::Entry& entry, const std::string& why) {
    const Prepared& old = entry.value.get();
    Prepared kept = successor(old);
    if (old.not_ready) {
      kept.choice = old.choice;
      kept.error = fmt::format("{}: its background compile failed: {}", old.target.config_text, why);
      entry.value.current.store(keep(std::move(kept)), std::memory_order_release);
      return;
    }
    kept.launch = old.launch;
    kept.choice = old.choice;
    kept.stand_in = true;
    kept.background_error = why;
    entry.value.current.store(keep(std::move(kept)), std::memory_order_release);
  }

  // ---- races at untuned shapes -------------------------------------------------

  /// Queues the race of an untuned shape: its candidates are readied on the
  /// background thread (race_job).  Under slow_mutex.
  void race_in_background(const Choice& target, const Shape& shape) {
    queue.submit("race " + space->shape_string(shape), [this, target, shape] { race_job(target, shape); });
  }

  /// The configs a race at `shape` runs: the index's choice first, then the
  /// selector's next ones, each once, at most options.race.candidates; then
  /// up to options.race.filling variants of the choice that fill the device
  /// where it leaves SMs idle.
  std::vector<Choice> race_candidates(const Choice& target, const Shape& shape) const {
    std::vector<Choice> candidates{target};
    for (Choice& c : index->ranked(shape, options.race.candidates + 1, race_neighbors)) {
      if (candidates.size() >= options.race.candidates) break;
      if (!c.ok() || c.config == target.config) continue;
      candidates.push_back(std::move(c));
    }
    const auto raced = [&](const Config& config) {
      return std::any_of(candidates.begin(), candidates.end(), [&](const Choice& c) { return c.config == config; });
    };
    std::size_t added = 0;
    for (Choice& c : index->filling_variants(target, shape, options.race.filling + candidates.size())) {
      if (added >= options.race.filling) break;
      if (raced(c.config)) continue;
      candidates.push_back(std::move(c));
      ++added;
    }
    return candidates;
  }

  /// On the worker thread: readies every candidate's binary (loaded, from
  /// the store, or compiled, several at once and without the lock), then
  /// publishes the race, or the one candidate left, at the shape.  Never
  /// throws; a candidate that fails is left out (the choice's failure is
  /// recorded as a background compile's is).
  void race_job(const Choice& target, const Shape& shape) {
    const std::vector<Choice> candidates = race_candidates(target, shape);
    const std::size_t n = candidates.size();
    std::vector<KernelSlot*> slots(n, nullptr);
    std::vector<std::string> errors(n);
    try {
      use_device_here();
    } catch (const Error& e) {  // no context on this thread: the shape keeps what it runs
      if (log) std::fprintf(stderr, "mlatune dispatch: race not run: %s\n", e.what());
      std::lock_guard slow(slow_mutex);
      if (const auto* entry = prepared.find(shape.values); entry && entry->value.get().not_ready)
        keep_after_choice_failed(*entry, e.what());  // not ready for ever otherwise
      return;
    }
    // slow_mutex is taken per candidate, not across them: a caller's first
    // use of another shape waits for one store read and module load at
    // most, not for all of the race's.
    for (std::size_t i = 0; i < n; ++i) {
      std::lock_guard slow(slow_mutex);
      if (auto failed = failed_binaries.find(candidates[i].binary.hash); failed != failed_binaries.end()) {
        errors[i] = failed->second;
        continue;
      }
      try {
        slots[i] = ready_slot(candidates[i]);
      } catch (const Error& e) {
        errors[i] = e.what();
      }
    }
    std::vector<std::optional<CompiledBinary>> compiled(n);
    {
      std::vector<std::thread> compiling;
      for (std::size_t i = 0; i < n; ++i) {
        if (slots[i] || !errors[i].empty()) continue;
        compiling.emplace_back([&, i] {
          try {
            compiled[i] = compile(candidates[i], shape);
          } catch (const std::exception& e) {
            errors[i] = e.what();
          }
        });
      }
      for (std::thread& t : compiling) t.join();
    }
    std::vector<Race::Runner> runners;
    for (std::size_t i = 0; i < n; ++i) {
      std::lock_guard slow(slow_mutex);
      try {
        if (compiled[i]) {
          use_device_here();
          slots[i] = &install(candidates[i], *compiled[i]);
          ++background_compiles;
        }
        if (slots[i]) {
          Prepared trial;
          if (std::optional<LaunchPlan> plan = plan_for(candidates[i], shape, trial))
            ready_kernels(*slots[i], *plan, candidates[i], shape, trial);
          if (trial.error.empty()) {
            runners.push_back(Race::Runner{candidates[i], std::move(trial.launch)});
            continue;
          }
          errors[i] = trial.error;
        }
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
      if (log)
        std::fprintf(stderr, "mlatune dispatch: race candidate %s left out: %s\n", candidates[i].config_text.c_str(),
                     errors[i].c_str());
    }
    std::lock_guard slow(slow_mutex);
    if (!errors.front().empty() && !failed_binaries.count(target.binary.hash)) {
      std::vector<std::vector<std::int64_t>> none;
      background_failed(target, errors.front(), none);
    }
    publish_race(shape, std::move(runners), errors.front());
  }

  /// Makes options.device current on the calling thread (the background
  /// thread's loads and opt-ins need its context).
  void use_device_here() {
    int code = cudaSetDevice(options.device);
    if (code != cudaSuccess) throw CudaError(code, "cudaSetDevice (background)", __FILE__, __LINE__);
  }

  /// Publishes the shape's race, or its only runner; with none, the shape
  /// keeps what it runs (with why the choice cannot).  Under slow_mutex.
  void publish_race(const Shape& shape, std::vector<Race::Runner> runners, const std::string& target_error) {
    const auto* entry = prepared.find(shape.values);
    if (!entry) return;
    const Prepared& old = entry->value.get();
    if (runners.empty()) {
      if (old.not_ready)
        keep_after_choice_failed(*entry, target_error.empty() ? "no raced config could be readied" : target_error);
      else if (!target_error.empty() && old.stand_in)
        keep_after_choice_failed(*entry, target_error);
      return;
    }
    Prepared next = successor(old);
    next.choice = runners.front().choice;
    next.launch = runners.front().launch;
    // The choice is the first runner whenever it could run; else the
    // others stand in for it, as a stand-in would.
    next.stand_in = !(runners.front().choice.config == old.target.config);
    next.background_error = next.stand_in ? target_error : std::string();
    if (old.stand_in && !next.stand_in) ++switches;
    if (runners.size() >= 2) {
      races.push_back(std::make_unique<Race>(std::move(runners), options.race.samples));
      next.race = races.back().get();
      next.racing = true;
      ++races_started;
    }
    entry->value.current.store(keep(std::move(next)), std::memory_order_release);
  }

  /// A launch at a racing shape: times the runner the book asks for between
  /// two events on `stream`, or runs the leader untimed (every time taken
  /// or in flight, or the stream is capturing a graph); settles the race
  /// once every runner has its times.  `run(launch)` issues one launch.
  template <class Run>
  void race_launch(Race& race, std::span<const std::int64_t> values, void* stream, Run&& run) {
    std::unique_lock lock(race.mutex);
    if (race.settled) {
      const DispatchLaunch& winner = race.runners[race.winner].launch;
      lock.unlock();
      return run(winner);
    }
    read_times(race);
    if (race.book.settled()) {
      settle(race, values);
      const DispatchLaunch& winner = race.runners[race.winner].launch;
      lock.unlock();
      return run(winner);
    }
    std::optional<std::size_t> next = race.book.next_to_time();
    cudaEvent_t start = nullptr, stop = nullptr;
    if (next && !capturing(stream) && take_events(race, start, stop) &&
        cudaEventRecord(start, static_cast<cudaStream_t>(stream)) == cudaSuccess) {
      try {
        run(race.runners[*next].launch);
      } catch (...) {  // the caller hears of it; the race goes on without this runner
        race.book.disqualify(*next);
        race.spare.push_back(start);
        race.spare.push_back(stop);
        throw;
      }
      if (cudaEventRecord(stop, static_cast<cudaStream_t>(stream)) == cudaSuccess) {
        race.book.started(*next);
        race.in_flight.push_back(Race::InFlight{*next, start, stop});
        ++race_launches;
        return;
      }
      cuda_take_last_error();  // the launch ran; only its time is lost
      race.spare.push_back(start);
      race.spare.push_back(stop);
      return;
    }
    if (start) {  // the start event failed to record
      cuda_take_last_error();
      race.spare.push_back(start);
      race.spare.push_back(stop);
    }
    run(race.runners[race.book.leader()].launch);
  }

  /// Reads the times of the timed launches that have finished, without
  /// waiting for those that have not.  Under the race's mutex.
  static void read_times(Race& race) {
    for (auto it = race.in_flight.begin(); it != race.in_flight.end();) {
      cudaError_t code = cudaEventQuery(it->stop);
      if (code == cudaErrorNotReady) {
        cudaGetLastError();  // not an error: clear it, as the caller's next error check would see it
        ++it;
        continue;
      }
      float ms = 0;
      if (code == cudaSuccess) code = cudaEventElapsedTime(&ms, it->start, it->stop);
      if (code == cudaSuccess) {
        race.book.finished(it->runner, static_cast<double>(ms) * 1000.0);
      } else {
        cuda_take_last_error();
        race.book.dropped(it->runner);
      }
      race.spare.push_back(it->start);
      race.spare.push_back(it->stop);
      it = race.in_flight.erase(it);
    }
  }

  /// Two events for a timed launch (reused, else created); false when CUDA
  /// cannot make them (the launch then runs untimed).
  static bool take_events(Race& race, cudaEvent_t& start, cudaEvent_t& stop) {
    while (race.spare.size() < 2) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) {
        cuda_take_last_error();
        return false;
      }
      race.spare.push_back(e);
    }
    stop = race.spare.back();
    race.spare.pop_back();
    start = race.spare.back();
    race.spare.pop_back();
    return true;
  }

  /// Whether `stream` is capturing a CUDA graph (or CUDA cannot say): its
  /// launches are not timed then.
  static bool capturing(void* stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) != cudaSuccess) {
      cuda_take_last_error();
      return true;
    }
    return status != cudaStreamCaptureStatusNone;
  }

  /// Publishes the winner as the shape's launch (every later launch is a
  /// plain hit) and frees the race's events.  Under the race's mutex.
  void settle(Race& race, std::span<const std::int64_t> values) {
    race.winner = race.book.leader();
    race.settled = true;
    race.release_events();
    ++races_settled;
    std::lock_guard slow(slow_mutex);
    const auto* entry = prepared.find(values);
    if (!entry) return;
    const Prepared& old = entry->value.get();
    Prepared next = successor(old);
    next.stand_in = old.stand_in;
    next.background_error = old.background_error;
    next.choice = race.runners[race.winner].choice;
    next.launch = race.runners[race.winner].launch;
    next.race = &race;  // for describe(); not racing: launches are hits again
    entry->value.current.store(keep(std::move(next)), std::memory_order_release);
    if (log)
      std::fprintf(stderr, "mlatune dispatch: %s %s: %s\n", space->kernel_name().c_str(),
                   space->shape_string(Shape{std::vector<std::int64_t>(values.begin(), values.end())}).c_str(),
                   report(race).text().c_str());
  }

  /// What describe() says of a race.  Under the race's mutex.
  static RaceReport report(const Race& race) {
    RaceReport r;
    r.samples = race.book.samples();
    r.settled = race.settled;
    r.leader = race.settled ? race.winner : race.book.leader();
    for (std::size_t i = 0; i < race.runners.size(); ++i)
      r.runners.push_back(RaceReport::Runner{race.runners[i].choice, race.book.times(i), race.book.median_us(i)});
    return r;
  }

  /// The store ids a miss is recorded under.  Open resolves them (when the
  /// store is writable and misses are counted), so that the first call at
  /// an untuned shape does not write them: on the H200 that took the
  /// process's first miss record from 2.34 to 0.89 ms.
  void ensure_miss_ids() {
    if (!kernel_id)
      kernel_id = store.ensure_kernel(KernelInfo{space->kernel_name(), space->template_hash(), space->definition_hash()});
    if (!device_id) device_id = store.ensure_device(device);
  }

  /// Notes an untuned shape for `mlatune tune --misses`; the background
  /// thread writes it, since a write transaction (0.2-1.1 ms of the H200's
  /// first calls) is no caller's to wait for.  A process killed before the
  /// job runs loses these counts, never the store.  Under slow_mutex.
  void record_miss(const Shape& shape) {
    if (!options.record_misses) return;
    if (store.read_only()) {
      ++misses_unrecorded;
      return;
    }
    pending_misses.push_back(space->shape_string(shape));
    // A key of its own: a job of the same key that is running would refuse
    // this one after it had taken the list.
    queue.submit(fmt::format("misses {}", ++miss_jobs), [this] {
      std::lock_guard lock(slow_mutex);
      write_misses();
    });
  }

  /// Counts pending_misses in the store; under slow_mutex.
  void write_misses() {
    for (const std::string& shape : pending_misses) {
      try {
        ensure_miss_ids();
        if (store.record_miss(*kernel_id, *device_id, shape))
          ++misses_recorded;
        else
          ++misses_unrecorded;
      } catch (const Error& e) {  // counting a miss must never fail anything
        ++misses_unrecorded;
        if (log) std::fprintf(stderr, "mlatune dispatch: miss not recorded: %s\n", e.what());
      }
    }
    pending_misses.clear();
  }

  /// The launch of a prepared shape with the caller's buffers (their count
  /// checked): scalars from the shape, workspaces as launch() says.  No
  /// allocation unless the kernel has more than max_stack_arguments.
  /// `workspace_sum`, when given, adds the host time of the workspaces'
  /// allocation and release (first launches only: the hit path passes none).
  void launch_prepared(const DispatchLaunch& launch, void* const* buffers, void* stream,
                       std::atomic<std::uint64_t>* workspace_sum = nullptr) const {
    const std::size_t n = launch.arguments.size();
    void* stack[max_stack_arguments];
    std::vector<void*> heap;
    void** arguments = stack;
    if (n > max_stack_arguments) {
      heap.resize(n);
      arguments = heap.data();
    }
    point_arguments(launch, buffers, arguments);
    // Without a running prologue a workspace slot is already a null scalar.
    if (launch.runs_prologue()) [[unlikely]]
      return launch_with_workspace(launch, arguments, stream, workspace_sum);
    check_launch(launch.sequence.issue(arguments, stream));
  }

  /// The launch of a prepared shape with the caller's complete argument list.
  void launch_arguments(const DispatchLaunch& launch, void** arguments, void* stream,
                        std::atomic<std::uint64_t>* workspace_sum = nullptr) const {
    if (!launch.workspace_positions.empty()) [[unlikely]]
      return launch_with_workspace(launch, arguments, stream, workspace_sum);
    check_launch(launch.sequence.issue(arguments, stream));
  }

  /// Runs `launch` (a shape's first) timed into first_launch_ns, its
  /// workspaces' share into workspace_ns.
  template <class Launch>
  void first_launch(Launch&& launch) {
    FirstUseScope scope;
    PhaseTimer timed(first_launch_ns);
    launch(&workspace_ns);
  }

  [[noreturn]] void fail(const Prepared& p) {
    if (p.input_error) throw InputError(p.error);
    if (p.not_ready) {
      ++not_ready_launches;
      throw NotReadyError(p.error);
    }
    throw EnvironmentError(p.error);
  }

  static void check_launch(const LaunchStatus& status) {
    if (!status.ok()) {
      cuda_take_last_error();
      throw CudaError(status.code,
                      status.step == LaunchStep::prologue ? "cudaLaunchKernel (dispatch, prologue)"
                                                          : "cudaLaunchKernel (dispatch)",
                      __FILE__, __LINE__);
    }
  }

  /// The launch of a space with workspace arguments: `arguments` (complete)
  /// with every workspace slot replaced by a null pointer, or, where the
  /// prologue runs, by scratch allocated on `stream` for this launch only
  /// (stream-ordered: callers on other streams never share it), then
  /// prologue and main back to back, then the scratch freed on `stream`.
  void launch_with_workspace(const DispatchLaunch& d, void* const* arguments, void* stream,
                             std::atomic<std::uint64_t>* workspace_sum = nullptr) const {
    // On the stack unless the kernel has more arguments than max_stack_arguments:
    // a hit of a config without a running prologue allocates nothing.
    const std::size_t n = d.arguments.size(), w = d.workspace_positions.size();
    void* list_stack[max_stack_arguments];
    void* scratch_stack[max_stack_arguments] = {};
    std::vector<void*> list_heap, scratch_heap;
    void** list = list_stack;
    void** scratch = scratch_stack;
    if (n > max_stack_arguments) {
      list_heap.resize(n);
      list = list_heap.data();
      scratch_heap.assign(w, nullptr);
      scratch = scratch_heap.data();
    }
    std::copy(arguments, arguments + n, list);
    point_workspaces(d, list, scratch);
    if (!d.runs_prologue()) {
      check_launch(d.sequence.issue(list, stream));
      return;
    }
    auto s = static_cast<cudaStream_t>(stream);
    // Frees whatever was allocated, on the same stream, after the kernels
    // (or at once when a launch failed: nothing then reads it).
    auto free_all = [&](bool throwing) {
      std::optional<PhaseTimer> timed;
      if (workspace_sum) timed.emplace(*workspace_sum);
      cudaError_t first = cudaSuccess;
      for (std::size_t k = 0; k < w; ++k) {
        void*& pointer = scratch[k];
        if (!pointer) continue;
        cudaError_t code = cudaFreeAsync(pointer, s);
        pointer = nullptr;
        if (code != cudaSuccess && first == cudaSuccess) first = code;
      }
      if (first != cudaSuccess) {
        cuda_take_last_error();
        if (!throwing)  // else the launch's own error is the one to report
          throw CudaError(static_cast<int>(first), "cudaFreeAsync (dispatch workspace)", __FILE__,
                          __LINE__);
      }
    };
    try {
      {
        std::optional<PhaseTimer> timed;
        if (workspace_sum) timed.emplace(*workspace_sum);
        if (workspace_sum && workspace_pool) {  // a first launch: what this shape needs is kept from now on
          std::uint64_t total = 0;
          for (std::size_t k = 0; k < w; ++k) total += static_cast<std::uint64_t>(d.workspace_bytes[k]);
          workspace_pool->keep_at_least(total);
        }
        for (std::size_t k = 0; k < w; ++k) {
          auto bytes = static_cast<std::size_t>(d.workspace_bytes[k]);
          if (bytes == 0) continue;  // an empty workspace stays a null pointer
          if (workspace_pool)
            MLATUNE_CUDA(cudaMallocFromPoolAsync(&scratch[k], bytes, workspace_pool->get(), s));
          else
            MLATUNE_CUDA(cudaMallocAsync(&scratch[k], bytes, s));
        }
      }
      check_launch(d.sequence.issue(list, stream));
    } catch (...) {
      free_all(true);
      throw;
    }
    free_all(false);
  }
};


std::string RaceReport::text() const {
  if (runners.empty()) return "no race";
  const Runner& lead = runners[leader];
  std::vector<std::string> others;
  std::size_t timed = 0;
  for (std::size_t i = 0; i < runners.size(); ++i) {
    timed += runners[i].times_us.size();
    if (i != leader)
      others.push_back(fmt::format("{} {:.2f}", to_string(runners[i].choice.reason), runners[i].median_us));
  }
  if (settled) {
    const std::string versus =
        leader == 0 ? "the selector's choice"
                    : fmt::format("{:.2f}x faster than the selector's choice", runners[0].median_us / lead.median_us);
    return fmt::format("race settled among {} configs ({} launches each): running {} {} at {:.2f} us median, {} "
                       "(the others, us: {})",
                       runners.size(), samples, to_string(lead.choice.reason), lead.choice.config_text,
                       lead.median_us, versus, fmt::join(others, ", "));
  }
  return fmt::format("racing {} configs: {} of {} launches timed, leading: {} {}", runners.size(), timed,
                     runners.size() * samples, to_string(lead.choice.reason), lead.choice.config_text);
}

Dispatcher::Dispatcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Dispatcher::~Dispatcher() = default;

std::unique_ptr<Dispatcher> Dispatcher::open(const std::filesystem::path& database,
                                             const std::filesystem::path& space_file,
                                             DispatcherOptions options) {
  GpuProbe probe = probe_gpu(options.device);
  if (!probe.usable) throw EnvironmentError("no GPU: " + probe.reason);
  auto space = std::make_unique<SearchSpace>(SearchSpace::load(space_file));
  std::error_code ec;
  if (!std::filesystem::exists(database, ec))
    throw InputError(fmt::format("no database at {} (run `mlatune tune` first)", database.string()));

  std::optional<Store> store;
  if (!options.read_only) {
    try {
      store.emplace(Store::open(database, StoreMode::read_write));
    } catch (const EnvironmentError&) {
      store.reset();  // e.g. a read-only file system: lookups still work
    }
  }
  if (!store) store.emplace(Store::open(database, StoreMode::read_only));

  auto impl = std::make_unique<Impl>(std::move(*store));
  impl->options = options;
  impl->properties = probe.device;
  impl->device = probe.device.info();
  impl->space = std::move(space);
  impl->signature = std::make_unique<CallSignature>(*impl->space);
  impl->log = logging_enabled();
  impl->mode = options.compile;
  if (options.race_from_environment) {
    if (std::optional<std::size_t> n = count_from_environment("MLATUNE_RACE")) impl->options.race.candidates = *n;
    if (std::optional<std::size_t> n = count_from_environment("MLATUNE_RACE_FILL")) impl->options.race.filling = *n;
  }
  impl->index = std::make_unique<DispatchIndex>(
      DispatchIndex::build(impl->store, *impl->space, DispatchTarget{impl->device, ToolchainInfo::current()}));
  // A first use plans its launch on this space while the background thread
  // may be preparing a compile on it: evaluators for both, built here rather
  // than on a caller's first call (milliseconds each).
  impl->space->prepare_evaluators(DispatchIndex::first_use_evaluators + 1);
  if (impl->space->prologue()) {
    std::uint64_t reserve = options.workspace_reserve_bytes;
    if (std::optional<std::uint64_t> bytes = bytes_from_environment("MLATUNE_WORKSPACE_RESERVE")) reserve = *bytes;
    impl->workspace_pool = std::make_unique<WorkspacePool>(
        options.device, options.workspace_keep_bytes,
        options.workspace_keep_bytes == 0
            ? 0
            : std::max(options.workspace_keep_bytes,
                       static_cast<std::uint64_t>(impl->properties.total_memory) / workspace_keep_share),
        reserve);
  }
  bool preload = options.preload_stored;
  if (std::optional<bool> on = switch_from_environment("MLATUNE_PRELOAD")) preload = *on;
  if (preload) impl->preloading = std::async(std::launch::async, [raw = impl.get()] { raw->preload_job(); }).share();
  if (options.record_misses && !impl->store.read_only()) {
    try {
      impl->ensure_miss_ids();
    } catch (const Error& e) {  // a busy database: the first miss tries again
      if (impl->log) std::fprintf(stderr, "mlatune dispatch: miss ids not resolved at open: %s\n", e.what());
    }
  }
  return std::unique_ptr<Dispatcher>(new Dispatcher(std::move(impl)));
}

void Dispatcher::launch(std::span<const std::int64_t> shape, void** arguments, void* stream) {
  bool first = false;
  const Prepared& p = impl_->get(shape, first);
  if (!p.launch.ready()) impl_->fail(p);
  if (first) [[unlikely]]
    return impl_->first_launch([&](std::atomic<std::uint64_t>* workspace_sum) {
      impl_->launch_arguments(p.launch, arguments, stream, workspace_sum);
    });
  if (p.racing) [[unlikely]]
    return impl_->race_launch(*p.race, shape, stream,
                              [&](const DispatchLaunch& l) { impl_->launch_arguments(l, arguments, stream); });
  impl_->launch_arguments(p.launch, arguments, stream);
}

void Dispatcher::launch_buffers(std::span<const std::int64_t> shape, void* const* buffers,
                                std::size_t buffer_count, void* stream) {
  bool first = false;
  const Prepared& p = impl_->get(shape, first);
  if (!p.launch.ready()) impl_->fail(p);
  if (buffer_count != p.launch.buffer_count)
    throw InputError(fmt::format("{} takes {} buffers; {} given", impl_->space->kernel_name(),
                                 p.launch.buffer_count, buffer_count));
  if (first) [[unlikely]]
    return impl_->first_launch([&](std::atomic<std::uint64_t>* workspace_sum) {
      impl_->launch_prepared(p.launch, buffers, stream, workspace_sum);
    });
  if (p.racing) [[unlikely]]
    return impl_->race_launch(*p.race, shape, stream,
                              [&](const DispatchLaunch& l) { impl_->launch_prepared(l, buffers, stream); });
  impl_->launch_prepared(p.launch, buffers, stream);
}

void Dispatcher::launch_buffers_checked(std::span<const std::int64_t> shape, void* const* buffers,
                                        const std::size_t* buffer_bytes, std::size_t buffer_count,
                                        void* stream) {
  bool first = false;
  const Prepared& p = impl_->get(shape, first);
  // The caller's arguments are checked against the space first, whatever the
  // database holds for the shape: a malformed shape, then the buffers.
  if (!p.shape_ok) impl_->fail(p);
  if (buffer_bytes == nullptr) throw InputError("launch_buffers_checked: buffer_bytes is null");
  const std::span<const std::size_t> given(buffer_bytes, buffer_count);
  bool short_buffer = buffer_count != p.buffer_bytes.size();
  for (std::size_t i = 0; !short_buffer && i < buffer_count; ++i)
    short_buffer = given[i] < static_cast<std::uint64_t>(p.buffer_bytes[i]);
  if (short_buffer) impl_->signature->check_bytes(shape, p.buffer_bytes, given);  // throws, naming it
  if (!p.launch.ready()) impl_->fail(p);
  if (first) [[unlikely]]
    return impl_->first_launch([&](std::atomic<std::uint64_t>* workspace_sum) {
      impl_->launch_prepared(p.launch, buffers, stream, workspace_sum);
    });
  if (p.racing) [[unlikely]]
    return impl_->race_launch(*p.race, shape, stream,
                              [&](const DispatchLaunch& l) { impl_->launch_prepared(l, buffers, stream); });
  impl_->launch_prepared(p.launch, buffers, stream);
}

DispatchDescription Dispatcher::describe(const Shape& shape) const {
  impl_->signature->shape(shape.values);  // InputError for a malformed shape
  DispatchDescription d;
  if (const Prepared* p = impl_->find(shape.values)) {
    d.choice = p->target;
    if (p->stand_in) d.stand_in = p->choice;
    d.background_error = p->background_error;
    d.not_ready = p->not_ready;
    if (p->race) {
      std::lock_guard lock(p->race->mutex);
      d.race = Impl::report(*p->race);
    }
  } else {
    d.choice = impl_->index->choose(shape);
  }
  d.shape_text = impl_->space->shape_string(shape);
  d.text = fmt::format("{} {}: {} {} ({})", impl_->space->kernel_name(), d.shape_text,
                       to_string(d.choice.reason), d.choice.ok() ? d.choice.config_text : "-",
                       d.choice.explanation);
  if (d.stand_in)
    d.text += fmt::format("; running stand-in {} {} {}", to_string(d.stand_in->reason), d.stand_in->config_text,
                          d.background_error.empty() ? "while the choice compiles in the background"
                                                     : "(the choice failed to compile: " + d.background_error + ")");
  if (d.not_ready)
    d.text += "; not ready: nothing of it is compiled yet (nonblocking mode: it compiles in the background)";
  if (d.race) d.text += "; " + d.race->text();
  return d;
}

void Dispatcher::wait_compiles() {
  if (impl_->preloading.valid()) impl_->preloading.wait();
  impl_->queue.wait_idle();
}

void Dispatcher::set_compile_mode(CompileMode mode) { impl_->mode = mode; }

const SearchSpace& Dispatcher::space() const { return *impl_->space; }
const CallSignature& Dispatcher::signature() const { return *impl_->signature; }
const DispatchIndex& Dispatcher::index() const { return *impl_->index; }
const DeviceInfo& Dispatcher::device() const { return impl_->device; }
bool Dispatcher::store_writable() const { return !impl_->store.read_only(); }

DispatcherStats Dispatcher::stats() const {
  DispatcherStats s;
  s.shapes = impl_->shapes;
  s.binaries_loaded = impl_->binaries_loaded;
  s.binaries_from_store = impl_->binaries_from_store;
  s.binaries_preloaded = impl_->binaries_preloaded;
  s.preload_failures = impl_->preload_failures;
  s.compiles = impl_->compiles;
  s.binaries_stored = impl_->binaries_stored;
  s.misses_recorded = impl_->misses_recorded;
  s.misses_unrecorded = impl_->misses_unrecorded;
  s.workspace_kept_bytes = impl_->workspace_pool ? impl_->workspace_pool->kept() : 0;
  s.workspace_mapped_bytes = impl_->workspace_pool ? impl_->workspace_pool->mapped() : 0;
  s.blocking_compiles = impl_->blocking_compiles;
  s.not_ready_shapes = impl_->not_ready_shapes;
  s.not_ready_launches = impl_->not_ready_launches;
  s.background_compiles = impl_->background_compiles;
  s.background_failures = impl_->background_failures;
  s.stand_in_shapes = impl_->stand_in_shapes;
  s.switches = impl_->switches;
  s.races = impl_->races_started;
  s.races_settled = impl_->races_settled;
  s.race_launches = impl_->race_launches;
  s.choose_ns = impl_->choose_ns;
  s.store_read_ns = impl_->store_read_ns;
  s.load_ns = impl_->load_ns;
  s.ready_ns = impl_->ready_ns;
  s.miss_ns = impl_->miss_ns;
  s.rank_ns = impl_->rank_ns;
  s.queue_ns = impl_->queue_ns;
  s.first_launch_ns = impl_->first_launch_ns;
  s.workspace_ns = impl_->workspace_ns;
  s.lock_wait_ns = impl_->lock_wait_ns;
  std::lock_guard lock(impl_->error_mutex);
  s.last_background_error = impl_->last_background_error;
  return s;
}

}  // namespace mlatune
