#include "tuner/strategies/model.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>
#include <set>

#include "tuner/strategies/ridge.h"
#include "tuner/strategies/untried.h"

namespace mlatune::strategies {
namespace {

// A few random configs first, then the untried config the surrogate predicts
// fastest, with a small chance of a random one instead (exploration).  The
// candidates are every untried valid config when the space is small enough to
// enumerate, else a fresh random pool plus the neighbours of the best so far.
// The fit is redone when the observations have grown by an eighth, so a long
// run costs a few dozen fits, not one per observation.
class ModelBased final : public Strategy {
 public:
  ModelBased(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
             const StrategyMemory& memory)
      : space_(space),
        shape_(shape),
        untried_(space, shape, memory),
        rng_(seed),
        surrogate_(space) {}

  std::optional<Config> next() override {
    if (untried_.remaining() == 0) return std::nullopt;
    if (observations_.size() < kInitialRandom || uniform_unit(rng_) < kExploration) {
      auto c = untried_.draw(rng_);
      if (c) untried_.mark(*c);
      return c;
    }
    if (observations_.size() >= fitted_at_ + std::max<std::size_t>(1, fitted_at_ / 8)) refit();
    while (ranked_ < ranking_.size()) {
      const Config& c = candidates()[ranking_[ranked_++]];
      if (!untried_.tried(c)) {
        untried_.mark(c);
        return c;
      }
    }
    // Every candidate of the pool is tried (large spaces only).
    auto c = untried_.draw(rng_);
    if (c) untried_.mark(*c);
    return c;
  }

  void observe(const Config& config, std::optional<double> time_us) override {
    if (time_us) {
      double y = std::log(std::max(*time_us, 1e-12));
      slowest_ = std::max(slowest_, y);
      observations_.push_back({config, y});
    } else {
      observations_.push_back({config, std::nullopt});
    }
  }

 private:
  static constexpr std::size_t kInitialRandom = 10;
  static constexpr double kExploration = 0.05;
  static constexpr std::size_t kPoolSize = 2000;
  // A failed config counts as this factor slower than the slowest measured.
  static constexpr double kFailurePenalty = 1.3862943611198906;  // log(4)

  void refit() {
    std::vector<std::pair<Config, double>> data;
    data.reserve(observations_.size());
    for (const auto& [c, y] : observations_)
      data.push_back({c, y ? *y : slowest_ + kFailurePenalty});
    surrogate_.fit(data);
    fitted_at_ = observations_.size();
    if (!untried_.all()) refresh_pool(data);
    // Predictions change only here, so rank the candidates once per fit;
    // next() walks the ranking, skipping what was tried since.
    const auto& pool = candidates();
    std::vector<std::pair<double, std::size_t>> predicted;
    predicted.reserve(pool.size());
    for (std::size_t i = 0; i < pool.size(); ++i)
      if (!untried_.tried(pool[i])) predicted.push_back({surrogate_.predict(pool[i]), i});
    std::sort(predicted.begin(), predicted.end());
    ranking_.clear();
    for (const auto& [y, i] : predicted) ranking_.push_back(i);
    ranked_ = 0;
  }

  const std::vector<Config>& candidates() const {
    const auto* all = untried_.all();
    return all ? *all : pool_;
  }

  void refresh_pool(const std::vector<std::pair<Config, double>>& data) {
    std::vector<Config> drawn = space_.sample_many(shape_, rng_, kPoolSize);
    std::set<Config> pool(std::make_move_iterator(drawn.begin()), std::make_move_iterator(drawn.end()));
    std::vector<std::pair<double, Config>> by_time;
    for (const auto& [c, y] : data) by_time.push_back({y, c});
    std::sort(by_time.begin(), by_time.end());
    for (std::size_t i = 0; i < std::min<std::size_t>(5, by_time.size()); ++i)
      for (auto& c : neighbours(space_, shape_, by_time[i].second)) pool.insert(std::move(c));
    pool_.assign(pool.begin(), pool.end());
  }

  const SearchSpace& space_;
  Shape shape_;
  Untried untried_;
  std::mt19937_64 rng_;
  RidgeSurrogate surrogate_;
  std::vector<std::pair<Config, std::optional<double>>> observations_;
  double slowest_ = 0;
  std::size_t fitted_at_ = 0;
  std::vector<Config> pool_;          // candidates, when the space is not held whole
  std::vector<std::size_t> ranking_;  // candidates by prediction, fastest first
  std::size_t ranked_ = 0;            // ranking_ before this was walked
};

}  // namespace

std::unique_ptr<Strategy> make_model(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
                                     const StrategyMemory& memory,
                                     const StrategyContext& /*context: unused*/) {
  return std::make_unique<ModelBased>(space, shape, seed, memory);
}

}  // namespace mlatune::strategies
