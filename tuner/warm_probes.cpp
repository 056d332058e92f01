#include "tuner/warm_probes.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace mlatune {

namespace {

/// The geometric middle of a range: the dispatcher measures shapes on a log
/// scale, so this is the range's centre as it sees it.
std::int64_t middle(std::int64_t low, std::int64_t high) {
  auto value = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(low) * static_cast<double>(high))));
  return std::clamp(value, low, high);
}

/// The shapes variable `v` is scanned at: every variable at its middle, then
/// each other variable in turn at its low and at its high end.
std::vector<Shape> scan_contexts(const ShapeBox& box, std::size_t v) {
  Shape base;
  for (std::size_t i = 0; i < box.low.size(); ++i) base.values.push_back(middle(box.low[i], box.high[i]));
  std::set<Shape> contexts{base};
  for (std::size_t u = 0; u < box.low.size(); ++u) {
    if (u == v) continue;
    for (std::int64_t end : {box.low[u], box.high[u]}) {
      Shape shape = base;
      shape.values[u] = end;
      contexts.insert(shape);
    }
  }
  return {contexts.begin(), contexts.end()};
}

bool reads_variable(const Expression& expression, const std::string& name) {
  for (const std::string& used : expression.variables())
    if (used == name || used.rfind("SHAPE_", 0) == 0) return true;
  return false;
}

/// What can change the binary at a shape, for the scan of one variable.
class Signature {
 public:
  Signature(const SearchSpace& space, const std::vector<Config>& candidates, const std::string& variable)
      : space_(space), candidates_(candidates) {
    for (const Expression& constraint : space.constraints())
      if (reads_variable(constraint, variable)) constraints_.push_back(&constraint);
  }

  std::size_t operator()(const Shape& shape) const {
    std::string text;
    for (const Config& config : candidates_) {
      for (const Expression* constraint : constraints_) {
        double value = space_.evaluate(*constraint, &config, shape);
        text += std::isnan(value) ? 'n' : value != 0 ? '1' : '0';
      }
      text += space_.geometry(config, shape).valid() ? 'g' : 'x';
      for (const auto& [name, value] : space_.definitions(config, shape))
        if (name.rfind("SHAPE_", 0) == 0) text += name + '=' + value + ';';
      text += '|';
    }
    return std::hash<std::string>{}(text);
  }

 private:
  const SearchSpace& space_;
  const std::vector<Config>& candidates_;
  std::vector<const Expression*> constraints_;
};

/// Index of the tuned value nearest to `x` on a log scale (0 without any).
std::size_t nearest_anchor(const std::vector<std::int64_t>& anchors, std::int64_t x) {
  auto above = std::lower_bound(anchors.begin(), anchors.end(), x);
  if (above == anchors.begin()) return 0;
  if (above == anchors.end()) return anchors.size() - 1;
  double to_above = std::log(static_cast<double>(*above) / static_cast<double>(x));
  double to_below = std::log(static_cast<double>(x) / static_cast<double>(*(above - 1)));
  std::size_t index = static_cast<std::size_t>(above - anchors.begin());
  return to_below <= to_above ? index - 1 : index;
}

VariableProbes probe_variable(const SearchSpace& space, const ShapeBox& box, std::size_t v,
                              const std::vector<Config>& candidates, const std::vector<Shape>& tuned_shapes) {
  VariableProbes probes;
  probes.name = space.shape_variables()[v];
  std::vector<std::int64_t> anchors;
  for (const Shape& shape : tuned_shapes) anchors.push_back(shape.values[v]);
  std::sort(anchors.begin(), anchors.end());
  anchors.erase(std::unique(anchors.begin(), anchors.end()), anchors.end());

  const Signature signature(space, candidates, probes.name);
  std::vector<Shape> contexts = scan_contexts(box, v);
  std::map<std::pair<std::size_t, std::size_t>, std::int64_t> first_of_class;
  for (std::int64_t x = box.low[v]; x <= box.high[v]; ++x) {
    std::size_t combined = 0;
    for (Shape& shape : contexts) {
      shape.values[v] = x;
      combined = combined * 1'000'003u ^ signature(shape);
    }
    first_of_class.try_emplace({nearest_anchor(anchors, x), combined}, x);
  }
  std::set<std::int64_t> values{box.low[v], box.high[v]};
  for (const auto& [key, x] : first_of_class) values.insert(x);
  probes.values.assign(values.begin(), values.end());
  probes.classes = first_of_class.size();
  return probes;
}

std::uint64_t saturating_product(const std::vector<VariableProbes>& variables) {
  std::uint64_t product = 1;
  for (const VariableProbes& v : variables) {
    std::uint64_t n = v.values.size();
    if (product > std::numeric_limits<std::uint64_t>::max() / n) return std::numeric_limits<std::uint64_t>::max();
    product *= n;
  }
  return product;
}

}  // namespace

Shape ProbePlan::shape(std::uint64_t index) const {
  if (index >= product) return tuned_inside.at(index - product);
  Shape shape;
  shape.values.resize(variables.size());
  for (std::size_t i = variables.size(); i-- > 0;) {
    const std::vector<std::int64_t>& values = variables[i].values;
    shape.values[i] = values[index % values.size()];
    index /= values.size();
  }
  return shape;
}

ProbePlan plan_probes(const SearchSpace& space, const ShapeBox& box, const std::vector<Config>& candidates,
                      const std::vector<Shape>& tuned_shapes, std::uint64_t max_probe_shapes) {
  ProbePlan plan;
  for (std::size_t v = 0; v < space.shape_variables().size(); ++v)
    plan.variables.push_back(probe_variable(space, box, v, candidates, tuned_shapes));
  std::set<Shape> inside;
  for (const Shape& shape : tuned_shapes)
    if (box.contains(shape)) inside.insert(shape);
  plan.tuned_inside.assign(inside.begin(), inside.end());
  plan.product = saturating_product(plan.variables);
  if (plan.product > max_probe_shapes || plan.count() > max_probe_shapes) {
    std::vector<std::string> counts;
    for (const VariableProbes& v : plan.variables) counts.push_back(fmt::format("{}: {}", v.name, v.values.size()));
    throw InputError(fmt::format(
        "the range {} needs {} probe shapes ({} probe values per variable), more than the bound of {}; a "
        "compiled shape variable without buckets needs one binary per value: narrow the range of such a "
        "variable, or raise the bound (--max-probes)",
        box.text(space), plan.product == std::numeric_limits<std::uint64_t>::max() ? "over 2^64" : std::to_string(plan.count()),
        fmt::join(counts, ", "), max_probe_shapes));
  }
  return plan;
}

}  // namespace mlatune
