#include "tuner/strategies/annealing.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "tuner/strategies/untried.h"

namespace mlatune::strategies {
namespace {

// Works on log(time), so that the temperature is a relative slowdown: at
// temperature T a move that is 100*T % slower is accepted with probability 1/e.
// A failed config is never accepted as the current point.  When the current
// point has no untried valid neighbour, or the best has not improved for a
// while, it restarts: alternately from the best config seen that still has
// untried neighbours (intensify) and from a fresh random config (diversify).
class Annealing final : public Strategy {
 public:
  Annealing(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
            const StrategyMemory& memory)
      : space_(space), shape_(shape), untried_(space, shape, memory), rng_(seed) {}

  std::optional<Config> next() override {
    if (untried_.remaining() == 0) return std::nullopt;
    if (current_ && since_improvement_ < kPatience) {
      if (auto move = untried_neighbour(current_->config)) return propose(std::move(*move));
    }
    // Restart.
    since_improvement_ = 0;
    temperature_ = kStartTemperature;
    current_.reset();
    if (++restarts_ % 2 == 0) {
      // A config whose neighbours are all tried stays so: drop it, so that
      // restarts late in a long run do not rescan it.
      for (auto at = ok_by_time_.begin(); at != ok_by_time_.end(); at = ok_by_time_.erase(at)) {
        if (auto move = untried_neighbour(at->second)) {
          current_ = Point{at->second, at->first};
          return propose(std::move(*move));
        }
      }
    }
    auto c = untried_.draw(rng_);
    if (!c) return std::nullopt;
    return propose(std::move(*c));
  }

  void observe(const Config& config, std::optional<double> time_us) override {
    if (!time_us) {
      ++since_improvement_;
      return;
    }
    const double log_time = std::log(std::max(*time_us, 1e-12));
    ok_by_time_.emplace(log_time, config);
    if (!best_ || log_time < *best_) {
      best_ = log_time;
      since_improvement_ = 0;
    } else {
      ++since_improvement_;
    }
    if (!current_) {
      current_ = Point{config, log_time};
    } else {
      const double delta = log_time - current_->log_time;
      if (delta <= 0 || uniform_unit(rng_) < std::exp(-delta / temperature_))
        current_ = Point{config, log_time};
    }
    temperature_ = std::max(kMinTemperature, temperature_ * kCooling);
  }

 private:
  static constexpr double kStartTemperature = 0.05;
  static constexpr double kMinTemperature = 0.002;
  static constexpr double kCooling = 0.95;
  static constexpr int kPatience = 40;

  struct Point {
    Config config;
    double log_time;
  };

  std::optional<Config> untried_neighbour(const Config& from) {
    std::vector<Config> options;
    for (auto& c : neighbours(space_, shape_, from))
      if (!untried_.tried(c)) options.push_back(std::move(c));
    if (options.empty()) return std::nullopt;
    return options[uniform_below(rng_, options.size())];
  }

  Config propose(Config c) {
    untried_.mark(c);
    return c;
  }

  const SearchSpace& space_;
  Shape shape_;
  Untried untried_;
  std::mt19937_64 rng_;
  std::optional<Point> current_;
  std::optional<double> best_;
  std::multimap<double, Config> ok_by_time_;  // restart points, fastest first
  double temperature_ = kStartTemperature;
  int since_improvement_ = 0;
  int restarts_ = 0;
};

}  // namespace

std::unique_ptr<Strategy> make_annealing(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
                                         const StrategyMemory& memory,
                                         const StrategyContext& /*context: unused*/) {
  return std::make_unique<Annealing>(space, shape, seed, memory);
}

}  // namespace mlatune::strategies
