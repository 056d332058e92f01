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

std::vector<std::string> tuned_shapes_nearest_first(const SearchSpace& candidates, const Shape& shape,
                                                    const std::vector<TunedText>& tuned) {
  std::set<std::pair<double, std::string>> order;
  for (const TunedText& t : tuned) {
    Shape other;
    try {
      other = candidates.parse_shape(t.shape);
    } catch (const InputError&) {
      continue;
    }
    if (other != shape) order.emplace(log_shape_distance(other, shape), t.shape);
  }
  std::vector<std::string> out;
  for (const auto& [distance, text] : order) out.push_back(text);
  return out;
}

namespace {

/// One shape's configs that ran, parsed, and the fastest of them.
struct RanAt {
  const std::string* shape;
  std::vector<std::pair<Config, double>> ran;
  double fastest = 0;
};

RanAt ran_at(const SearchSpace& candidates, const MeasuredShape& m) {
  RanAt out{&m.shape, {}, 0};
  for (const auto& [text, median_us] : m.results) {
    if (!median_us || !(*median_us > 0)) continue;
    try {
      out.ran.emplace_back(candidates.parse_config(text), *median_us);
    } catch (const InputError&) {
      continue;  // of another version of the space
    }
    out.fastest = out.fastest > 0 ? std::min(out.fastest, *median_us) : *median_us;
  }
  return out;
}

}  // namespace

CostlyValues costly_values(const SearchSpace& candidates, const Shape& shape,
                           const std::vector<MeasuredShape>& measured) {
  std::vector<RanAt> shapes;
  for (const MeasuredShape& m : measured) shapes.push_back(ran_at(candidates, m));
  CostlyValues out;
  const ConfigRepairer repairer(candidates);
  std::set<Config> taken;
  const auto& parameters = candidates.parameters();
  for (std::size_t p = 0; p < parameters.size(); ++p) {
    if (parameters[p].kind != ValueKind::name) continue;
    for (std::uint32_t v = 0; v < parameters[p].numeric.size(); ++v) {
      // Judged at the nearest shape that measured enough configs with it.
      for (const RanAt& at : shapes) {
        std::vector<double> times;
        const Config* best = nullptr;
        double best_us = 0;
        for (const auto& [config, median_us] : at.ran) {
          if (config.choice[p] != v) continue;
          times.push_back(median_us);
          if (!best || median_us < best_us) {
            best = &config;
            best_us = median_us;
          }
        }
        if (times.size() < costly_min_configs) continue;
        std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
        const double ratio = times[times.size() / 2] / at.fastest;
        if (ratio >= costly_factor) {
          out.values.push_back({p, v, ratio, *at.shape});
          const Repair repair = repairer.repair(*best, shape);
          if (repair.ok() && taken.insert(*repair.config).second) out.best.push_back(*repair.config);
        }
        break;
      }
    }
  }
  return out;
}

std::size_t add_costly_values(const CostlyValues& costly, StrategyContext& context) {
  for (const CostlyValue& c : costly.values) context.costly_values.emplace_back(c.parameter, c.value);
  std::size_t added = 0;
  for (const Config& c : costly.best)
    if (std::find(context.warm_start.begin(), context.warm_start.end(), c) == context.warm_start.end()) {
      context.warm_start.push_back(c);
      ++added;
    }
  return added;
}

}  // namespace mlatune::strategies
