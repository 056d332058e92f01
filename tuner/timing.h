// How a candidate's time is measured and summarized: the cache method, the
// repetition policy (when a timing phase stops, and why), and the statistics
// kept with every measurement.  No CUDA here: these values travel between the
// tuner, the worker and the store, and the policy is a pure function of the
// samples and the elapsed time, so that it can be tested without a GPU.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlatune {

/// What happens to the L2 cache before each timed launch.
enum class CacheMode {
  cold,    // a buffer of at least twice the L2 size is written first
  rotate,  // inputs rotate over enough sets to exceed twice the L2 size
  hot,     // nothing: repeated launches may hit in the L2
};
std::string_view to_string(CacheMode);
std::optional<CacheMode> parse_cache_mode(std::string_view);
/// The words that name `mode` in a timing method text (TimingStats::method,
/// as the evaluator writes it), and the mode such a text names (nullopt:
/// none, e.g. a replayed time).
std::string_view cache_method_phrase(CacheMode mode);
std::optional<CacheMode> cache_mode_of_method(std::string_view method);

/// How long to keep timing one candidate.
struct TimingOptions {
  CacheMode cache = CacheMode::cold;
  /// Wall time per candidate for the timing phase: the cap for a candidate
  /// whose median does not settle.  A settled median stops sooner: after
  /// min_repetitions and two calm checks one batch (about budget_ms / 10 of
  /// launches) apart, so a kernel of w ms per launch settles within about
  /// 10 w + 0.3 budget_ms (a 2 ms kernel: ~20 launches, ~43 ms).  At 100 ms
  /// every kernel up to about 7 ms per launch can settle inside the budget;
  /// slower ones are rarely within reach of the best, and are cut (Cutoff)
  /// or capped at a few launches.  200 ms spent 30 ms more on every settled
  /// candidate between 0.3 and 7 ms and left S2 (most candidates 1.6 ms or
  /// slower) GPU-bound at 8 configs/s.
  double budget_ms = 100.0;
  int max_repetitions = 2000;
  int min_repetitions = 10;
  double stability = 0.01;    // stop when the median moves less than this (relative)
  /// Launches timed before a candidate may be cut (Cutoff): a median of 5
  /// cold launches survives two outliers.  A candidate whose launches spend
  /// the budget before that is judged on the launches it had.
  int cut_min_samples = 5;
  /// With an active cutoff, a candidate is timed right after its first
  /// validation launch and validated in full only when the timing is not
  /// cut (Evaluator::evaluate).  True: every candidate is validated in full
  /// before it is timed, as before 2026-12-03 (slower: a slow candidate's
  /// validation launches cost more than its cut timing).
  bool validate_first = false;
  /// With that early timing, the first validation launch is timed too, and
  /// a candidate whose first launch already took more than this many times
  /// the cutoff's limit (and at least first_launch_floor_us) is cut on it,
  /// with no timed launch at all (judge_first_launch).  0: never.
  double first_launch_cut = 2.0;
};

/// Below this a first launch is never judged alone: a first launch may pay
/// for a cold instruction cache, TLB misses and the launch latency, tens of
/// microseconds that could double a short kernel's time but not a
/// millisecond's.
inline constexpr double first_launch_floor_us = 1000.0;

/// An early end for a candidate that cannot win: once its running median
/// exceeds `factor` × the fastest median measured so far at the shape, more
/// launches would only refine the time of a config that will never be
/// chosen.  Inactive (never cuts) unless both numbers are positive.
struct Cutoff {
  double best_us = 0.0;  // fastest median so far at this shape
  double factor = 0.0;   // above 1, or 0: no cut
  bool active() const { return best_us > 0 && factor > 0; }
  double limit_us() const { return best_us * factor; }
};

/// Whether the samples so far show a hopeless candidate.
struct CutVerdict {
  bool cut = false;
  double median_us = 0.0;  // of the samples judged; 0 when too few
  double ratio = 0.0;      // median / best so far; 0 when too few or inactive
};

/// The cut decision: at least `min_samples` samples, and their median above
/// cutoff.limit_us().  Never cuts with an inactive cutoff.
CutVerdict judge_cut(const std::vector<double>& samples_us, const Cutoff& cutoff, int min_samples);

/// The cut decision on a candidate's first validation launch alone (not
/// L2-flushed, outputs poisoned, and the first launch of its module, so
/// possibly slower than its timed launches, never by much past a
/// millisecond): cut when `first_us` is at least first_launch_floor_us and
/// above options.first_launch_cut × cutoff.limit_us().  Never cuts with an
/// inactive cutoff, a factor of 0, or with validate_first.
CutVerdict judge_first_launch(double first_us, const Cutoff& cutoff, const TimingOptions& options);

/// The median of `values` (mean of the middle two for an even count); 0 when empty.
double median_of(std::vector<double> values);

/// Why a timing phase ended.
enum class TimingStop {
  more,         // not ended: time another batch
  settled,      // the median moved less than the stability threshold twice in a row
  budget,       // the time budget ran out first
  repetitions,  // max_repetitions were taken first
  cut,          // the running median passed the cutoff (Cutoff)
};

/// The repetition policy of one timing phase as a state machine: the
/// evaluator times first_batch() launches, then calls after_batch() with
/// every sample so far and the phase's elapsed wall time, and times
/// next_batch() more until it says stop.
class TimingSchedule {
 public:
  explicit TimingSchedule(TimingOptions options, Cutoff cutoff = {});

  /// One launch: until a launch's duration is known, a slow kernel must not
  /// outlast a heartbeat step.
  int first_batch() const { return 1; }
  TimingStop after_batch(const std::vector<double>& samples_us, double elapsed_ms);
  /// Launches in the next batch (valid after after_batch() said more).
  int next_batch() const { return next_batch_; }
  TimingStop stop() const { return stop_; }
  /// The cut decision that ended the phase (stop() == cut).
  const CutVerdict& verdict() const { return verdict_; }
  /// Why the phase ended, for the method text; empty when it settled.
  /// E.g. "cut after 5 launches: median 4.1x the best so far (cutoff 3x)".
  std::string stop_note(int launches) const;

 private:
  TimingOptions options_;
  Cutoff cutoff_;
  double previous_median_ = -1.0;
  int calm_ = 0;
  int next_batch_ = 1;
  TimingStop stop_ = TimingStop::more;
  CutVerdict verdict_;
};

/// Timing of one candidate: statistics of per-launch CUDA-event times.
struct TimingStats {
  double median_us = 0.0;
  double min_us = 0.0;
  double p90_us = 0.0;
  /// (p90 - min) / median: how widely the launches scattered.
  double spread = 0.0;
  int count = 0;
  CacheMode cache = CacheMode::cold;
  /// Whether the median settled before the budget ran out.
  bool stable = false;
  /// Timing ended early because the candidate was hopeless (Cutoff): a real
  /// measurement from fewer launches, never stable.
  bool cut = false;
  /// "cuda-events per launch, L2 flushed (120 MiB written) before each; 412 launches"
  std::string method;
};

/// Computes the statistics of a list of times (µs); `samples` must not be empty.
TimingStats summarize_times(std::vector<double> samples_us, CacheMode cache, std::string method);

}  // namespace mlatune
