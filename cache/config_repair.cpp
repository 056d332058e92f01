#include "cache/config_repair.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

namespace mlatune {
namespace {

constexpr std::size_t geometry_failure = static_cast<std::size_t>(-1);

std::size_t index_of(const std::vector<std::string>& names, const std::string& name) {
  auto it = std::find(names.begin(), names.end(), name);
  return it == names.end() ? names.size() : static_cast<std::size_t>(it - names.begin());
}

std::vector<std::string> parameter_names(const SearchSpace& space) {
  std::vector<std::string> names;
  for (const Parameter& p : space.parameters()) names.push_back(p.name);
  return names;
}

// Adds the indices in `names` of the variables `e` reads, once each.
void add_reads(const Expression& e, const std::vector<std::string>& names, std::vector<std::size_t>& out) {
  for (const std::string& variable : e.variables()) {
    std::size_t i = index_of(names, variable);
    if (i < names.size() && std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
  }
}

void add_launch_reads(const KernelSource& source, const std::vector<std::string>& names,
                      std::vector<std::size_t>& out) {
  for (int i = 0; i < 3; ++i) {
    add_reads(source.grid[i], names, out);
    add_reads(source.block[i], names, out);
  }
  add_reads(source.shared_bytes, names, out);
}

std::size_t index_distance(std::uint32_t a, std::uint32_t b) { return a > b ? a - b : b - a; }

}  // namespace

/// A candidate of one level: its config, how it was reached from a node of
/// the level above (none for the origin), and, once judged, why it fails.
struct ConfigRepairer::Node {
  Config config;
  std::size_t parent = 0;
  std::size_t parameter = 0;
  std::uint32_t value = 0;
  std::size_t distance = 0;  // sum over changed parameters of |index - origin's index|
  std::size_t failed = geometry_failure;  // constraint index, or geometry_failure
  std::string geometry_reason;
  const std::vector<std::size_t>* culprits = nullptr;
};

ConfigRepairer::ConfigRepairer(const SearchSpace& space) : space_(&space) {
  const std::vector<std::string> parameters = parameter_names(space);
  for (const Expression& constraint : space.constraints()) {
    constraint_parameters_.emplace_back();
    add_reads(constraint, parameters, constraint_parameters_.back());
    std::sort(constraint_parameters_.back().begin(), constraint_parameters_.back().end());
    constraint_shape_variables_.emplace_back();
    add_reads(constraint, space.shape_variables(), constraint_shape_variables_.back());
    std::sort(constraint_shape_variables_.back().begin(), constraint_shape_variables_.back().end());
  }
  add_launch_reads(space.kernel(), parameters, launch_parameters_);
  if (const auto& prologue = space.prologue()) {
    add_launch_reads(prologue->kernel, parameters, launch_parameters_);
    if (prologue->when) add_reads(*prologue->when, parameters, launch_parameters_);
  }
  std::sort(launch_parameters_.begin(), launch_parameters_.end());
}

ConfigRepairer::Verdict ConfigRepairer::judge(const Config& config, const Shape& shape) const {
  Verdict verdict;
  Validity validity = space_->check(config, shape);
  if (!validity) {
    verdict.valid = false;
    const auto& constraints = space_->constraints();
    for (std::size_t i = 0; i < constraints.size(); ++i) {
      const SourceLocation& where = constraints[i].where();
      if (where.line == validity.where.line && where.column == validity.where.column &&
          constraints[i].text() == validity.failed_constraint) {
        verdict.failed = i;
        verdict.culprits = &constraint_parameters_[i];
        return verdict;
      }
    }
    // Unreachable with a well-formed space; then any parameter may be at fault.
    verdict.failed = geometry_failure;
    verdict.geometry_reason = "constraint '" + validity.failed_constraint + "' fails";
    verdict.culprits = &launch_parameters_;
    return verdict;
  }
  LaunchGeometry geometry = space_->geometry(config, shape);
  if (!geometry.valid()) {
    verdict.valid = false;
    verdict.geometry_reason = "geometry: " + geometry.invalid_reason;
    verdict.culprits = &launch_parameters_;
  }
  return verdict;
}

std::string ConfigRepairer::failing_at(std::size_t constraint, const Shape& shape) const {
  const std::vector<std::size_t>& reads = constraint_shape_variables_[constraint];
  std::string text = "constraint '" + space_->constraints()[constraint].text() + "' fails";
  for (std::size_t k = 0; k < reads.size(); ++k)
    text += fmt::format("{}{}={}", k ? "," : " at ", space_->shape_variables()[reads[k]],
                        shape.values[reads[k]]);
  return text;
}

std::string ConfigRepairer::rejection(const Config& config, const Shape& shape) const {
  Verdict verdict = judge(config, shape);
  if (verdict.valid) return {};
  return verdict.failed == geometry_failure ? verdict.geometry_reason : failing_at(verdict.failed, shape);
}

// The configs one more change away from the origin than `level`'s: each
// parent's failing expression's parameters not yet changed, moved to every
// other value; in repair order (distance, then config), without duplicates.
std::vector<ConfigRepairer::Node> ConfigRepairer::children(const std::vector<Node>& level,
                                                           const Config& origin) const {
  const auto& parameters = space_->parameters();
  std::vector<Node> out;
  for (std::size_t p = 0; p < level.size(); ++p) {
    const Node& parent = level[p];
    for (std::size_t parameter : *parent.culprits) {
      if (parent.config.choice[parameter] != origin.choice[parameter]) continue;  // changed already
      const auto values = static_cast<std::uint32_t>(parameters[parameter].text.size());
      for (std::uint32_t value = 0; value < values; ++value) {
        if (value == origin.choice[parameter]) continue;
        Node child;
        child.config = parent.config;
        child.config.choice[parameter] = value;
        child.parent = p;
        child.parameter = parameter;
        child.value = value;
        child.distance = parent.distance + index_distance(value, origin.choice[parameter]);
        out.push_back(std::move(child));
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Node& a, const Node& b) {
    if (a.distance != b.distance) return a.distance < b.distance;
    return a.config < b.config;
  });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const Node& a, const Node& b) { return a.config == b.config; }),
            out.end());
  return out;
}

Repair ConfigRepairer::repair(const Config& config, const Shape& shape, RepairLimits limits) const {
  Repair result;
  std::vector<std::vector<Node>> levels(1);
  levels[0].push_back(Node{config});
  Verdict origin = judge(config, shape);
  result.evaluations = 1;
  if (origin.valid) {
    result.config = config;
    return result;
  }
  auto fill = [](Node& node, const Verdict& verdict) {
    node.failed = verdict.failed;
    node.geometry_reason = verdict.geometry_reason;
    node.culprits = verdict.culprits;
  };
  fill(levels[0][0], origin);
  result.rejection = origin.failed == geometry_failure ? origin.geometry_reason
                                                       : failing_at(origin.failed, shape);
  for (std::size_t changes = 1; changes <= limits.max_changes; ++changes) {
    levels.push_back(children(levels.back(), config));
    for (std::size_t i = 0; i < levels.back().size(); ++i) {
      if (result.evaluations >= limits.max_evaluations) {
        result.exhausted = true;
        return result;
      }
      Node& node = levels.back()[i];
      Verdict verdict = judge(node.config, shape);
      ++result.evaluations;
      if (!verdict.valid) {
        fill(node, verdict);
        continue;
      }
      result.config = node.config;
      // The path back to the origin: each change and the failure it answered.
      std::size_t at = i;
      for (std::size_t depth = levels.size() - 1; depth > 0; --depth) {
        const Node& step = levels[depth][at];
        const Node& parent = levels[depth - 1][step.parent];
        std::string why = parent.failed == geometry_failure ? parent.geometry_reason
                                                            : failing_at(parent.failed, shape);
        result.changes.push_back(
            ParameterChange{step.parameter, config.choice[step.parameter], step.value, std::move(why)});
        at = step.parent;
      }
      std::reverse(result.changes.begin(), result.changes.end());
      return result;
    }
  }
  return result;
}

std::string ConfigRepairer::describe(const std::vector<ParameterChange>& changes) const {
  std::string text;
  for (const ParameterChange& change : changes) {
    const Parameter& p = space_->parameters()[change.parameter];
    text += fmt::format("{}{} {} -> {} ({})", text.empty() ? "" : "; ", p.name, p.text[change.from],
                        p.text[change.to], change.why);
  }
  return text;
}

}  // namespace mlatune
