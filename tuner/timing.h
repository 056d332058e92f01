// How a candidate's time is measured and summarized: the cache method, the
// repetition policy, and the statistics kept with every measurement.  No CUDA
// here: these values travel between the tuner, the worker and the store.
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

/// How long to keep timing one candidate.
struct TimingOptions {
  CacheMode cache = CacheMode::cold;
  double budget_ms = 200.0;   // wall time per candidate for the timing phase
  int max_repetitions = 2000;
  int min_repetitions = 10;
  double stability = 0.01;    // stop when the median moves less than this (relative)
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
  /// "cuda-events per launch, L2 flushed (120 MiB written) before each; 412 launches"
  std::string method;
};

/// Computes the statistics of a list of times (µs); `samples` must not be empty.
TimingStats summarize_times(std::vector<double> samples_us, CacheMode cache, std::string method);

}  // namespace mlatune
