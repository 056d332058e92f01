// Model-based search: the untried config a ridge-regression surrogate of
// log(time) predicts fastest (see model.cpp and ridge.h).
#pragma once
#include <cstdint>
#include <memory>

#include "core/space.h"
#include "tuner/strategy.h"

namespace mlatune::strategies {

std::unique_ptr<Strategy> make_model(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
                                     const StrategyMemory& memory,
                                     const StrategyContext& context);

}  // namespace mlatune::strategies
