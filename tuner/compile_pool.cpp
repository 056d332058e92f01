#include "tuner/compile_pool.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"

namespace mlatune {

bool lower_this_threads_priority() {
  // On Linux a nice value belongs to a thread; PRIO_PROCESS with a thread id
  // reads and sets that thread's alone.
  const auto self = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, self);
  if (now == -1 && errno != 0) return false;
  return setpriority(PRIO_PROCESS, self, std::min(19, now + compile_niceness)) == 0;
}

struct CompilePool::State {
  struct Job {
    CompileRequest request;
    BinaryKey key;
    std::promise<CompileResult> promise;
  };

  const Compiler& compiler;
  BinaryCacheHooks hooks;
  CompileIn where;
  WorkerOptions helper_options;

  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<Job> queue;
  // Finished and in-flight results alike: a duplicate submitted while the
  // first is compiling gets the same shared_future and so waits for it.
  std::map<BinaryKey, std::shared_future<CompileResult>> results;
  CompilePoolStats stats;
  bool stopping = false;
  std::vector<std::thread> workers;

  State(const Compiler& c, BinaryCacheHooks h, CompileIn w, WorkerOptions o)
      : compiler(c), hooks(std::move(h)), where(w), helper_options(std::move(o)) {}

  void work() {
    // Refused (a sandbox may forbid it): compiling goes on at the priority it had.
    (void)lower_this_threads_priority();
    // This thread's compile process (tied to this thread's life: lifeline.h),
    // started by its first request; it inherits this thread's priority.
    std::optional<Worker> helper;
    if (where == CompileIn::processes) helper.emplace(helper_options);
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stopping || !queue.empty(); });
        if (stopping) return;
        job = std::move(queue.front());
        queue.pop_front();
      }
      run(job, helper ? &*helper : nullptr);
    }
  }

  // Runs a cache hook, adding its wall time to stats.cache_seconds.
  template <typename Hook>
  auto timed_hook(Hook&& hook) {
    struct Charge {
      State& state;
      std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
      ~Charge() {
        double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::lock_guard lock(state.mutex);
        state.stats.cache_seconds += seconds;
      }
    } charge{*this};
    return hook();
  }

  void run(Job& job, Worker* helper) {
    try {
      if (hooks.lookup) {
        if (std::optional<CompiledBinary> found = timed_hook([&] { return hooks.lookup(job.key); })) {
          {
            std::lock_guard lock(mutex);
            ++stats.external_hits;
          }
          job.promise.set_value(CompileResult(std::move(*found)));
          return;
        }
      }
      {
        std::lock_guard lock(mutex);
        ++stats.compiled;
      }
      // In processes, a request compiled apart still goes through this
      // pool's compiler, which keeps its prologue part for every process.
      CompileResult result =
          helper ? compiler.compile(job.request,
                                    [&](const CompileRequest& program) { return helper->compile(program, compiler); })
                 : compiler.compile(job.request);
      {
        std::lock_guard lock(mutex);
        stats.nvrtc_seconds += result.compile_seconds();
        stats.nvrtc_cpu_seconds += result.cpu_seconds();
      }
      if (result.ok() && hooks.store) timed_hook([&] { hooks.store(result.binary()); });
      job.promise.set_value(std::move(result));
    } catch (...) {
      // Not cached: an environment failure may be transient, so a later
      // identical request tries again.
      {
        std::lock_guard lock(mutex);
        results.erase(job.key);
      }
      job.promise.set_exception(std::current_exception());
    }
  }
};

std::string_view to_string(CompileIn where) {
  return where == CompileIn::processes ? "processes" : "threads";
}

std::optional<CompileIn> parse_compile_in(std::string_view text) {
  for (CompileIn where : {CompileIn::threads, CompileIn::processes})
    if (to_string(where) == text) return where;
  return std::nullopt;
}

CompilePool::CompilePool(const Compiler& compiler, unsigned threads, BinaryCacheHooks hooks, CompileIn where,
                         WorkerOptions helper)
    : state_(std::make_unique<State>(compiler, std::move(hooks), where, std::move(helper))) {
  if (state_->where == CompileIn::processes && state_->helper_options.executable.empty()) {
    const char* env = std::getenv("MLATUNE_COMPILE_WORKER");
    try {
      state_->helper_options.executable = env && *env ? std::filesystem::path(env) : worker_beside_this_program();
    } catch (const EnvironmentError&) {
      // No /proc/self/exe to look beside: no compile program to find.
    }
  }
  std::error_code ec;
  if (state_->where == CompileIn::processes && (state_->helper_options.executable.empty() ||
                                                !std::filesystem::exists(state_->helper_options.executable, ec)))
    state_->where = CompileIn::threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  state_->workers.reserve(threads);
  try {
    for (unsigned i = 0; i < threads; ++i) state_->workers.emplace_back([s = state_.get()] { s->work(); });
  } catch (const std::system_error& e) {
    {
      std::lock_guard lock(state_->mutex);
      state_->stopping = true;
    }
    state_->wake.notify_all();
    for (std::thread& t : state_->workers) t.join();
    throw EnvironmentError(std::string("cannot start compile threads: ") + e.what());
  }
}

CompilePool::~CompilePool() {
  std::deque<State::Job> abandoned;
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    abandoned.swap(state_->queue);
  }
  state_->wake.notify_all();
  for (std::thread& t : state_->workers) t.join();
  for (State::Job& job : abandoned)
    job.promise.set_exception(
        std::make_exception_ptr(EnvironmentError("compile pool shut down before this request ran")));
}

std::shared_future<CompileResult> CompilePool::submit(CompileRequest request) {
  BinaryKey key = state_->compiler.key(request);
  std::lock_guard lock(state_->mutex);
  ++state_->stats.submitted;
  if (auto it = state_->results.find(key); it != state_->results.end()) {
    ++state_->stats.memory_hits;
    return it->second;
  }
  State::Job job{std::move(request), key, {}};
  std::shared_future<CompileResult> future = job.promise.get_future().share();
  state_->results.emplace(std::move(key), future);
  state_->queue.push_back(std::move(job));
  state_->wake.notify_one();
  return future;
}

CompileIn CompilePool::where() const { return state_->where; }

unsigned CompilePool::threads() const { return static_cast<unsigned>(state_->workers.size()); }

CompilePoolStats CompilePool::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

}  // namespace mlatune
