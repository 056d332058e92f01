// Simulated annealing over one-parameter moves (see annealing.cpp).
#pragma once
#include <cstdint>
#include <memory>

#include "core/space.h"
#include "tuner/strategy.h"

namespace mlatune::strategies {

std::unique_ptr<Strategy> make_annealing(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
                                         const StrategyMemory& memory,
                                         const StrategyContext& context);

}  // namespace mlatune::strategies
