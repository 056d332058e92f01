#include "tuner/timing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "core/error.h"

namespace mlatune {
namespace {

TEST(Timing, SummaryOfKnownSamples) {
  // Order must not matter: the summary sorts.
  std::vector<double> samples = {10, 3, 7, 1, 5, 9, 2, 8, 4, 6};
  TimingStats stats = summarize_times(samples, CacheMode::rotate, "test method");
  EXPECT_DOUBLE_EQ(stats.median_us, 5.5);
  EXPECT_DOUBLE_EQ(stats.min_us, 1.0);
  EXPECT_DOUBLE_EQ(stats.p90_us, 9.1);  // rank 8.1 of 0..9
  EXPECT_DOUBLE_EQ(stats.spread, (9.1 - 1.0) / 5.5);
  EXPECT_EQ(stats.count, 10);
  EXPECT_EQ(stats.cache, CacheMode::rotate);
  EXPECT_EQ(stats.method, "test method");
}

TEST(Timing, SingleSample) {
  TimingStats stats = summarize_times({4.25}, CacheMode::cold, "");
  EXPECT_DOUBLE_EQ(stats.median_us, 4.25);
  EXPECT_DOUBLE_EQ(stats.p90_us, 4.25);
  EXPECT_DOUBLE_EQ(stats.spread, 0.0);
}

TEST(Timing, NoSamplesIsAnError) {
  EXPECT_THROW(summarize_times({}, CacheMode::hot, ""), EnvironmentError);
}

TEST(Timing, CacheModeNames) {
  for (CacheMode mode : {CacheMode::cold, CacheMode::rotate, CacheMode::hot})
    EXPECT_EQ(parse_cache_mode(to_string(mode)), mode);
  EXPECT_EQ(to_string(CacheMode::cold), "cold");
  EXPECT_FALSE(parse_cache_mode("warm").has_value());
}

// ---- cache methods in timing method texts --------------------------------------

TEST(CacheMethod, EachModesPhraseNamesItAndOnlyIt) {
  for (CacheMode mode : {CacheMode::cold, CacheMode::rotate, CacheMode::hot}) {
    const std::string text = "CUDA events around each launch, " + std::string(cache_method_phrase(mode)) + " (...); 5 launches";
    EXPECT_EQ(cache_mode_of_method(text), mode) << text;
  }
  EXPECT_FALSE(cache_mode_of_method("replayed from h200_sweeps.csv"));
  EXPECT_FALSE(cache_mode_of_method(""));
}

// ---- the cut decision ---------------------------------------------------------------

TEST(TimingCut, TooFewSamplesNeverCut) {
  Cutoff cutoff{100.0, 3.0};
  CutVerdict verdict = judge_cut({900, 900, 900, 900}, cutoff, 5);
  EXPECT_FALSE(verdict.cut);
  EXPECT_EQ(verdict.median_us, 0.0);
  EXPECT_TRUE(judge_cut({900, 900, 900, 900, 900}, cutoff, 5).cut);
}

TEST(TimingCut, MedianAboveFactorTimesBestIsCut) {
  CutVerdict verdict = judge_cut({420, 405, 410, 1900, 400}, Cutoff{100.0, 3.0}, 5);
  EXPECT_TRUE(verdict.cut);
  EXPECT_DOUBLE_EQ(verdict.median_us, 410.0);
  EXPECT_DOUBLE_EQ(verdict.ratio, 4.1);
}

TEST(TimingCut, AtOrBelowTheLimitGoesOn) {
  // Exactly 3x is not above it.
  CutVerdict at = judge_cut({300, 300, 300, 300, 300}, Cutoff{100.0, 3.0}, 5);
  EXPECT_FALSE(at.cut);
  EXPECT_DOUBLE_EQ(at.ratio, 3.0);
  EXPECT_FALSE(judge_cut({120, 110, 115, 118, 112}, Cutoff{100.0, 3.0}, 5).cut);
}

TEST(TimingCut, TwoOutliersOfFiveDoNotCut) {
  // The median of five ignores two wild launches.
  EXPECT_FALSE(judge_cut({110, 5000, 112, 4000, 111}, Cutoff{100.0, 3.0}, 5).cut);
  EXPECT_TRUE(judge_cut({110, 5000, 3500, 4000, 111}, Cutoff{100.0, 3.0}, 5).cut);
}

TEST(TimingCut, InactiveCutoffNeverCuts) {
  std::vector<double> slow(20, 1e6);
  EXPECT_FALSE(judge_cut(slow, Cutoff{}, 5).cut);
  EXPECT_FALSE(judge_cut(slow, Cutoff{100.0, 0.0}, 5).cut);   // --cutoff 0
  EXPECT_FALSE(judge_cut(slow, Cutoff{0.0, 3.0}, 5).cut);     // nothing measured yet
  EXPECT_FALSE(Cutoff{}.active());
  EXPECT_DOUBLE_EQ((Cutoff{250.0, 3.0}.limit_us()), 750.0);
}

TEST(Timing, MedianOfOddEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median_of({}), 0.0);
}

// ---- the schedule, on a simulated GPU ---------------------------------------------

/// A kernel as the schedule sees it: launch k takes kernel_us × (1 + noise
/// × u_k), u_k uniform in [-1, 1] from a fixed-seed mt19937 (whose output
/// the standard fixes), plus `overhead_us` of flushing and launching that the
/// wall clock sees but the events do not.
struct SimulatedKernel {
  double kernel_us = 1000.0;
  double noise = 0.003;
  double overhead_us = 60.0;
  /// Overrides kernel_us from this launch on (a kernel that slows down).
  int slow_from = -1;
  double slow_us = 0.0;
};

struct SimulatedPhase {
  TimingStop stop = TimingStop::more;
  int launches = 0;
  double elapsed_ms = 0.0;
  std::vector<int> checks;  // sample counts at each after_batch()
  std::string note;
};

SimulatedPhase simulate(const TimingOptions& options, const Cutoff& cutoff, const SimulatedKernel& k) {
  std::mt19937 random(12345);
  TimingSchedule schedule(options, cutoff);
  std::vector<double> samples;
  SimulatedPhase phase;
  int batch = schedule.first_batch();
  while (true) {
    for (int i = 0; i < batch; ++i) {
      double u = 2.0 * static_cast<double>(random() - random.min()) /
                     static_cast<double>(random.max() - random.min()) -
                 1.0;
      double base = k.slow_from >= 0 && static_cast<int>(samples.size()) >= k.slow_from ? k.slow_us
                                                                                          : k.kernel_us;
      double t = base * (1.0 + k.noise * u);
      samples.push_back(t);
      phase.elapsed_ms += (t + k.overhead_us) / 1000.0;
    }
    phase.checks.push_back(static_cast<int>(samples.size()));
    phase.stop = schedule.after_batch(samples, phase.elapsed_ms);
    if (phase.stop != TimingStop::more) break;
    batch = schedule.next_batch();
    EXPECT_GE(batch, 1);
    if (static_cast<int>(samples.size()) > 100000) break;  // a runaway schedule fails below
  }
  phase.launches = static_cast<int>(samples.size());
  phase.note = schedule.stop_note(phase.launches);
  return phase;
}

TEST(TimingSchedule, TwoMillisecondKernelSettlesInTensOfLaunches) {
  SimulatedPhase phase = simulate(TimingOptions{}, {}, SimulatedKernel{2000.0, 0.003, 60.0});
  EXPECT_EQ(phase.stop, TimingStop::settled);
  EXPECT_GE(phase.launches, TimingOptions{}.min_repetitions);
  EXPECT_LE(phase.launches, 30);
  EXPECT_LT(phase.elapsed_ms, TimingOptions{}.budget_ms);
  EXPECT_EQ(phase.note, "");
}

TEST(TimingSchedule, KernelsUpToSevenMillisecondsSettleInsideTheBudget) {
  // The default budget's comment promises this: a steady kernel of w ms per
  // launch settles within 10 w + 0.3 budget, so up to about 7 ms inside it.
  TimingOptions options;
  for (double kernel_us : {300.0, 1000.0, 2000.0, 4000.0, 7000.0}) {
    SimulatedPhase phase = simulate(options, {}, SimulatedKernel{kernel_us, 0.003, 60.0});
    EXPECT_EQ(phase.stop, TimingStop::settled) << kernel_us << " us: " << phase.note;
    double w_ms = (kernel_us + 60.0) / 1000.0;
    EXPECT_LE(phase.elapsed_ms, 10 * w_ms + 0.3 * options.budget_ms) << kernel_us << " us";
  }
}

TEST(TimingSchedule, VerySlowKernelStopsAtTheBudgetUnsettled) {
  TimingOptions options;
  SimulatedPhase phase = simulate(options, {}, SimulatedKernel{30000.0, 0.003, 60.0});
  EXPECT_EQ(phase.stop, TimingStop::budget);
  EXPECT_EQ(phase.launches, 4);  // 30 ms each: the fourth passes 100 ms
  EXPECT_EQ(phase.note, "the 100 ms budget ran out after 4 launches, before the median settled");
}

TEST(TimingSchedule, FastKernelGetsManyLaunches) {
  // Cheap launches: batches of 64, so a settled median rests on well over a hundred.
  SimulatedPhase phase = simulate(TimingOptions{}, {}, SimulatedKernel{5.0, 0.02, 40.0});
  EXPECT_EQ(phase.stop, TimingStop::settled);
  EXPECT_GE(phase.launches, 100);
  EXPECT_LE(phase.launches, TimingOptions{}.max_repetitions);
}

TEST(TimingSchedule, FirstChanceOfACutFallsExactlyOnCutMinSamples) {
  // Without a cutoff the second batch is sized by the budget (10 ms of 0.56 ms
  // launches); with one it stops at cut_min_samples for the first decision.
  SimulatedKernel k{500.0, 0.003, 60.0};
  SimulatedPhase plain = simulate(TimingOptions{}, {}, k);
  ASSERT_GE(plain.checks.size(), 2u);
  EXPECT_EQ(plain.checks[0], 1);
  EXPECT_EQ(plain.checks[1], 18);
  SimulatedPhase with_cutoff = simulate(TimingOptions{}, Cutoff{400.0, 3.0}, k);
  ASSERT_GE(with_cutoff.checks.size(), 3u);
  EXPECT_EQ(with_cutoff.checks[0], 1);
  EXPECT_EQ(with_cutoff.checks[1], 5);
  EXPECT_GT(with_cutoff.checks[2], 10);
  EXPECT_EQ(with_cutoff.stop, TimingStop::settled);  // 1.25x the best: never cut
}

TEST(TimingSchedule, HopelessCandidateIsCutAfterFiveLaunches) {
  SimulatedPhase phase = simulate(TimingOptions{}, Cutoff{1000.0, 3.0}, SimulatedKernel{4000.0, 0.0, 60.0});
  EXPECT_EQ(phase.stop, TimingStop::cut);
  EXPECT_EQ(phase.launches, 5);
  EXPECT_EQ(phase.note, "cut after 5 launches: median 4.00x the best so far (cutoff 3x)");
}

TEST(TimingSchedule, SlowHopelessCandidateIsCutWhenTheBudgetRunsOut) {
  // 30 ms launches: the 100 ms budget ends after 4, before the fifth could
  // decide; 30x the best is cut on those four, not timed as a budget stop.
  SimulatedPhase phase = simulate(TimingOptions{}, Cutoff{1000.0, 3.0}, SimulatedKernel{30000.0, 0.003, 60.0});
  EXPECT_EQ(phase.stop, TimingStop::cut);
  EXPECT_EQ(phase.launches, 4);
  EXPECT_EQ(phase.note.rfind("cut after 4 launches (the 100 ms budget ran out before 5): median 30.", 0), 0u)
      << phase.note;
  // 250 ms launches: one launch spends the budget, and decides.
  SimulatedPhase one = simulate(TimingOptions{}, Cutoff{1000.0, 3.0}, SimulatedKernel{250000.0, 0.0, 60.0});
  EXPECT_EQ(one.stop, TimingStop::cut);
  EXPECT_EQ(one.launches, 1);
  // The same slow kernel within the cutoff (the best is 15 ms) stops at
  // the budget, as without a cutoff.
  SimulatedPhase near = simulate(TimingOptions{}, Cutoff{15000.0, 3.0}, SimulatedKernel{30000.0, 0.003, 60.0});
  EXPECT_EQ(near.stop, TimingStop::budget);
  EXPECT_EQ(near.launches, 4);
}

TEST(TimingSchedule, CandidateThatSlowsPastTheCutoffIsCutLater) {
  // 2.9x for the first ten launches, then 5x: cut once the median passes 3x.
  SimulatedKernel k{2900.0, 0.01, 60.0};
  k.slow_from = 10;
  k.slow_us = 5000.0;
  TimingOptions options;
  options.stability = 0.0;  // a noisy median never stands still: the cut alone decides
  SimulatedPhase phase = simulate(options, Cutoff{1000.0, 3.0}, k);
  EXPECT_EQ(phase.stop, TimingStop::cut);
  EXPECT_GT(phase.launches, 10);
}

TEST(TimingSchedule, CutoffZeroTimesHopelessCandidatesInFull) {
  SimulatedPhase phase = simulate(TimingOptions{}, Cutoff{1000.0, 0.0}, SimulatedKernel{4000.0, 0.003, 60.0});
  EXPECT_EQ(phase.stop, TimingStop::settled);
  EXPECT_GE(phase.launches, TimingOptions{}.min_repetitions);
}

TEST(TimingSchedule, NoisyKernelNeverClaimsToHaveSettled) {
  TimingOptions options;
  options.max_repetitions = 40;
  options.budget_ms = 1e9;
  SimulatedPhase phase = simulate(options, {}, SimulatedKernel{100.0, 0.5, 60.0});
  EXPECT_EQ(phase.stop, TimingStop::repetitions);
  EXPECT_EQ(phase.launches, 40);
  EXPECT_EQ(phase.note, "stopped at the limit of 40 launches, before the median settled");
}

TEST(TimingSchedule, SettledWinsOverCutOnceMeasuredInFull) {
  // A candidate that settled is a full measurement, even when far off the
  // best: it reports settled, not cut.  With a cut after 5 disabled by a
  // high minimum, the first decision point is the stability check.
  TimingOptions options;
  options.cut_min_samples = 1000;
  SimulatedPhase phase = simulate(options, Cutoff{1000.0, 3.0}, SimulatedKernel{4000.0, 0.0, 60.0});
  EXPECT_EQ(phase.stop, TimingStop::settled);
}


TEST(FirstLaunchCut, OnlyFarPastTheLimitAndOnlyForLongLaunches) {
  TimingOptions options;  // first_launch_cut 2: cut above 2 × 3 × best
  Cutoff cutoff{800.0, 3.0};
  // 6x the best is the line: 4801 µs is past it, 4799 µs not.
  CutVerdict past = judge_first_launch(4801.0, cutoff, options);
  EXPECT_TRUE(past.cut);
  EXPECT_DOUBLE_EQ(past.median_us, 4801.0);
  EXPECT_NEAR(past.ratio, 6.00125, 1e-9);
  EXPECT_FALSE(judge_first_launch(4799.0, cutoff, options).cut);
  // Between the cutoff and twice it the timing decides, not the first launch.
  EXPECT_FALSE(judge_first_launch(3000.0, cutoff, options).cut);
  // A short kernel is never judged on one launch, however far past the limit.
  Cutoff tiny{5.0, 3.0};
  EXPECT_FALSE(judge_first_launch(999.0, tiny, options).cut);
  EXPECT_TRUE(judge_first_launch(1000.5, tiny, options).cut);
}

TEST(FirstLaunchCut, OffWithoutACutoffWithFactorZeroAndWithValidateFirst) {
  TimingOptions options;
  EXPECT_FALSE(judge_first_launch(1e6, Cutoff{}, options).cut);
  EXPECT_FALSE(judge_first_launch(1e6, Cutoff{100.0, 0.0}, options).cut);
  options.first_launch_cut = 0;
  EXPECT_FALSE(judge_first_launch(1e6, Cutoff{100.0, 3.0}, options).cut);
  options.first_launch_cut = 2.0;
  options.validate_first = true;
  EXPECT_FALSE(judge_first_launch(1e6, Cutoff{100.0, 3.0}, options).cut);
  options.validate_first = false;
  EXPECT_TRUE(judge_first_launch(1e6, Cutoff{100.0, 3.0}, options).cut);
  EXPECT_FALSE(judge_first_launch(std::nan(""), Cutoff{100.0, 3.0}, options).cut);
}

}  // namespace
}  // namespace mlatune
