#include "tuner/strategies/auto.h"

namespace mlatune::strategies {

StrategyKind choose_auto(std::uint64_t valid_configs, const StrategyContext& context) {
  const bool covers_space = !context.time_limited && (!context.max_evals || *context.max_evals >= valid_configs);
  return parse_strategy_kind(covers_space ? "brute_force" : "bayes");
}

std::unique_ptr<Strategy> make_auto(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
                                    const StrategyMemory& memory, const StrategyContext& context) {
  const StrategyKind chosen = choose_auto(space.count(shape), context);
  return make_strategy(chosen, space, shape, seed, memory, context);
}

}  // namespace mlatune::strategies
