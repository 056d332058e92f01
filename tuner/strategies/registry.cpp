#include "tuner/strategies/registry.h"

#include <fmt/format.h>

#include "core/error.h"
#include "tuner/strategies/annealing.h"
#include "tuner/strategies/auto.h"
#include "tuner/strategies/bayes.h"
#include "tuner/strategies/brute_force.h"
#include "tuner/strategies/model.h"
#include "tuner/strategies/random.h"

namespace mlatune {
namespace {

// The one list of strategies.  A new one: its file under tuner/strategies/,
// its source in mlatune_tuner's list in CMakeLists.txt, and a line here.
// auto is first, so it is the default; it adapts (when it chooses bayes), so
// shards of it split whole shapes wherever it chooses bayes (tuner/shard.h).
constexpr StrategyEntry registry[] = {
    // name, description, factory, adapts (to measurements), seeded, warm starts, chooser
    {"auto", strategies::auto_description, &strategies::make_auto, true, true, true, &strategies::choose_auto},
    {"brute_force", "every valid config, in enumeration order", &strategies::make_brute_force, false, false},
    {"random", "uniform draws among the valid configs not yet tried", &strategies::make_random, false, true},
    {"annealing", "simulated annealing over one-parameter moves", &strategies::make_annealing, true, true},
    {"model", "ridge-regression surrogate of log(time), best predicted first", &strategies::make_model, true,
     true},
    {"bayes",
     "Bayesian optimization: tree ensembles of log(time) and of where configs fail, a lower confidence bound "
     "and searches around the fastest, warm-started from configs tuned at other shapes",
     &strategies::make_bayes, true, true, true},
};

}  // namespace

std::span<const StrategyEntry> strategy_registry() { return registry; }

std::string describe_strategies() {
  std::string text;
  for (const StrategyEntry& entry : registry) {
    if (!text.empty()) text += "; ";
    text += fmt::format("{}: {}", entry.name, entry.description);
  }
  return text;
}

StrategyKind::StrategyKind() : entry_(&registry[0]) {}

std::string_view to_string(StrategyKind kind) { return kind.entry().name; }

const std::vector<StrategyKind>& all_strategy_kinds() {
  static const std::vector<StrategyKind> kinds(registry, registry + std::size(registry));
  return kinds;
}

StrategyKind parse_strategy_kind(std::string_view name) {
  std::string valid;
  for (const StrategyEntry& entry : registry) {
    if (entry.name == name) return StrategyKind(entry);
    if (!valid.empty()) valid += ", ";
    valid += entry.name;
  }
  throw InputError(fmt::format("unknown strategy '{}' (valid: {})", name, valid));
}

StrategyKind resolve_strategy(StrategyKind kind, std::uint64_t valid_configs, const StrategyContext& context) {
  if (!kind.entry().choose) return kind;
  const StrategyKind chosen = kind.entry().choose(valid_configs, context);
  if (chosen.entry().choose)
    throw InternalError(fmt::format("strategy {} chose {}, which chooses again", kind.entry().name,
                                    chosen.entry().name));
  return chosen;
}

std::unique_ptr<Strategy> make_strategy(StrategyKind kind, const SearchSpace& space, const Shape& shape,
                                        std::uint64_t seed, StrategyMemory memory, const StrategyContext& context) {
  return kind.entry().create(space, shape, seed, memory, context);
}

}  // namespace mlatune
