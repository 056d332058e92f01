// Bayesian optimization with tree-ensemble surrogates (in the family of SMAC
// and of Kernel Tuner's and BaCO's model-based searches): the untried valid
// config with the largest expected improvement of log(time) times the
// probability that it runs, both learned from what was measured.  See
// bayes.cpp for the phases and the schedule of fits.
#pragma once
#include <cstdint>
#include <memory>

#include "core/space.h"
#include "tuner/strategy.h"

namespace mlatune::strategies {

std::unique_ptr<Strategy> make_bayes(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
                                     const StrategyMemory& memory, const StrategyContext& context);

}  // namespace mlatune::strategies
