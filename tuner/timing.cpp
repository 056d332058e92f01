#include "tuner/timing.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune {

std::string_view to_string(CacheMode mode) {
  switch (mode) {
    case CacheMode::cold: return "cold";
    case CacheMode::rotate: return "rotate";
    case CacheMode::hot: return "hot";
  }
  return "unknown";
}

std::optional<CacheMode> parse_cache_mode(std::string_view text) {
  for (CacheMode mode : {CacheMode::cold, CacheMode::rotate, CacheMode::hot})
    if (to_string(mode) == text) return mode;
  return std::nullopt;
}

std::string_view cache_method_phrase(CacheMode mode) {
  switch (mode) {
    case CacheMode::cold: return "L2 flushed before each";
    case CacheMode::rotate: return "inputs rotated over";
    case CacheMode::hot: return "hot L2";
  }
  return "unknown";
}

std::optional<CacheMode> cache_mode_of_method(std::string_view method) {
  for (CacheMode mode : {CacheMode::cold, CacheMode::rotate, CacheMode::hot})
    if (method.find(cache_method_phrase(mode)) != std::string_view::npos) return mode;
  return std::nullopt;
}

double median_of(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

CutVerdict judge_cut(const std::vector<double>& samples, const Cutoff& cutoff, int min_samples) {
  CutVerdict verdict;
  if (!cutoff.active() || samples.empty() ||
      static_cast<int>(samples.size()) < std::max(1, min_samples))
    return verdict;
  verdict.median_us = median_of(samples);
  verdict.ratio = verdict.median_us / cutoff.best_us;
  verdict.cut = verdict.median_us > cutoff.limit_us();
  return verdict;
}

CutVerdict judge_first_launch(double first_us, const Cutoff& cutoff, const TimingOptions& options) {
  CutVerdict verdict;
  if (!cutoff.active() || options.validate_first || !(options.first_launch_cut > 0) ||
      !std::isfinite(first_us) || first_us < first_launch_floor_us)
    return verdict;
  verdict.median_us = first_us;
  verdict.ratio = first_us / cutoff.best_us;
  verdict.cut = first_us > options.first_launch_cut * cutoff.limit_us();
  return verdict;
}

TimingSchedule::TimingSchedule(TimingOptions options, Cutoff cutoff)
    : options_(options), cutoff_(cutoff) {}

TimingStop TimingSchedule::after_batch(const std::vector<double>& samples, double elapsed_ms) {
  const int n = static_cast<int>(samples.size());
  if (n >= options_.min_repetitions) {
    double median = median_of(samples);
    calm_ = previous_median_ > 0 && std::abs(median - previous_median_) <= options_.stability * median
                ? calm_ + 1
                : 0;
    previous_median_ = median;
    // A settled median is a full measurement even when it is far off the
    // best: it is kept as settled, not cut.
    if (calm_ >= 2) return stop_ = TimingStop::settled;
  }
  verdict_ = judge_cut(samples, cutoff_, options_.cut_min_samples);
  if (verdict_.cut) return stop_ = TimingStop::cut;
  if (n >= options_.max_repetitions) return stop_ = TimingStop::repetitions;
  if (elapsed_ms >= options_.budget_ms) {
    // A kernel so slow that the budget ends before cut_min_samples launches
    // is judged on the launches it had: past the cutoff, it is as hopeless
    // as one cut after five (and, being cut, skips the rest of its
    // validation: Evaluator::evaluate).  Each of those launches took
    // budget_ms / cut_min_samples or more, so scheduling noise cannot carry one
    // past a cutoff of several times the best.
    verdict_ = judge_cut(samples, cutoff_, 1);
    return stop_ = verdict_.cut ? TimingStop::cut : TimingStop::budget;
  }

  // Batches of about a tenth of the budget keep heartbeats frequent and the
  // stability checks a fixed share of the budget apart.
  double per_launch_ms = n > 0 ? elapsed_ms / n : 0.0;
  double batch = std::clamp(options_.budget_ms / 10.0 / std::max(per_launch_ms, 1e-3), 1.0, 64.0);
  int next = static_cast<int>(batch);
  // The first chance of a cut is taken at exactly cut_min_samples launches:
  // a batch sized by the budget would carry a slow candidate to 10 launches
  // or more before it could be cut.
  int limit = options_.max_repetitions;
  if (cutoff_.active() && n < options_.cut_min_samples) limit = std::min(limit, options_.cut_min_samples);
  next_batch_ = std::max(1, std::min(next, limit - n));
  return stop_ = TimingStop::more;
}

std::string TimingSchedule::stop_note(int launches) const {
  switch (stop_) {
    case TimingStop::more:
    case TimingStop::settled:
      return "";
    case TimingStop::budget:
      return fmt::format("the {:g} ms budget ran out after {} launches, before the median settled",
                         options_.budget_ms, launches);
    case TimingStop::repetitions:
      return fmt::format("stopped at the limit of {} launches, before the median settled",
                         options_.max_repetitions);
    case TimingStop::cut:
      return fmt::format("cut after {} launches{}: median {:.2f}x the best so far (cutoff {:g}x)", launches,
                         launches < options_.cut_min_samples
                             ? fmt::format(" (the {:g} ms budget ran out before {})", options_.budget_ms,
                                           options_.cut_min_samples)
                             : std::string(),
                         verdict_.ratio, cutoff_.factor);
  }
  return "";
}

TimingStats summarize_times(std::vector<double> samples, CacheMode cache, std::string method) {
  if (samples.empty()) throw EnvironmentError("no timing samples to summarize");
  std::sort(samples.begin(), samples.end());
  auto quantile = [&](double q) {
    // Linear interpolation between the two nearest ranks.
    double position = q * static_cast<double>(samples.size() - 1);
    auto lower = static_cast<std::size_t>(std::floor(position));
    std::size_t upper = std::min(lower + 1, samples.size() - 1);
    double fraction = position - static_cast<double>(lower);
    return samples[lower] + fraction * (samples[upper] - samples[lower]);
  };
  TimingStats stats;
  stats.median_us = quantile(0.5);
  stats.min_us = samples.front();
  stats.p90_us = quantile(0.9);
  stats.spread = stats.median_us > 0 ? (stats.p90_us - stats.min_us) / stats.median_us : 0.0;
  stats.count = static_cast<int>(samples.size());
  stats.cache = cache;
  stats.method = std::move(method);
  return stats;
}

}  // namespace mlatune
