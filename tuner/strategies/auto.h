// `auto`, the default strategy: per shape, the strategy that the size of the
// valid space and the budget call for.
//
// The rule: when the budget covers every valid config (no --max-evals, or
// one of at least the count, and no --time-budget), every config is measured
// whatever the order, so brute force (no model to fit, and shards split the
// candidates of the shape); otherwise only the order decides what is found
// within the budget, so bayes (tuner/strategies/bayes.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/space.h"
#include "tuner/strategy.h"

namespace mlatune::strategies {

/// The rule above, in one line, for --help and the registry.
inline constexpr std::string_view auto_description =
    "per shape: brute_force when the budget covers every valid config (no --max-evals or one at least the "
    "count, and no --time-budget), else bayes";

/// brute_force or bayes, by the rule above.
StrategyKind choose_auto(std::uint64_t valid_configs, const StrategyContext& context);

/// The chosen strategy at `shape` (counting its valid configs).
std::unique_ptr<Strategy> make_auto(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
                                    const StrategyMemory& memory, const StrategyContext& context);

}  // namespace mlatune::strategies
