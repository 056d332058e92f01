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
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/space.h"
#include "tuner/strategy.h"

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

/// The shapes of `tuned` other than `shape` (parseable in `candidates`),
/// distinct, nearest first (log_shape_distance; ties by the text).
std::vector<std::string> tuned_shapes_nearest_first(const SearchSpace& candidates, const Shape& shape,
                                                    const std::vector<TunedText>& tuned);

/// Values of name parameters (algorithms, say) that were slow as a whole at
/// a nearby shape: the median of their measured configs there took at least
/// costly_factor times that shape's fastest, judged at the nearest shape
/// that measured at least costly_min_configs configs with the value.  Why:
/// a search's first, spread-out configs are proposed before any result at
/// the new shape is in (a sweep's lookahead), and at S4 on an H100 about 30
/// such configs of two algorithms took 10 of the shape's 17 s on the GPU,
/// one launch each of 0.4 to 2.6 s.  A strategy leaves these values out of
/// that spread and proposes, for each, its fastest config there (`best`,
/// made valid here) instead: each algorithm is still seen once, by its most
/// promising config.  A shape that left a value out measured too few of its
/// configs to judge it, so the shape after it judges the value where it was
/// last measured in full, farther away.
inline constexpr double costly_factor = 10.0;
inline constexpr std::size_t costly_min_configs = 3;

/// One shape's earlier results: config text -> its median (nullopt: it did
/// not run).
struct MeasuredShape {
  std::string shape;
  std::map<std::string, std::optional<double>> results;
};

struct CostlyValue {
  std::size_t parameter = 0;
  std::uint32_t value = 0;
  double median_ratio = 0;  // its median over the fastest at `shape`
  std::string shape;        // where it was judged
};
struct CostlyValues {
  std::vector<CostlyValue> values;  // parameter order, then value order
  /// Their fastest configs where judged, valid here (those that repair), distinct.
  std::vector<Config> best;
};

/// The costly values of `candidates`' name parameters at `shape`, from
/// `measured`, nearest shape first.
CostlyValues costly_values(const SearchSpace& candidates, const Shape& shape,
                           const std::vector<MeasuredShape>& measured);

/// Tells `context` of `costly`: its values go to costly_values, and each
/// value's best config joins the end of the warm start unless it is there
/// already.  Returns how many configs joined.
std::size_t add_costly_values(const CostlyValues& costly, StrategyContext& context);

}  // namespace mlatune::strategies
