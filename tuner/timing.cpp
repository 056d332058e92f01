#include "tuner/timing.h"

#include <algorithm>
#include <cmath>

#include "tuner/error.h"

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
