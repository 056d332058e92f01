#include "tuner/evaluator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "core/cuda.h"
#include "core/launch_issue.h"
#include "tuner/guarded_buffer.h"
#include "tuner/workload.h"

namespace mlatune {

namespace {

/// Copies the launch of `steps` into `candidate`.
void describe_steps(const LaunchSteps& steps, Candidate& candidate) {
  candidate.entry = steps.entry;
  candidate.geometry = steps.geometry;
  candidate.prologue = steps.prologue;
  candidate.workspace_bytes = steps.workspace_bytes;
}

/// A launch the GPU refused or that broke the context, as a value.
struct LaunchFailure {
  Outcome outcome;
  std::string reason;
  bool context_lost;
};

LaunchFailure launch_failure(const LaunchStatus& status, std::string_view what) {
  cuda_take_last_error();
  std::string reason = launch_error_text(status, what);
  if (cuda_error_is_sticky(status.code)) return {Outcome::crashed, std::move(reason), true};
  return {Outcome::launch_error, std::move(reason), false};
}

/// A candidate's entries loaded in this process and the sequence that
/// issues them (set once they are ready).  Not movable: the sequence points
/// at the entries.
struct CandidateKernels {
  std::optional<LoadedEntry> main;
  std::optional<LoadedEntry> prologue;
  LaunchSequence sequence;

  CandidateKernels() = default;
  CandidateKernels(const CandidateKernels&) = delete;
  CandidateKernels& operator=(const CandidateKernels&) = delete;

  /// Loads the candidate's entries; why one cannot be loaded, or empty.  A
  /// sticky error is thrown: the process cannot go on.
  std::string load(const Candidate& candidate) {
    if (std::string why = load_one([&] { main.emplace(candidate.cubin, candidate.entry); },
                                   "cannot load the compiled kernel");
        !why.empty() || !candidate.prologue)
      return why;
    // The prologue is another entry of the same cubin: its library is loaded once.
    return load_one([&] { prologue.emplace(*main, candidate.prologue->entry); },
                    fmt::format("cannot load the prologue '{}'", candidate.prologue->entry));
  }

  /// Checks the device limits and opts in to dynamic shared memory
  /// (core/launch_issue.h); the sequence is set when that succeeds.
  LaunchReadiness ready(const Candidate& candidate, const DeviceProperties& device) {
    const LaunchSteps steps = launch_steps(candidate);
    LoadedEntry* p = prologue ? &*prologue : nullptr;
    LaunchReadiness readiness = prepare_launch(steps, *main, p, device);
    if (readiness.ok()) sequence = launch_sequence(steps, &main->kernel, p ? &p->kernel : nullptr);
    return readiness;
  }

 private:
  template <class Load>
  static std::string load_one(Load&& load, std::string_view what) {
    try {
      load();
      return {};
    } catch (const CudaError& error) {
      if (error.sticky()) throw;
      cuda_take_last_error();
      return fmt::format("{}: {} ({})", what, error.description(), error.name());
    }
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
    LaunchSequence sequence;
    sequence.main.kernel = &empty;
    floor_ = time_until_done(sequence, {}, {}, false);
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
    // Per candidate: its kernels (null when it cannot launch) and its workspace.
    std::vector<std::unique_ptr<CandidateKernels>> kernels(candidates.size());
    std::vector<std::unique_ptr<WorkspaceLease>> workspaces(candidates.size());
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      try {
        auto loaded = std::make_unique<CandidateKernels>();
        if (!loaded->load(candidates[i]).empty() ||
            !loaded->ready(candidates[i], workload_.device()).ok())
          continue;
        workspaces[i] = std::make_unique<WorkspaceLease>(workload_, candidates[i].workspace_bytes);
        kernels[i] = std::move(loaded);
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
        if (!kernels[i] || failed[i]) continue;
        // The first round of each candidate only warms it up again.
        std::vector<double> batch;
        workspaces[i]->install();
        if (!timed_batch(kernels[i]->sequence, per_round, batch)) {
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
        cache = fmt::format("{} ({:.0f} MiB written)", cache_method_phrase(CacheMode::cold),
                            workload_.flush_bytes() / 1048576.0);
        break;
      case CacheMode::rotate:
        cache = fmt::format("{} {} sets, GPU kept busy by a spin kernel before each",
                            cache_method_phrase(CacheMode::rotate), workload_.input_sets());
        break;
      case CacheMode::hot:
        cache = fmt::format("{} (no flush, one input set), GPU kept busy by a spin kernel before each",
                            cache_method_phrase(CacheMode::hot));
        break;
    }
    return fmt::format("CUDA events around each launch, {}; {} launches", cache, count);
  }

  /// Launches `kernel` `n` times with events around each; appends µs per
  /// launch.  Returns false if a launch was refused (not sticky).
  bool timed_batch(const LaunchSequence& sequence, int n, std::vector<double>& samples,
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
      LaunchStatus status = sequence.issue(args, stream.get());
      if (!status.ok()) {
        cuda_take_last_error();
        if (cuda_error_is_sticky(status.code))
          throw CudaError(status.code, "timed launch", __FILE__, __LINE__);
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
  TimingStats time_until_done(const LaunchSequence& sequence, const Cutoff& cutoff,
                              const std::function<void()>& progress, bool takes_arguments = true) {
    using clock = std::chrono::steady_clock;
    auto start = clock::now();
    TimingSchedule schedule(options_, cutoff);
    std::vector<double> samples;
    int batch = schedule.first_batch();
    while (true) {
      if (!timed_batch(sequence, batch, samples, takes_arguments))
        throw EnvironmentError(fmt::format("{}: a launch that ran before was refused while timing",
                                           sequence.main.kernel->entry()));
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

  /// What the validation launches found so far.
  struct Validation {
    ValidationStats worst;
    std::string failure_reason;  // the first tolerance failure; empty: none yet
    LaunchStatus refusal;        // set with LaunchVerdict::refused
  };
  enum class LaunchVerdict { go_on, refused, trespass };

  /// One validation launch of input set `set`, run `run`: poisoned outputs
  /// and workspace, the launch, then memory integrity and the comparison
  /// (with the reference; after the first run, with the first run too).  A
  /// tolerance failure is recorded and validation goes on, so that the
  /// report holds every input kind's errors; a trespass ends it.
  /// With `launch_us`, events around the launch give its time there.
  LaunchVerdict validate_launch(const LaunchSequence& sequence, WorkspaceLease& workspace, int set, int run,
                                Validation& v, const std::function<void()>& progress,
                                double* launch_us = nullptr) {
    workload_.poison_outputs();
    workspace.poison(workload_.support(), workload_.stream());
    while (launch_us && events_.size() < 2) events_.emplace_back();
    if (launch_us) events_[0].record(workload_.stream());
    LaunchStatus status = sequence.issue(workload_.arguments(set), workload_.stream().get());
    if (!status.ok()) {
      v.refusal = status;
      return LaunchVerdict::refused;
    }
    if (launch_us) events_[1].record(workload_.stream());
    workload_.stream().synchronize();
    if (launch_us) *launch_us = 1000.0 * events_[1].elapsed_ms_since(events_[0]);
    if (progress) progress();
    std::optional<std::string> trespass = workload_.check_integrity(set);
    ValidationStats stats = workload_.compare(set);
    const bool first = v.worst.input_sets == 0;
    std::vector<KindErrors> per_kind = std::move(v.worst.per_kind);
    merge_kind_errors(per_kind, workload_.input_kind(set), stats);
    merge_worst(v.worst, stats, first);
    v.worst.per_kind = std::move(per_kind);
    v.worst.input_sets = set + 1;
    if (trespass) {
      // Memory outside the outputs was written: nothing else matters.
      v.worst.passed = false;
      v.failure_reason = fmt::format("input set {}: {}", set + 1, *trespass);
      return LaunchVerdict::trespass;
    }
    if (!stats.passed && v.failure_reason.empty())
      v.failure_reason = fmt::format("input set {} ({} inputs): {}", set + 1, to_string(workload_.input_kind(set)),
                                     *tolerance_failure(stats, workload_.tolerance()));
    if (run == 0) {
      workload_.keep_outputs();
      return LaunchVerdict::go_on;
    }
    ValidationStats again = workload_.compare_with_kept();
    if (!again.passed && v.failure_reason.empty())
      v.failure_reason = fmt::format("nondeterministic: input set {}, run {} differs from run 1: {}", set + 1,
                                     run + 1, *tolerance_failure(again, workload_.tolerance()));
    return LaunchVerdict::go_on;
  }

  void evaluate_into(const Candidate& candidate, const Cutoff& cutoff,
                     const std::function<void()>& progress, EvaluationResult& result) {
    auto refuse = [&](std::string reason) {
      result.outcome = Outcome::launch_error;
      result.reason = std::move(reason);
    };
    auto fail = [&](const LaunchStatus& status, std::string_view what) {
      LaunchFailure failure = launch_failure(status, what);
      result.outcome = failure.outcome;
      result.reason = std::move(failure.reason);
      result.context_lost = failure.context_lost;
    };

    CandidateKernels kernels;
    std::string load_refusal = kernels.load(candidate);
    if (kernels.main) {
      result.registers = kernels.main->attributes.registers;
      result.local_bytes = kernels.main->attributes.local_bytes;
    }
    if (!load_refusal.empty()) return refuse(std::move(load_refusal));
    // Limits the launch would break are named before the GPU is asked.
    LaunchReadiness readiness = kernels.ready(candidate, workload_.device());
    if (!readiness.refusal.empty()) return refuse(std::move(readiness.refusal));
    if (!readiness.opt_in.ok()) return fail(readiness.opt_in, "cannot allow the dynamic shared memory");
    WorkspaceLease workspace(workload_, candidate.workspace_bytes);
    workspace.install();

    // Validation: each input set runs validation_runs times; after every
    // launch the guards and inputs are checked, and every run after the
    // first must agree with the first within the tolerance.  The first
    // launch is also the warm-up, kept out of the timing.
    workload_.restore_integrity();
    Validation validation;
    std::vector<std::pair<int, int>> launches;  // (set, run), in order
    for (int set = 0; set < workload_.validation_sets(); ++set)
      for (int run = 0; run < validation_runs; ++run) launches.emplace_back(set, run);
    // With an active cutoff the candidate is timed after its first launch
    // (integrity checked, output within the tolerance), and validated in
    // full only if the timing is not cut: a slow candidate's other launches
    // would cost more than its timing and can no longer make it the best.
    const bool time_early = cutoff.active() && !options_.validate_first;
    // And its first launch is timed too: one far past the cutoff ends it
    // there, with no timed launch (judge_first_launch).
    const bool judge_first = time_early && options_.first_launch_cut > 0;
    std::optional<TimingStats> timing;
    for (std::size_t i = 0; i < launches.size(); ++i) {
      auto [set, run] = launches[i];
      double first_us = 0.0;
      if (LaunchVerdict v = validate_launch(kernels.sequence, workspace, set, run, validation, progress,
                                            i == 0 && judge_first ? &first_us : nullptr);
          v != LaunchVerdict::go_on) {
        if (v == LaunchVerdict::refused) return fail(validation.refusal, "the GPU refused the launch");
        result.validation = validation.worst;
        result.outcome = Outcome::wrong_result;
        result.reason = validation.failure_reason;
        return;
      }
      if (i != 0 || !time_early || !validation.failure_reason.empty()) continue;
      if (CutVerdict first = judge_first_launch(first_us, cutoff, options_); first.cut) {
        timing = summarize_times(
            {first_us}, options_.cache,
            fmt::format("CUDA events around the first validation launch (outputs and workspace poisoned, "
                        "no flush); 1 launch; cut on it: {:.2f}x the best so far, past {:g}x the cutoff "
                        "({:g}x); validated on 1 launch of {} (input set 1: {} inputs), not in full: cut",
                        first.ratio, options_.first_launch_cut, cutoff.factor, launches.size(),
                        to_string(workload_.input_kind(0))));
        timing->cut = true;
        break;
      }
      timing = time_until_done(kernels.sequence, cutoff, progress);
      // The timed launches may not write outside the outputs either (set 1
      // alone is timed, except with --cache rotate).
      for (int s = 0; s < workload_.validation_sets(); ++s)
        if (std::optional<std::string> trespass = workload_.check_integrity(s)) {
          validation.worst.passed = false;
          result.validation = validation.worst;
          result.outcome = Outcome::wrong_result;
          result.reason = fmt::format("input set {}, while timed: {}", s + 1, *trespass);
          return;
        }
      if (timing->cut) {
        timing->method += fmt::format("; validated on 1 launch of {} (input set 1: {} inputs), not in full: cut",
                                      launches.size(), to_string(workload_.input_kind(0)));
        break;
      }
    }
    validation.worst.passed = validation.failure_reason.empty();
    result.validation = validation.worst;
    if (!validation.worst.passed) {
      result.outcome = Outcome::wrong_result;
      result.reason = validation.failure_reason;
      return;
    }

    // Without an early timing, validation is complete before a cut can
    // happen: a cut candidate is validated in full, and its time is real,
    // only from fewer launches.
    if (!timing) timing = time_until_done(kernels.sequence, cutoff, progress);
    // Nothing real runs faster than a kernel that does nothing: such a time
    // means the measurement is broken, and it must not enter the results.
    if (timing->median_us < floor_.min_us * 0.97)
      throw EnvironmentError(fmt::format(
          "{}: measured {:.3f} µs (median), below the empty-kernel floor of {:.3f} µs (min) with "
          "the same method: the timing is broken, not the kernel fast",
          candidate.label, timing->median_us, floor_.min_us));
    result.timing = std::move(*timing);
    result.outcome = Outcome::ok;
  }

  Workload& workload_;
  TimingOptions options_;
  TimingStats floor_;
  std::vector<Event> events_;
  int rotation_ = 0;
};

Candidate make_candidate(const LaunchPlan& plan, std::string label, std::string cubin) {
  Candidate candidate;
  candidate.label = std::move(label);
  candidate.cubin = std::move(cubin);
  describe_steps(plan.steps, candidate);
  return candidate;
}

void describe_launch(const SearchSpace& space, const Config& config, const Shape& shape,
                     Candidate& candidate) {
  describe_steps(plan_launch(space, config, shape).steps, candidate);
}

LaunchSteps launch_steps(const Candidate& candidate) {
  return LaunchSteps{candidate.entry, candidate.geometry, candidate.prologue,
                     candidate.workspace_bytes};
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

void merge_kind_errors(std::vector<KindErrors>& per_kind, InputKind kind, const ValidationStats& stats) {
  auto it = std::find_if(per_kind.begin(), per_kind.end(), [kind](const KindErrors& k) { return k.kind == kind; });
  if (it == per_kind.end()) it = per_kind.insert(per_kind.end(), KindErrors{kind, 0.0, 0.0});
  // NaN outputs are counted apart (nonfinite); the worst finite error stays.
  it->relative_l2 = std::max(it->relative_l2, stats.relative_l2);
  it->max_abs = std::max(it->max_abs, stats.max_abs);
}

}  // namespace mlatune
