// The strategy registry: every search strategy by name, with a one-line
// description and its factory.  registry.cpp holds the one table; the CLI's
// --strategy choices and help, the sweep, replay and the benchmarks all read
// it, so a new strategy is added there and nowhere else.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/space.h"
#include "tuner/strategy.h"

namespace mlatune {

/// Makes one strategy over `space` at `shape`.
using StrategyFactory = std::unique_ptr<Strategy> (*)(const SearchSpace& space, const Shape& shape,
                                                      std::uint64_t seed, const StrategyMemory& memory,
                                                      const StrategyContext& context);

/// For a strategy that stands for others (auto): the one it stands for at a
/// shape with `valid_configs` valid configs under `context`'s budget.
using StrategyChooser = StrategyKind (*)(std::uint64_t valid_configs, const StrategyContext& context);

/// One registered strategy.
struct StrategyEntry {
  std::string_view name;         // what --strategy takes and the store records
  std::string_view description;  // one line, for --help
  StrategyFactory create;
  /// Whether its proposals depend on the measurements it is told: such a
  /// search cannot be split among shards config by config (tuner/shard.h).
  bool adapts = false;
  /// Whether its proposals depend on the seed.
  bool seeded = false;
  /// Whether it proposes StrategyContext::warm_start first, so that the
  /// sweep looks up configs tuned at other shapes for it.
  bool warm_starts = false;
  /// Set for a strategy that chooses another per shape; its flags above
  /// then describe the most adaptive of its choices.
  StrategyChooser choose = nullptr;
};

/// Every strategy, in the order --help lists them; the first is the default.
std::span<const StrategyEntry> strategy_registry();

/// "auto: ...; brute_force: every valid config, in enumeration order; ..."
/// for help texts.
std::string describe_strategies();

}  // namespace mlatune
