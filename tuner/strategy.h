// Search strategies: which config of a space to measure next, given what the
// measurements so far said.  Ask/tell: next() proposes, observe() reports the
// time (or the failure) of a proposed config.  Strategies know nothing of
// compilation or GPUs, so they run the same against a real sweep and against
// replayed measurements (tuner/replay.h).
//
// Every strategy proposes only valid configs (SearchSpace::check), never the
// same config twice, and returns nullopt once every valid config has been
// proposed.  The caller enforces the evaluation budget.  A strategy is
// deterministic for a given seed: the same seed and the same observations give
// the same proposals.  On spaces held whole (StrategyMemory) that holds across
// standard libraries too (std::mt19937_64, whose output the standard fixes,
// and our own draws from it); larger spaces go through SearchSpace::sample.
//
// Each strategy is one file under tuner/strategies/, and
// tuner/strategies/registry.cpp names them all: a new strategy is its file
// and one line there (the CLI's --strategy choices and help follow).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/space.h"

namespace mlatune {

/// A search strategy over the valid configs of one space at one shape.
/// Holds a reference to the space: the space must outlive it.
class Strategy {
 public:
  virtual ~Strategy() = default;
  /// The next config to measure: valid, never proposed before; nullopt when
  /// every valid config has been proposed.
  virtual std::optional<Config> next() = 0;
  /// The measurement of a config this strategy proposed: its time in
  /// microseconds, or nullopt when it failed (compile error, crash, wrong
  /// result, ...).  Failed configs count as very slow.
  virtual void observe(const Config& config, std::optional<double> time_us) = 0;
};

/// How much of a space a strategy may hold in memory.
struct StrategyMemory {
  /// Spaces with at most this many valid configs at the shape are enumerated
  /// once and kept (random draws shuffle them, the model ranks all of them);
  /// larger ones are reached through SearchSpace::sample, with a pool of
  /// candidates for the model.  Brute force holds at most this many (and at
  /// least one) at a time.
  std::uint64_t max_held_configs = 1u << 16;
};

/// What a strategy may know at a shape besides the space: the caller's budget
/// and configs worth trying first.  Strategies that have no use for a field
/// ignore it (brute force, random, annealing and model ignore them all), so
/// an empty context changes nothing.
struct StrategyContext {
  /// The evaluations the caller allows at this shape; unset: every valid
  /// config.  The caller still enforces it; `auto` chooses by it.
  std::optional<std::uint64_t> max_evals;
  /// A wall-time budget may end the search before `max_evals` (so even a
  /// budget that covers the space may not be spent).
  bool time_limited = false;
  /// Configs tuned at other shapes of the same kernel, already made valid
  /// here (tuner/strategies/warm_start.h), distinct, most promising first: a
  /// strategy that warm-starts proposes these before anything else.
  std::vector<Config> warm_start;
  /// (parameter, value) of name parameters that a nearby shape found slow as
  /// a whole (tuner/strategies/warm_start.h, costly_values): a strategy
  /// that warm-starts leaves them out of its spread-out first configs.
  std::vector<std::pair<std::size_t, std::uint32_t>> costly_values;
};

struct StrategyEntry;  // tuner/strategies/registry.h

/// One of the registered strategies (tuner/strategies/registry.h), by
/// handle: it can only name a strategy that exists, so a name is checked once,
/// where it enters (parse_strategy_kind).  Default: the registry's first,
/// auto.
class StrategyKind {
 public:
  StrategyKind();
  explicit StrategyKind(const StrategyEntry& entry) : entry_(&entry) {}
  const StrategyEntry& entry() const { return *entry_; }
  bool operator==(const StrategyKind&) const = default;

 private:
  const StrategyEntry* entry_;
};

/// The registered name: "auto", "brute_force", "random", ...
std::string_view to_string(StrategyKind);
/// The strategy registered under `name`; anything else is an InputError that
/// lists the registered names.
StrategyKind parse_strategy_kind(std::string_view name);
/// Every registered strategy, in registry order.
const std::vector<StrategyKind>& all_strategy_kinds();

/// The strategy that `kind` stands for at a shape with `valid_configs`
/// valid configs under `context`'s budget: `kind` itself, except for a
/// strategy that chooses another (auto: tuner/strategies/auto.h).  Never
/// one that chooses again.
StrategyKind resolve_strategy(StrategyKind kind, std::uint64_t valid_configs, const StrategyContext& context);

/// A strategy of `kind` (resolved first, by resolve_strategy) over `space` at
/// `shape`.
std::unique_ptr<Strategy> make_strategy(StrategyKind kind, const SearchSpace& space,
                                        const Shape& shape, std::uint64_t seed,
                                        StrategyMemory memory = {}, const StrategyContext& context = {});

}  // namespace mlatune
