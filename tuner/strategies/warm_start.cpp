#include "tuner/strategies/warm_start.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "cache/config_repair.h"
#include "core/error.h"

namespace mlatune::strategies {

double log_shape_distance(const Shape& a, const Shape& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.values.size() && i < b.values.size(); ++i)
    d += std::abs(std::log(static_cast<double>(a.values[i]) / static_cast<double>(b.values[i])));
  return d;
}

WarmStart warm_start(const SearchSpace& candidates, const Shape& shape, const std::vector<TunedText>& tuned,
                     std::size_t limit) {
  WarmStart out;
  struct Parsed {
    double distance;
    double median_us;
    Shape shape;
    Config config;
  };
  std::vector<Parsed> parsed;
  for (const TunedText& t : tuned) {
    try {
      Parsed p{0, t.median_us, candidates.parse_shape(t.shape), candidates.parse_config(t.config)};
      if (p.shape == shape) continue;
      p.distance = log_shape_distance(p.shape, shape);
      parsed.push_back(std::move(p));
    } catch (const InputError&) {
      ++out.unusable;  // tuned with another version of the space
    }
  }
  // Ties broken by the shape and config themselves, so that the order does
  // not depend on the order of the store's rows.
  std::sort(parsed.begin(), parsed.end(), [](const Parsed& a, const Parsed& b) {
    return std::tie(a.distance, a.median_us, a.shape, a.config) < std::tie(b.distance, b.median_us, b.shape, b.config);
  });
  const ConfigRepairer repairer(candidates);
  std::set<Config> taken;
  for (const Parsed& p : parsed) {
    if (out.configs.size() >= limit) break;
    const Repair repair = repairer.repair(p.config, shape);
    if (!repair.ok()) {
      ++out.unusable;
      continue;
    }
    if (!taken.insert(*repair.config).second) continue;
    if (!repair.changes.empty()) ++out.repaired;
    out.configs.push_back(*repair.config);
  }
  return out;
}

}  // namespace mlatune::strategies
