// Brute force: every valid config, in enumeration order (the seed is unused).
#pragma once
#include <cstdint>
#include <memory>

#include "core/space.h"
#include "tuner/strategy.h"

namespace mlatune::strategies {

std::unique_ptr<Strategy> make_brute_force(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
                                           const StrategyMemory& memory,
                                           const StrategyContext& context);

}  // namespace mlatune::strategies
