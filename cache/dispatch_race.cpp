#include "cache/dispatch_race.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace mlatune {

RaceBook::RaceBook(std::size_t runners, std::size_t samples)
    : samples_(samples), times_(runners), in_flight_(runners, 0) {
  if (runners == 0 || samples == 0) throw InternalError("RaceBook needs at least one runner and one sample");
}

std::optional<std::size_t> RaceBook::next_to_time() const {
  std::optional<std::size_t> best;
  std::size_t fewest = samples_;
  for (std::size_t i = 0; i < times_.size(); ++i) {
    const std::size_t taken = times_[i].size() + in_flight_[i];
    if (taken < fewest) {
      fewest = taken;
      best = i;
    }
  }
  return best;
}

void RaceBook::started(std::size_t runner) { ++in_flight_.at(runner); }

void RaceBook::finished(std::size_t runner, double microseconds) {
  if (in_flight_.at(runner) == 0) throw InternalError("RaceBook: a time arrived for a launch never started");
  --in_flight_[runner];
  times_[runner].push_back(microseconds);
}

void RaceBook::dropped(std::size_t runner) {
  if (in_flight_.at(runner) == 0) throw InternalError("RaceBook: a launch dropped that never started");
  --in_flight_[runner];
}

void RaceBook::disqualify(std::size_t runner) {
  times_.at(runner).assign(samples_, std::numeric_limits<double>::infinity());
}

bool RaceBook::settled() const {
  return std::all_of(times_.begin(), times_.end(), [&](const auto& t) { return t.size() >= samples_; });
}

double RaceBook::median_us(std::size_t runner) const {
  std::vector<double> t = times_.at(runner);
  if (t.empty()) return 0;
  const std::size_t middle = t.size() / 2;
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(middle), t.end());
  if (t.size() % 2) return t[middle];
  const double upper = t[middle];
  return (*std::max_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(middle)) + upper) / 2;
}

std::size_t RaceBook::leader() const {
  // Ranks: a finite median (lowest first), then no time yet (earliest
  // first), then disqualified.
  auto rank = [&](std::size_t i) {
    if (times_[i].empty()) return 1;
    return std::isinf(median_us(i)) ? 2 : 0;
  };
  std::size_t best = 0;
  for (std::size_t i = 1; i < times_.size(); ++i) {
    const int r = rank(i), b = rank(best);
    if (r < b || (r == 0 && b == 0 && median_us(i) < median_us(best))) best = i;
  }
  return best;
}

std::size_t RaceBook::in_flight() const { return std::accumulate(in_flight_.begin(), in_flight_.end(), std::size_t{0}); }

}  // namespace mlatune
