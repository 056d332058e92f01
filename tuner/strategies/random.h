// Random search: uniform draws among the valid configs not yet tried.
#pragma once
#include <cstdint>
#include <memory>

#include "core/space.h"
#include "tuner/strategy.h"

namespace mlatune::strategies {

std::unique_ptr<Strategy> make_random(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
                                      const StrategyMemory& memory,
                                      const StrategyContext& context);

}  // namespace mlatune::strategies
