#include "tuner/evaluator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "tuner/cuda.h"
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
    floor_ = time_until_done(empty, one, {}, {}, false);
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
    std::vector<std::optional<LoadedKernel>> kernels;
    for (const Candidate& candidate : candidates) {
      try {
        LoadedKernel kernel(candidate.cubin, candidate.entry);
        if (candidate.geometry.shared_bytes > 0 &&
            kernel.set_max_dynamic_shared(candidate.geometry.shared_bytes) != 0) {
          cuda_take_last_error();
          kernels.emplace_back();
          continue;
        }
        kernels.emplace_back(std::move(kernel));
      } catch (const CudaError& error) {
        if (error.sticky()) throw;
        kernels.emplace_back();
      }
    }
    std::vector<std::vector<double>> samples(candidates.size());
    std::vector<bool> failed(candidates.size(), false);
    constexpr int per_round = 5;
    for (int round = 0; round < std::max(1, rounds); ++round) {
      for (std::size_t i = 0; i < candidates.size(); ++i) {
        if (!kernels[i] || failed[i]) continue;
        // The first round of each candidate only warms it up again.
        std::vector<double> batch;
        if (!timed_batch(*kernels[i], candidates[i].geometry, per_round, batch)) {
          failed[i] = true;
          continue;
        }
        if (round > 0 || rounds <= 1) samples[i].insert(samples[i].end(), batch.begin(), batch.end());
        if (progress) progress();
      }
    }
    std::vector<std::optional<TimingStats>> result;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (!kernels[i] || failed[i] || samples[i].empty()) {
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
  bool timed_batch(const LoadedKernel& kernel, const LaunchGeometry& g, int n,
                   std::vector<double>& samples, bool takes_arguments = true) {
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
      events_[2 * i].record(stream);
      int code = kernel.launch(g.grid, g.block, g.shared_bytes, args, stream);
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
  TimingStats time_until_done(const LoadedKernel& kernel, const LaunchGeometry& g,
                              const Cutoff& cutoff, const std::function<void()>& progress,
                              bool takes_arguments = true) {
    using clock = std::chrono::steady_clock;
    auto start = clock::now();
    TimingSchedule schedule(options_, cutoff);
    std::vector<double> samples;
    int batch = schedule.first_batch();
    while (true) {
      if (!timed_batch(kernel, g, batch, samples, takes_arguments))
        throw EnvironmentError(fmt::format("{}: a launch that ran before was refused while timing",
                                           kernel.entry()));
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
    std::int64_t threads = 1;
    for (int i = 0; i < 3; ++i) {
      if (g.grid[i] <= 0 || g.block[i] <= 0)
        return refuse(fmt::format("grid ({}, {}, {}) and block ({}, {}, {}) must be positive",
                                  g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2]));
      if (g.block[i] > device.max_block[i])
        return refuse(fmt::format("block dimension {} is {}, the device allows {}", "xyz"[i],
                                  g.block[i], device.max_block[i]));
      if (g.grid[i] > device.max_grid[i])
        return refuse(fmt::format("grid dimension {} is {}, the device allows {}", "xyz"[i],
                                  g.grid[i], device.max_grid[i]));
      threads *= g.block[i];
    }
    if (threads > device.max_threads_per_block)
      return refuse(fmt::format("{} threads per block, the device allows {}", threads,
                                device.max_threads_per_block));
    if (threads > attributes.max_threads_per_block)
      return refuse(fmt::format("{} threads per block, but with {} registers per thread this "
                                "kernel can launch at most {}",
                                threads, attributes.registers, attributes.max_threads_per_block));
    if (g.shared_bytes < 0) return refuse("negative dynamic shared memory");
    if (attributes.static_shared_bytes + g.shared_bytes > device.shared_per_block_optin)
      return refuse(fmt::format("{} bytes of shared memory per block ({} static + {} dynamic), "
                                "the device allows {}",
                                attributes.static_shared_bytes + g.shared_bytes,
                                attributes.static_shared_bytes, g.shared_bytes,
                                device.shared_per_block_optin));
    if (g.shared_bytes > 0) {
      int code = kernel.set_max_dynamic_shared(g.shared_bytes);
      if (code != 0) {
        LaunchFailure failure = launch_failure(code, "cannot allow the dynamic shared memory");
        result.outcome = failure.outcome;
        result.reason = failure.reason;
        result.context_lost = failure.context_lost;
        return;
      }
    }

    // Validation; these launches are also the warm-up, kept out of the timing.
    ValidationStats worst;
    std::string failure_reason;
    const Stream& stream = workload_.stream();
    for (int set = 0; set < workload_.validation_sets(); ++set) {
      workload_.poison_outputs();
      int code = kernel.launch(g.grid, g.block, g.shared_bytes, workload_.arguments(set), stream);
      if (code != 0) {
        LaunchFailure failure = launch_failure(code, "the GPU refused the launch");
        result.outcome = failure.outcome;
        result.reason = failure.reason;
        result.context_lost = failure.context_lost;
        return;
      }
      stream.synchronize();
      if (progress) progress();
      ValidationStats stats = workload_.compare(set);
      if (!stats.passed && failure_reason.empty()) {
        failure_reason = fmt::format("input set {}: {}", set + 1,
                                     *tolerance_failure(stats, workload_.tolerance()));
      }
      if (set == 0) {
        worst = stats;
      } else {
        worst.relative_l2 = std::max(worst.relative_l2, stats.relative_l2);
        worst.max_abs = std::max(worst.max_abs, stats.max_abs);
        worst.nonfinite = std::max(worst.nonfinite, stats.nonfinite);
        worst.passed = worst.passed && stats.passed;
      }
      worst.input_sets = set + 1;
    }
    result.validation = worst;
    if (!worst.passed) {
      result.outcome = Outcome::wrong_result;
      result.reason = failure_reason;
      return;
    }

    // Validation is complete before a cut can happen: a cut candidate is
    // correct, and its time is real, only from fewer launches.
    TimingStats timing = time_until_done(kernel, g, cutoff, progress);
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
