#include "tuner/strategies/random.h"

#include <random>

#include "tuner/strategies/untried.h"

namespace mlatune::strategies {
namespace {

class RandomSearch final : public Strategy {
 public:
  RandomSearch(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
               const StrategyMemory& memory)
      : untried_(space, shape, memory), rng_(seed) {}

  std::optional<Config> next() override {
    auto c = untried_.draw(rng_);
    if (c) untried_.mark(*c);
    return c;
  }
  void observe(const Config&, std::optional<double>) override {}

 private:
  Untried untried_;
  std::mt19937_64 rng_;
};

}  // namespace

std::unique_ptr<Strategy> make_random(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
                                      const StrategyMemory& memory,
                                      const StrategyContext& /*context: unused*/) {
  return std::make_unique<RandomSearch>(space, shape, seed, memory);
}

}  // namespace mlatune::strategies
