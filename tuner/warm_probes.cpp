#include "tuner/warm_probes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "core/error.h"

namespace mlatune {

namespace {

using Values = std::vector<std::string>;
using Point = std::vector<std::int64_t>;  // values of one group's variables

std::uint64_t saturating_multiply(std::uint64_t a, std::uint64_t b) {
  if (a && b > std::numeric_limits<std::uint64_t>::max() / a) return std::numeric_limits<std::uint64_t>::max();
  return a * b;
}

/// A few members of one class, kept as the scan meets them: the first and
/// the last, and the first and last whose values are all multiples of 8, 4
/// and 2, since residue constraints (FLOAT4 wants D % 4 == 0, a head block
/// wants H % HEADS_PER_BLOCK == 0) reject arbitrary members.
class Witnesses {
 public:
  void add(const Point& point) {
    if (first_.empty()) first_ = point;
    last_ = point;
    for (std::size_t m = 0; m < moduli.size(); ++m)
      if (std::all_of(point.begin(), point.end(), [&](std::int64_t x) { return x % moduli[m] == 0; })) {
        if (first_multiple_[m].empty()) first_multiple_[m] = point;
        last_multiple_[m] = point;
      }
  }
  /// Distinct members, the likeliest to run first (large values pass more
  /// "no tile longer than the sequence" constraints than small ones).
  std::vector<Point> list() const {
    std::vector<Point> out;
    auto push = [&](const Point& p) {
      if (!p.empty() && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    };
    push(last_);
    for (std::size_t m = 0; m < moduli.size(); ++m) push(last_multiple_[m]);
    push(first_);
    for (std::size_t m = 0; m < moduli.size(); ++m) push(first_multiple_[m]);
    return out;
  }

 private:
  static constexpr std::array<std::int64_t, 3> moduli{8, 4, 2};
  Point first_, last_;
  std::array<Point, 3> first_multiple_, last_multiple_;
};

/// Shape variables that change a common compiled value, scanned together.
struct Group {
  std::vector<std::size_t> variables;   // shape variable indices
  std::vector<std::size_t> names;       // indices of the compiled values they change
  std::map<Values, Witnesses> classes;  // values of `names` -> members
  bool scanned = true;                  // false: the product of ranges was over max_joint_scan
};

std::int64_t middle(std::int64_t low, std::int64_t high) {
  auto value = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(low) * static_cast<double>(high))));
  return std::clamp(value, low, high);
}

/// Context of one config's planning.
class Planner {
 public:
  Planner(const SearchSpace& space, const ShapeBox& box, const Config& config, const CompiledValues& compiled)
      : space_(space), box_(box), config_(config), compiled_(compiled) {}

  ConfigBinaries plan(std::size_t max_binaries);

 private:
  bool find_base();
  std::vector<std::set<std::size_t>> changed_names() const;
  std::vector<Group> form_groups(const std::vector<std::set<std::size_t>>& changed) const;
  void scan(Group& group) const;
  std::uint64_t distinct_along(std::size_t v) const;
  void find_representatives(const std::vector<Group>& groups, ConfigBinaries& out) const;
  std::optional<Shape> representative(const std::vector<Group>& groups,
                                      const std::vector<const std::pair<const Values, Witnesses>*>& classes) const;
  bool runs(const Shape& shape) const {
    return space_.check(config_, shape).valid && space_.geometry(config_, shape).valid();
  }

  const SearchSpace& space_;
  const ShapeBox& box_;
  const Config& config_;
  const CompiledValues& compiled_;
  Shape base_;
  Values base_values_;
};

/// A shape of the box where the config compiles something: the geometric
/// middle, else a corner.
bool Planner::find_base() {
  Shape low{box_.low}, high{box_.high}, mid;
  for (std::size_t i = 0; i < box_.low.size(); ++i) mid.values.push_back(middle(box_.low[i], box_.high[i]));
  for (const Shape& candidate : {mid, low, high})
    if (std::optional<Values> values = compiled_(config_, candidate)) {
      base_ = candidate;
      base_values_ = std::move(*values);
      return true;
    }
  return false;
}

/// Per shape variable, the compiled values that change along its range.
std::vector<std::set<std::size_t>> Planner::changed_names() const {
  std::vector<std::set<std::size_t>> changed(box_.low.size());
  for (std::size_t v = 0; v < box_.low.size(); ++v) {
    Shape shape = base_;
    for (std::int64_t x = box_.low[v]; x <= box_.high[v]; ++x) {
      shape.values[v] = x;
      std::optional<Values> values = compiled_(config_, shape);
      if (!values) continue;
      for (std::size_t k = 0; k < values->size(); ++k)
        if ((*values)[k] != base_values_[k]) changed[v].insert(k);
    }
  }
  return changed;
}

/// Variables joined when they change a common compiled value (transitively);
/// a variable that changes none is a group of its own without names.
std::vector<Group> Planner::form_groups(const std::vector<std::set<std::size_t>>& changed) const {
  std::vector<std::size_t> root(changed.size());
  std::iota(root.begin(), root.end(), 0);
  auto find = [&](std::size_t v) {
    while (root[v] != v) v = root[v] = root[root[v]];
    return v;
  };
  for (std::size_t v = 0; v < changed.size(); ++v)
    for (std::size_t u = 0; u < v; ++u)
      for (std::size_t k : changed[v])
        if (changed[u].count(k)) root[find(v)] = find(u);
  std::map<std::size_t, Group> by_root;
  for (std::size_t v = 0; v < changed.size(); ++v) {
    Group& group = by_root[find(v)];
    group.variables.push_back(v);
    for (std::size_t k : changed[v])
      if (std::find(group.names.begin(), group.names.end(), k) == group.names.end()) group.names.push_back(k);
  }
  std::vector<Group> groups;
  for (auto& [r, group] : by_root) {
    std::sort(group.names.begin(), group.names.end());
    groups.push_back(std::move(group));
  }
  return groups;
}

/// Walks the product of the group's ranges (the other variables at the
/// base) and classes each point by the values of the group's names.
void Planner::scan(Group& group) const {
  std::uint64_t points = 1;
  for (std::size_t v : group.variables)
    points = saturating_multiply(points, static_cast<std::uint64_t>(box_.high[v] - box_.low[v] + 1));
  if (points > max_joint_scan) {
    group.scanned = false;
    return;
  }
  Shape shape = base_;
  Point point;
  for (std::size_t v : group.variables) point.push_back(shape.values[v] = box_.low[v]);
  for (std::uint64_t i = 0; i < points; ++i) {
    Values key;
    bool compiles = true;
    if (!group.names.empty()) {
      std::optional<Values> values = compiled_(config_, shape);
      compiles = values.has_value();
      if (compiles)
        for (std::size_t k : group.names) key.push_back((*values)[k]);
    }
    if (compiles) group.classes[key].add(point);
    // next point: the last variable fastest
    for (std::size_t j = group.variables.size(); j-- > 0;) {
      const std::size_t v = group.variables[j];
      if (point[j] < box_.high[v]) {
        shape.values[v] = ++point[j];
        break;
      }
      shape.values[v] = point[j] = box_.low[v];
    }
  }
}

/// Distinct compiled tuples along one variable's range (the others at the
/// base): what a group too large to scan jointly needs at least.
std::uint64_t Planner::distinct_along(std::size_t v) const {
  std::set<Values> seen;
  Shape shape = base_;
  for (std::int64_t x = box_.low[v]; x <= box_.high[v]; ++x) {
    shape.values[v] = x;
    if (std::optional<Values> values = compiled_(config_, shape)) seen.insert(std::move(*values));
  }
  return seen.size();
}

/// Calls `attempt` with witness-index combinations, lowest index sum first,
/// until it returns true or `budget` combinations were tried.
bool search_combinations(const std::vector<std::size_t>& sizes, std::size_t budget,
                         const std::function<bool(const std::vector<std::size_t>&)>& attempt) {
  std::vector<std::size_t> capacity(sizes.size() + 1, 0);  // most index sum the slots from i on can take
  for (std::size_t i = sizes.size(); i-- > 0;) capacity[i] = capacity[i + 1] + sizes[i] - 1;
  std::vector<std::size_t> combination(sizes.size());
  std::function<bool(std::size_t, std::size_t)> fill = [&](std::size_t slot, std::size_t left) {
    if (slot == sizes.size()) {
      --budget;
      return attempt(combination);
    }
    for (std::size_t i = 0; i < sizes[slot] && i <= left && budget; ++i) {
      if (left - i > capacity[slot + 1]) continue;
      combination[slot] = i;
      if (fill(slot + 1, left - i)) return true;
    }
    return false;
  };
  for (std::size_t level = 0; level <= capacity[0] && budget; ++level)
    if (fill(0, level)) return true;
  return false;
}

/// A shape inside the box that has the compiled values of `classes` (one per
/// group) and where the config runs; nullopt when no witness combination tried does.
std::optional<Shape> Planner::representative(
    const std::vector<Group>& groups, const std::vector<const std::pair<const Values, Witnesses>*>& classes) const {
  Values expected = base_values_;
  std::vector<std::vector<Point>> witnesses;
  std::vector<std::size_t> sizes;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i = 0; i < groups[g].names.size(); ++i) expected[groups[g].names[i]] = classes[g]->first[i];
    witnesses.push_back(classes[g]->second.list());
    sizes.push_back(witnesses.back().size());
  }
  std::optional<Shape> found;
  search_combinations(sizes, max_representative_attempts, [&](const std::vector<std::size_t>& combination) {
    Shape shape = base_;
    for (std::size_t g = 0; g < groups.size(); ++g)
      for (std::size_t i = 0; i < groups[g].variables.size(); ++i)
        shape.values[groups[g].variables[i]] = witnesses[g][combination[g]][i];
    if (compiled_(config_, shape) != expected || !runs(shape)) return false;
    found = std::move(shape);
    return true;
  });
  return found;
}

/// One representative per tuple: the product of the groups' classes.
void Planner::find_representatives(const std::vector<Group>& groups, ConfigBinaries& out) const {
  std::vector<std::vector<const std::pair<const Values, Witnesses>*>> per_group(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (const auto& entry : groups[g].classes) per_group[g].push_back(&entry);
  std::vector<const std::pair<const Values, Witnesses>*> classes(groups.size());
  for (std::uint64_t t = 0; t < out.tuples; ++t) {
    std::uint64_t rest = t;
    for (std::size_t g = groups.size(); g-- > 0;) {
      classes[g] = per_group[g][rest % per_group[g].size()];
      rest /= per_group[g].size();
    }
    if (std::optional<Shape> shape = representative(groups, classes))
      out.shapes.push_back(std::move(*shape));
    else
      ++out.never_valid;
  }
}

ConfigBinaries Planner::plan(std::size_t max_binaries) {
  ConfigBinaries out;
  out.config = config_;
  if (!find_base()) return out;  // compiles nothing anywhere the base looked: no binary
  std::vector<Group> groups = form_groups(changed_names());
  out.tuples = 1;
  for (Group& group : groups) {
    scan(group);
    std::uint64_t classes = group.classes.size();
    if (!group.scanned) {
      out.warmable = false;
      classes = 1;
      for (std::size_t v : group.variables) classes = saturating_multiply(classes, distinct_along(v));
    }
    if (!group.names.empty())
      for (std::size_t v : group.variables) out.varying.push_back(space_.shape_variables()[v]);
    out.tuples = saturating_multiply(out.tuples, classes);
  }
  std::sort(out.varying.begin(), out.varying.end(), [&](const std::string& a, const std::string& b) {
    const auto& names = space_.shape_variables();
    return std::find(names.begin(), names.end(), a) < std::find(names.begin(), names.end(), b);
  });
  if (out.tuples > max_binaries) out.warmable = false;
  if (out.warmable) find_representatives(groups, out);
  return out;
}

}  // namespace

CompiledValues space_compiled_values(const SearchSpace& space) {
  std::vector<std::string> names;
  for (const std::string& name : space.compiled_shape_variables()) names.push_back("SHAPE_" + name);
  return [&space, names](const Config& config, const Shape& shape) -> std::optional<Values> {
    std::vector<std::pair<std::string, std::string>> definitions;
    try {
      definitions = space.definitions(config, shape);
    } catch (const InputError&) {  // a compiled value that is no integer there: the config cannot run
      return std::nullopt;
    }
    Values values;
    for (const std::string& name : names) {
      auto it = std::lower_bound(definitions.begin(), definitions.end(), name,
                                 [](const auto& definition, const std::string& n) { return definition.first < n; });
      if (it == definitions.end() || it->first != name)
        throw InternalError("the definitions lack the compiled value " + name);
      values.push_back(it->second);
    }
    return values;
  };
}

ConfigBinaries plan_config_binaries(const SearchSpace& space, const ShapeBox& box, const Config& config,
                                    std::size_t max_binaries, const CompiledValues& compiled) {
  const CompiledValues values = compiled ? compiled : space_compiled_values(space);
  return Planner(space, box, config, values).plan(max_binaries);
}

}  // namespace mlatune
