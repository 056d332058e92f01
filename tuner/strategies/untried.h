// What the strategies share: uniform draws that are the same on every
// standard library, the set of valid configs not yet proposed, and the
// configs one move away from another.
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "core/space.h"
#include "tuner/strategy.h"

namespace mlatune::strategies {

/// Uniform integer in [0, n), n > 0, by rejection: unlike
/// std::uniform_int_distribution, the same on every standard library.
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n);

/// Uniform double in [0, 1), from the top 53 bits.
inline double uniform_unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// The valid configs not yet proposed, and uniform draws among them.  Holds
/// every valid config when the space has at most memory.max_held_configs at
/// the shape; else draws through SearchSpace::sample.
class Untried {
 public:
  Untried(const SearchSpace& space, const Shape& shape, const StrategyMemory& memory);

  bool tried(const Config& c) const { return tried_.count(c) != 0; }
  void mark(const Config& c) { tried_.insert(c); }
  std::uint64_t remaining() const { return total_ - tried_.size(); }
  /// Every valid config, when the space is small enough to hold them.
  const std::vector<Config>* all() const { return holds_all_ ? &all_ : nullptr; }

  /// A uniform draw among the untried configs (not marked: the caller marks
  /// what it proposes); nullopt when none is left.
  std::optional<Config> draw(std::mt19937_64& rng);

 private:
  const SearchSpace& space_;
  Shape shape_;
  std::uint64_t total_;
  bool holds_all_ = false;  // all_ is every valid config
  bool sampling_ = true;    // draws by SearchSpace::sample, not from order_
  std::vector<Config> all_;
  std::vector<Config> order_;  // shuffled lazily by draw()
  std::size_t position_ = 0;
  std::set<Config> tried_;
};

/// Configs one move away: one parameter changed to an adjacent value (integer
/// parameters, whose values are listed in order) or to any other value
/// (booleans and names, which have no order).  Valid ones only.
std::vector<Config> neighbours(const SearchSpace& space, const Shape& shape, const Config& from);

}  // namespace mlatune::strategies
