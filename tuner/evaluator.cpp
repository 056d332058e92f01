#include "tuner/evaluator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "core/cuda.h"
#include "tuner/guarded_buffer.h"
#include "tuner/workload.h"

namespace mlatune {

namespace {

/// A launch the GPU refused or that broke the context, as a value.
struct LaunchFailure {
  Outcome outcome;
  std::string reason;
  bool context_lost;
};

LaunchFailure launch_failure(int code, std::string_view what) {
  cuda_take_last_error();
  if (cuda_error_is_sticky(code))
    return {Outcome::crashed,
            fmt::format("{}: {} ({})", what, cuda_error_string(code), cuda_error_name(code)), true};
  return {Outcome::launch_error,
          fmt::format("{}: {} ({})", what, cuda_error_string(code), cuda_error_name(code)), false};
}

/// Why `g` cannot launch `kernel` on `device`, named before the GPU is asked;
/// empty when it can.  `what` prefixes the message ("" or "prologue: ").
std::string geometry_refusal(const LaunchGeometry& g, const KernelAttributes& attributes,
                             const DeviceProperties& device, std::string_view what) {
  std::int64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (g.grid[i] <= 0 || g.block[i] <= 0)
      return fmt::format("{}grid ({}, {}, {}) and block ({}, {}, {}) must be positive", what,
                         g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2]);
    if (g.block[i] > device.max_block[i])
      return fmt::format("{}block dimension {} is {}, the device allows {}", what, "xyz"[i],
                         g.block[i], device.max_block[i]);
    if (g.grid[i] > device.max_grid[i])
      return fmt::format("{}grid dimension {} is {}, the device allows {}", what, "xyz"[i],
                         g.grid[i], device.max_grid[i]);
    threads *= g.block[i];
  }
  if (threads > device.max_threads_per_block)
    return fmt::format("{}{} threads per block, the device allows {}", what, threads,
                       device.max_threads_per_block);
  if (threads > attributes.max_threads_per_block)
    return fmt::format("{}{} threads per block, but with {} registers per thread this "
                       "kernel can launch at most {}",
                       what, threads, attributes.registers, attributes.max_threads_per_block);
  if (g.shared_bytes < 0) return fmt::format("{}negative dynamic shared memory", what);
  if (attributes.static_shared_bytes + g.shared_bytes > device.shared_per_block_optin)
    return fmt::format("{}{} bytes of shared memory per block ({} static + {} dynamic), "
                       "the device allows {}",
                       what, attributes.static_shared_bytes + g.shared_bytes,
                       attributes.static_shared_bytes, g.shared_bytes,
                       device.shared_per_block_optin);
  return {};
}

/// What one timed or validated launch issues: the main kernel and, where it
/// runs, its prologue (the same cubin), back to back on one stream.
struct LaunchPlan {
  const LoadedKernel* main = nullptr;
  LaunchGeometry geometry;
  const LoadedKernel* prologue = nullptr;
  LaunchGeometry prologue_geometry;
  /// The first non-zero code; `failed_prologue` says which kernel gave it.
  int issue(void** arguments, const Stream& stream, bool* failed_prologue = nullptr) const {
    if (prologue) {
      const LaunchGeometry& p = prologue_geometry;
      int code = prologue->launch(p.grid, p.block, p.shared_bytes, arguments, stream);
      if (code != 0) {
        if (failed_prologue) *failed_prologue = true;
        return code;
      }
    }
    if (failed_prologue) *failed_prologue = false;
    return main->launch(geometry.grid, geometry.block, geometry.shared_bytes, arguments, stream);
  }
};

/// A candidate's workspace buffers (none without a prologue), each between
/// guards that the workload checks after every validation launch.  install()
/// points the workload's argument lists at them; on destruction they point
/// at null again, so no later launch sees freed memory.
class WorkspaceLease {
 public:
  WorkspaceLease(Workload& workload, const std::vector<std::int64_t>& bytes)
      : workload_(workload), count_(workload.workspace_bytes().size()) {
    if (bytes.empty()) return;
    if (bytes.size() != count_)
      throw EnvironmentError(fmt::format("the candidate has {} workspace sizes; the space has {} "
                                         "workspace arguments",
                                         bytes.size(), count_));
    for (std::int64_t b : bytes)
      buffers_.emplace_back(guard_layout(static_cast<std::size_t>(std::max<std::int64_t>(b, 4))),
                            workload.support(), workload.stream());
  }
  ~WorkspaceLease() {
    if (count_ == 0) return;
    try {
      workload_.set_workspace(std::vector<const GuardedBuffer*>(count_, nullptr));
    } catch (...) {
      // set_workspace throws only for a count mismatch, and count_ is the workload's own.
    }
  }
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;

  void install() const {
    if (count_ == 0) return;
    std::vector<const GuardedBuffer*> installed(count_, nullptr);
    for (std::size_t k = 0; k < buffers_.size(); ++k) installed[k] = &buffers_[k];
    workload_.set_workspace(installed);
  }
  /// Writes NaN over every buffer: a main kernel that reads what its
  /// prologue did not write fails validation.
  void poison(const SupportKernels& support, const Stream& stream) const {
    for (const GuardedBuffer& b : buffers_) support.poison_f32(b.data(), b.bytes() / 4, stream);
  }

 private:
  Workload& workload_;
  std::size_t count_;
  std::vector<GuardedBuffer> buffers_;
};

/// Launches per validation input set: a second run with the same input must
/// give the same output (within the tolerance), or the kernel races.
constexpr int validation_runs = 2;

/// Folds one launch's errors into the worst seen so far.
void merge_worst(ValidationStats& worst, const ValidationStats& stats, bool first) {
  if (first) {
    worst = stats;
    return;
  }
  worst.relative_l2 = std::max(worst.relative_l2, stats.relative_l2);
  worst.max_abs = std::max(worst.max_abs, stats.max_abs);
  worst.nonfinite = std::max(worst.nonfinite, stats.nonfinite);
  worst.passed = worst.passed && stats.passed;
}

/// About 50 µs at Hopper clocks: longer than the host needs to queue events
/// and a launch, short against the timing budget.
constexpr std::int64_t spin_cycles = 100000;

}  // namespace

class Evaluator::Impl {
 public:
  Impl(Workload& workload, TimingOptions options) : workload_(workload), options_(options) {
    const LoadedKernel& empty = workload_.support().empty();
    LaunchGeometry one;
    // Warm-up: the first launch pays for loading the module.
    check(empty.launch(one.grid, one.block, 0, nullptr, workload_.stream()), "empty kernel");
    workload_.stream().synchronize();
    LaunchPlan plan{&empty, one};
    floor_ = time_until_done(plan, {}, {}, false);
  }

  const TimingStats& floor() const { return floor_; }

  EvaluationResult evaluate(const Candidate& candidate, const Cutoff& cutoff,
                            const std::function<void()>& progress) {
    EvaluationResult result;
    try {
      evaluate_into(candidate, cutoff, progress, result);
    } catch (const CudaError& error) {
      if (!error.sticky()) throw;
      result.outcome = Outcome::crashed;
      result.reason = error.what();
      result.context_lost = true;
      result.timing.reset();
    }
    return result;
  }

  std::vector<std::optional<TimingStats>> retime(const std::vector<Candidate>& candidates,
                                                 int rounds, const std::function<void()>& progress) {
    // Per candidate: its kernels, its plan (empty when it cannot launch) and its workspace.
    std::vector<std::optional<LoadedKernel>> kernels(candidates.size()), prologues(candidates.size());
    std::vector<std::optional<LaunchPlan>> plans(candidates.size());
    std::vector<std::unique_ptr<WorkspaceLease>> workspaces(candidates.size());
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const Candidate& candidate = candidates[i];
      try {
        kernels[i].emplace(candidate.cubin, candidate.entry);
        if (candidate.geometry.shared_bytes > 0 &&
            kernels[i]->set_max_dynamic_shared(candidate.geometry.shared_bytes) != 0) {
          cuda_take_last_error();
          continue;
        }
        LaunchPlan plan{&*kernels[i], candidate.geometry};
        if (candidate.prologue) {
          prologues[i].emplace(candidate.cubin, candidate.prologue->entry);
          const LaunchGeometry& pg = candidate.prologue->geometry;
          if (pg.shared_bytes > 0 && prologues[i]->set_max_dynamic_shared(pg.shared_bytes) != 0) {
            cuda_take_last_error();
            continue;
          }
          plan.prologue = &*prologues[i];
          plan.prologue_geometry = pg;
        }
        workspaces[i] = std::make_unique<WorkspaceLease>(workload_, candidate.workspace_bytes);
        plans[i] = plan;
      } catch (const CudaError& error) {
        if (error.sticky()) throw;
        cuda_take_last_error();
      }
    }
    std::vector<std::vector<double>> samples(candidates.size());
    std::vector<bool> failed(candidates.size(), false);
    constexpr int per_round = 5;
    for (int round = 0; round < std::max(1, rounds); ++round) {
      for (std::size_t i = 0; i < candidates.size(); ++i) {
        if (!plans[i] || failed[i]) continue;
        // The first round of each candidate only warms it up again.
        std::vector<double> batch;
        workspaces[i]->install();
        if (!timed_batch(*plans[i], per_round, batch)) {
          failed[i] = true;
          continue;
        }
        if (round > 0 || rounds <= 1) samples[i].insert(samples[i].end(), batch.begin(), batch.end());
        if (progress) progress();
      }
    }
    std::vector<std::optional<TimingStats>> result;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (!plans[i] || failed[i] || samples[i].empty()) {
        result.emplace_back();
        continue;
      }
      int count = static_cast<int>(samples[i].size());
      result.emplace_back(summarize_times(
          std::move(samples[i]), options_.cache,
          fmt::format("{}; interleaved re-timing, {} rounds of {} launches", method_text(count),
                      std::max(1, rounds), per_round)));
    }
    return result;
  }

 private:
  static void check(int code, std::string_view what) {
    if (code != 0) {
      cuda_take_last_error();
      throw CudaError(code, what, __FILE__, __LINE__);
    }
  }

  std::string method_text(int count) const {
    std::string cache;
    switch (options_.cache) {
      case CacheMode::cold:
        cache = fmt::format("L2 flushed before each ({:.0f} MiB written)",
                            workload_.flush_bytes() / 1048576.0);
        break;
      case CacheMode::rotate:
        cache = fmt::format("inputs rotated over {} sets, GPU kept busy by a spin kernel before each",
                            workload_.input_sets());
        break;
      case CacheMode::hot:
        cache = "hot L2 (no flush, one input set), GPU kept busy by a spin kernel before each";
        break;
    }
    return fmt::format("CUDA events around each launch, {}; {} launches", cache, count);
  }

  /// Launches `kernel` `n` times with events around each; appends µs per
  /// launch.  Returns false if a launch was refused (not sticky).
  bool timed_batch(const LaunchPlan& plan, int n, std::vector<double>& samples,
                   bool takes_arguments = true) {
    while (events_.size() < static_cast<std::size_t>(2 * n)) events_.emplace_back();
    const Stream& stream = workload_.stream();
    for (int i = 0; i < n; ++i) {
      int set = 0;
      // Before each timed launch the GPU is busy (flushing, or spinning), so
      // the host has queued the launch by the time the GPU gets to it.
      if (options_.cache == CacheMode::cold)
        workload_.flush_l2();
      else
        workload_.support().spin(spin_cycles, stream);
      if (options_.cache == CacheMode::rotate) set = rotation_++ % workload_.input_sets();
      void** args = takes_arguments ? workload_.arguments(set) : nullptr;
      // The events bracket the prologue too: its cost is part of the config's.
      events_[2 * i].record(stream);
      int code = plan.issue(args, stream);
      if (code != 0) {
        cuda_take_last_error();
        if (cuda_error_is_sticky(code)) throw CudaError(code, "timed launch", __FILE__, __LINE__);
        stream.synchronize();
        return false;
      }
      events_[2 * i + 1].record(stream);
    }
    events_[2 * n - 1].synchronize();
    for (int i = 0; i < n; ++i)
      samples.push_back(1000.0 * events_[2 * i + 1].elapsed_ms_since(events_[2 * i]));
    return true;
  }

  /// Times batches as TimingSchedule says (until the median settles, the
  /// budget is spent, or the candidate is cut) and summarizes them; the
  /// method text says how many launches and why the phase ended early.
  TimingStats time_until_done(const LaunchPlan& plan, const Cutoff& cutoff,
                              const std::function<void()>& progress, bool takes_arguments = true) {
    using clock = std::chrono::steady_clock;
    auto start = clock::now();
    TimingSchedule schedule(options_, cutoff);
    std::vector<double> samples;
    int batch = schedule.first_batch();
    while (true) {
      if (!timed_batch(plan, batch, samples, takes_arguments))
        throw EnvironmentError(fmt::format("{}: a launch that ran before was refused while timing",
                                           plan.main->entry()));
      if (progress) progress();
      double elapsed_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
      if (schedule.after_batch(samples, elapsed_ms) != TimingStop::more) break;
      batch = schedule.next_batch();
    }
    int count = static_cast<int>(samples.size());
    std::string method = method_text(count);
    if (std::string note = schedule.stop_note(count); !note.empty()) method += "; " + note;
    TimingStats timing = summarize_times(std::move(samples), options_.cache, std::move(method));
    timing.stable = schedule.stop() == TimingStop::settled;
    timing.cut = schedule.stop() == TimingStop::cut;
    return timing;
  }

  void evaluate_into(const Candidate& candidate, const Cutoff& cutoff,
                     const std::function<void()>& progress, EvaluationResult& result) {
    const DeviceProperties& device = workload_.device();
    const LaunchGeometry& g = candidate.geometry;
    auto refuse = [&](std::string reason) {
      result.outcome = Outcome::launch_error;
      result.reason = std::move(reason);
    };

    std::optional<LoadedKernel> loaded;
    try {
      loaded.emplace(candidate.cubin, candidate.entry);
    } catch (const CudaError& error) {
      if (error.sticky()) throw;
      cuda_take_last_error();
      return refuse(fmt::format("cannot load the compiled kernel: {} ({})", error.description(),
                                error.name()));
    }
    const LoadedKernel& kernel = *loaded;
    KernelAttributes attributes = kernel.attributes();
    result.registers = attributes.registers;
    result.local_bytes = attributes.local_bytes;

    // Limits the launch would break are named here, before the GPU is asked.
    if (std::string why = geometry_refusal(g, attributes, device, ""); !why.empty())
      return refuse(std::move(why));
    auto allow_shared = [&](const LoadedKernel& k, std::int64_t bytes, std::string_view what) {
      if (bytes <= 0) return true;
      int code = k.set_max_dynamic_shared(bytes);
      if (code == 0) return true;
      LaunchFailure failure = launch_failure(code, what);
      result.outcome = failure.outcome;
      result.reason = failure.reason;
      result.context_lost = failure.context_lost;
      return false;
    };
    if (!allow_shared(kernel, g.shared_bytes, "cannot allow the dynamic shared memory")) return;

    LaunchPlan plan{&kernel, g};
    std::optional<LoadedKernel> prologue;
    if (candidate.prologue) {
      try {
        prologue.emplace(candidate.cubin, candidate.prologue->entry);
      } catch (const CudaError& error) {
        if (error.sticky()) throw;
        cuda_take_last_error();
        return refuse(fmt::format("cannot load the prologue '{}': {} ({})", candidate.prologue->entry,
                                  error.description(), error.name()));
      }
      const LaunchGeometry& pg = candidate.prologue->geometry;
      if (std::string why = geometry_refusal(pg, prologue->attributes(), device, "prologue: ");
          !why.empty())
        return refuse(std::move(why));
      if (!allow_shared(*prologue, pg.shared_bytes,
                        "prologue: cannot allow the dynamic shared memory"))
        return;
      plan.prologue = &*prologue;
      plan.prologue_geometry = pg;
    }
    WorkspaceLease workspace(workload_, candidate.workspace_bytes);
    workspace.install();

    // Validation; these launches are also the warm-up, kept out of the timing.
    // Each input set runs validation_runs times; after every launch the
    // guards and inputs are checked, and every run after the first must
    // agree with the first within the tolerance.
    workload_.restore_integrity();
    ValidationStats worst;
    std::string failure_reason;
    const Stream& stream = workload_.stream();
    for (int set = 0; set < workload_.validation_sets(); ++set) {
      for (int run = 0; run < validation_runs; ++run) {
        workload_.poison_outputs();
        workspace.poison(workload_.support(), stream);
        bool failed_prologue = false;
        int code = plan.issue(workload_.arguments(set), stream, &failed_prologue);
        if (code != 0) {
          LaunchFailure failure = launch_failure(
              code, failed_prologue ? "the GPU refused the prologue launch" : "the GPU refused the launch");
          result.outcome = failure.outcome;
          result.reason = failure.reason;
          result.context_lost = failure.context_lost;
          return;
        }
        stream.synchronize();
        if (progress) progress();
        std::optional<std::string> trespass = workload_.check_integrity(set);
        ValidationStats stats = workload_.compare(set);
        merge_worst(worst, stats, set == 0 && run == 0);
        worst.input_sets = set + 1;
        if (trespass) {
          // Memory outside the outputs was written: nothing else matters.
          worst.passed = false;
          result.validation = worst;
          result.outcome = Outcome::wrong_result;
          result.reason = fmt::format("input set {}: {}", set + 1, *trespass);
          return;
        }
        if (!stats.passed && failure_reason.empty())
          failure_reason = fmt::format("input set {}: {}", set + 1,
                                       *tolerance_failure(stats, workload_.tolerance()));
        if (run == 0) {
          workload_.keep_outputs();
          continue;
        }
        ValidationStats again = workload_.compare_with_kept();
        if (!again.passed && failure_reason.empty())
          failure_reason = fmt::format("nondeterministic: input set {}, run {} differs from run 1: {}",
                                       set + 1, run + 1,
                                       *tolerance_failure(again, workload_.tolerance()));
      }
    }
    worst.passed = failure_reason.empty();
    result.validation = worst;
    if (!worst.passed) {
      result.outcome = Outcome::wrong_result;
      result.reason = failure_reason;
      return;
    }

    // Validation is complete before a cut can happen: a cut candidate is
    // correct, and its time is real, only from fewer launches.
    TimingStats timing = time_until_done(plan, cutoff, progress);
    // Nothing real runs faster than a kernel that does nothing: such a time
    // means the measurement is broken, and it must not enter the results.
    if (timing.median_us < floor_.min_us * 0.97)
      throw EnvironmentError(fmt::format(
          "{}: measured {:.3f} µs (median), below the empty-kernel floor of {:.3f} µs (min) with "
          "the same method: the timing is broken, not the kernel fast",
          candidate.label, timing.median_us, floor_.min_us));
    result.timing = std::move(timing);
    result.outcome = Outcome::ok;
  }

  Workload& workload_;
  TimingOptions options_;
  TimingStats floor_;
  std::vector<Event> events_;
  int rotation_ = 0;
};

void describe_launch(const SearchSpace& space, const Config& config, const Shape& shape,
                     Candidate& candidate) {
  candidate.entry = space.kernel().entry;
  candidate.geometry = space.geometry(config, shape);
  candidate.prologue.reset();
  candidate.workspace_bytes.clear();
  std::optional<LaunchGeometry> prologue = space.prologue_geometry(config, shape);
  if (!prologue) return;
  candidate.prologue = PrologueLaunch{space.prologue()->kernel.entry, *prologue};
  for (const BoundArgument& bound : space.bind_arguments(shape))
    if (bound.argument->role == ArgumentRole::workspace)
      candidate.workspace_bytes.push_back(
          bound.element_count * static_cast<std::int64_t>(element_size(bound.argument->type)));
}

Evaluator::Evaluator(Workload& workload, TimingOptions options)
    : impl_(std::make_unique<Impl>(workload, options)) {}
Evaluator::~Evaluator() = default;

EvaluationResult Evaluator::evaluate(const Candidate& candidate, const Cutoff& cutoff,
                                     const std::function<void()>& progress) {
  return impl_->evaluate(candidate, cutoff, progress);
}

std::vector<std::optional<TimingStats>> Evaluator::retime(const std::vector<Candidate>& candidates,
                                                          int rounds,
                                                          const std::function<void()>& progress) {
  return impl_->retime(candidates, rounds, progress);
}

const TimingStats& Evaluator::floor() const { return impl_->floor(); }

}  // namespace mlatune
