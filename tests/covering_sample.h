// A sample of valid configs that exercises every parameter value a shape
// allows, for GPU tests that validate a family's configs without running all
// of them.
#pragma once
#include <cstddef>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "core/space.h"

namespace mlatune {

/// At least `minimum` distinct valid configs: first one for every (parameter,
/// value) pair that some valid config has at this shape, then uniform draws.
inline std::vector<Config> covering_sample(const SearchSpace& space, const Shape& shape, std::size_t minimum,
                                           std::mt19937_64& rng) {
  const auto& parameters = space.parameters();
  std::set<std::pair<std::size_t, std::uint32_t>> wanted;
  for (std::size_t p = 0; p < parameters.size(); ++p)
    for (std::uint32_t v = 0; v < parameters[p].text.size(); ++v) wanted.insert({p, v});
  std::set<Config> chosen;
  std::vector<Config> sample;
  auto take = [&](const Config& config) {
    if (!chosen.insert(config).second) return;
    sample.push_back(config);
    for (std::size_t p = 0; p < parameters.size(); ++p) wanted.erase({p, config.choice[p]});
  };
  // Random draws cover most values; the walk finds the rare ones (or shows
  // that no valid config has them at this shape).
  for (int i = 0; i < 2000 && !wanted.empty(); ++i) {
    std::optional<Config> config = space.sample(shape, rng);
    if (!config) break;
    bool useful = false;
    for (std::size_t p = 0; p < parameters.size(); ++p) useful |= wanted.count({p, config->choice[p]}) > 0;
    if (useful) take(*config);
  }
  if (!wanted.empty()) {
    space.for_each_valid(shape, [&](const Config& config) {
      for (std::size_t p = 0; p < parameters.size(); ++p)
        if (wanted.count({p, config.choice[p]})) {
          take(config);
          break;
        }
      return !wanted.empty();
    });
  }
  std::uint64_t valid = space.count(shape);
  while (sample.size() < minimum && sample.size() < valid) {
    std::optional<Config> config = space.sample(shape, rng);
    if (!config) break;
    take(*config);
  }
  return sample;
}

}  // namespace mlatune
