// Warm start from other shapes (cross-shape transfer): the best configs
// already tuned at other shapes of the same kernel, made valid at this shape,
// nearest shape first, for a strategy to propose before it searches
// (StrategyContext::warm_start).
//
// Why: the best config moves little between nearby shapes (at the recorded
// H200 shapes S0, S1 and S2 the winners differ in one parameter), so a
// neighbour's winner is a far better first guess than a random config.
// Nearness is the dispatcher's: the sum over shape variables of |log a - log
// b|, so T=1 vs 2 weighs as much as 1024 vs 2048.  A config that cannot run
// here is repaired as the dispatcher repairs one (cache/config_repair.h: the
// fewest parameters changed), so that it keeps what was learned there.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/space.h"

namespace mlatune::strategies {

/// A config tuned at a shape, as the store holds it (text of the space's
/// syntax), with its time there.
struct TunedText {
  std::string shape;
  std::string config;
  double median_us = 0;
};

/// The configs to propose first, and what it took to get them.
struct WarmStart {
  std::vector<Config> configs;  // valid here, distinct, nearest shape first
  std::size_t repaired = 0;     // of those, changed to be valid here
  /// Tuned configs left out: not of this space (another version of it), or
  /// not repairable within the repair's limits.
  std::size_t unusable = 0;
};

/// Sum over shape variables of |log a_i - log b_i|.
double log_shape_distance(const Shape& a, const Shape& b);

/// From `tuned` (any order; entries at `shape` itself are ignored), at most
/// `limit` configs valid in `candidates` at `shape`, nearest tuned shape
/// first, then the faster there.
WarmStart warm_start(const SearchSpace& candidates, const Shape& shape, const std::vector<TunedText>& tuned,
                     std::size_t limit = 8);

}  // namespace mlatune::strategies
