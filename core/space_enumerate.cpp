// Lazy enumeration of a search space: counting, iteration and uniform
// sampling of the valid configs for one shape, without materializing the
// cartesian product.
//
// A walk binds the parameters one by one (EnumerationPlan::order).  Each
// constraint is checked at the depth where its last variable gets bound, so a
// failing constraint prunes the whole subtree below it; below the deepest
// constraint every combination is valid and a subtree is counted by
// multiplying list lengths.  Counting and sampling do not care about order, so
// they bind the constrained parameters first and leave the free ones to the
// multiplication; for_each_valid keeps declaration order so that it visits
// configs in lexicographic order.
#include <algorithm>
#include <functional>
#include <numeric>

#include "core/space.h"
#include "core/space_impl.h"

namespace mlatune {
namespace {

std::size_t parameter_index(const SpaceData& s, const std::string& name) {
  for (std::size_t i = 0; i < s.parameters.size(); ++i)
    if (s.parameters[i].name == name) return i;
  return s.parameters.size();
}

// Parameters (by index) an expression reads.
std::vector<std::size_t> parameters_of(const SpaceData& s, const Expression& e) {
  std::vector<std::size_t> out;
  for (const std::string& name : e.variables())
    if (std::size_t i = parameter_index(s, name); i < s.parameters.size()) out.push_back(i);
  return out;
}

// What enumeration checks: that each compiled value is one (first, as
// check() does), then the constraints.
std::vector<Expression> checked_expressions(const SpaceData& s) {
  std::vector<Expression> out;
  for (const CompiledValue& c : s.compiled)
    if (c.check) out.push_back(*c.check);
  out.insert(out.end(), s.constraints.begin(), s.constraints.end());
  return out;
}

EnumerationPlan make_plan(const SpaceData& s, std::vector<std::size_t> order) {
  const std::size_t count = s.parameters.size();
  EnumerationPlan plan;
  plan.order = std::move(order);
  std::vector<std::size_t> position(count);
  for (std::size_t d = 0; d < count; ++d) position[plan.order[d]] = d;
  plan.checks.assign(count + 1, {});
  for (const Expression& constraint : checked_expressions(s)) {
    std::size_t depth = 0;
    for (std::size_t p : parameters_of(s, constraint)) depth = std::max(depth, position[p] + 1);
    plan.checks[depth].push_back(SearchSpace::Impl::of(constraint).id);
    plan.deepest = std::max(plan.deepest, depth);
  }
  plan.suffix_product.assign(count + 1, 1);
  for (std::size_t d = count; d-- > 0;)
    plan.suffix_product[d] =
        saturating_multiply(s.parameters[plan.order[d]].numeric.size(), plan.suffix_product[d + 1]);
  return plan;
}

bool all_hold(ExpressionEvaluator& evaluator, const std::vector<std::size_t>& ids) {
  for (std::size_t id : ids)
    if (!SearchSpace::Impl::holds(evaluator.evaluate(id))) return false;
  return true;
}

}  // namespace

void SearchSpace::Impl::plan_enumeration() {
  raw_count = 1;
  for (const Parameter& p : parameters)
    raw_count = saturating_multiply(raw_count, p.numeric.size());

  std::vector<std::size_t> declaration(parameters.size());
  std::iota(declaration.begin(), declaration.end(), std::size_t{0});
  lexical = make_plan(*this, declaration);

  std::vector<bool> constrained(parameters.size(), false);
  for (const Expression& constraint : checked_expressions(*this))
    for (std::size_t p : parameters_of(*this, constraint)) constrained[p] = true;
  std::vector<std::size_t> order;
  for (std::size_t p : declaration)
    if (constrained[p]) order.push_back(p);
  for (std::size_t p : declaration)
    if (!constrained[p]) order.push_back(p);
  counting = make_plan(*this, order);
}

std::uint64_t SearchSpace::Impl::count_below(const EnumerationPlan& plan,
                                             ExpressionEvaluator& evaluator,
                                             std::size_t depth) const {
  if (depth >= plan.deepest) return plan.suffix_product[depth];
  const std::size_t p = plan.order[depth];
  double* slot = evaluator.variables() + shape_variables.size() + p;
  const std::vector<std::size_t>& checks = plan.checks[depth + 1];
  std::uint64_t total = 0;
  for (std::int64_t value : parameters[p].numeric) {
    *slot = static_cast<double>(value);
    if (all_hold(evaluator, checks))
      total = saturating_add(total, count_below(plan, evaluator, depth + 1));
  }
  return total;
}

std::uint64_t SearchSpace::Impl::cached_count(const Shape& shape) const {
  {
    std::lock_guard lock(count_mutex_);
    if (auto it = count_cache_.find(shape); it != count_cache_.end()) return it->second;
  }
  auto evaluator = lease();
  bind_shape(*evaluator, shape);
  std::uint64_t total =
      all_hold(*evaluator, counting.checks[0]) ? count_below(counting, *evaluator, 0) : 0;
  std::lock_guard lock(count_mutex_);
  if (count_cache_.size() >= 1024) count_cache_.clear();  // bounded: shapes are few in practice
  count_cache_.emplace(shape, total);
  return total;
}

namespace {

// Depth-first in counting order, constrained parameters first: below the
// deepest constraint every combination is valid, so the walk ends there.
bool any_below(const SearchSpace::Impl& s, const EnumerationPlan& plan,
               ExpressionEvaluator& evaluator, std::size_t depth) {
  if (depth >= plan.deepest) return true;
  const std::size_t p = plan.order[depth];
  double* slot = evaluator.variables() + s.shape_variables.size() + p;
  for (std::int64_t value : s.parameters[p].numeric) {
    *slot = static_cast<double>(value);
    if (all_hold(evaluator, plan.checks[depth + 1]) && any_below(s, plan, evaluator, depth + 1))
      return true;
  }
  return false;
}

}  // namespace

bool SearchSpace::Impl::any_valid(const Shape& shape) const {
  auto evaluator = lease();
  bind_shape(*evaluator, shape);
  return all_hold(*evaluator, counting.checks[0]) && any_below(*this, counting, *evaluator, 0);
}

std::size_t SearchSpace::Impl::most_restrictive(const Shape& shape, std::uint64_t* removed) const {
  auto evaluator = lease();
  bind_shape(*evaluator, shape);
  double* slots = evaluator->variables() + shape_variables.size();
  std::size_t best = std::string::npos;
  std::uint64_t best_removed = 0;
  for (std::size_t c = 0; c < constraints.size(); ++c) {
    std::vector<std::size_t> used = parameters_of(*this, constraints[c]);
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    std::uint64_t others = 1;
    for (std::size_t p = 0; p < parameters.size(); ++p)
      if (std::find(used.begin(), used.end(), p) == used.end())
        others = saturating_multiply(others, parameters[p].numeric.size());
    // Odometer over the constraint's own parameters only.
    std::vector<std::size_t> digit(used.size(), 0);
    std::uint64_t failing = 0;
    for (;;) {
      for (std::size_t i = 0; i < used.size(); ++i)
        slots[used[i]] = static_cast<double>(parameters[used[i]].numeric[digit[i]]);
      if (!holds(evaluator->evaluate(constraints[c].impl_->id))) ++failing;
      std::size_t i = 0;
      while (i < used.size() && ++digit[i] == parameters[used[i]].numeric.size()) digit[i++] = 0;
      if (i == used.size()) break;
    }
    std::uint64_t r = saturating_multiply(failing, others);
    if (best == std::string::npos || r > best_removed) {
      best = c;
      best_removed = r;
    }
  }
  if (removed) *removed = best_removed;
  return best;
}

std::uint64_t SearchSpace::raw_count() const { return impl_->raw_count; }

std::uint64_t SearchSpace::count(const Shape& shape) const { return impl_->cached_count(shape); }

std::string SearchSpace::most_restrictive_constraint(const Shape& shape) const {
  std::size_t c = impl_->most_restrictive(shape, nullptr);
  return c == std::string::npos ? std::string() : impl_->constraints[c].text();
}

void SearchSpace::for_each_valid(const Shape& shape,
                                 const std::function<bool(const Config&)>& visit) const {
  const Impl& s = *impl_;
  const EnumerationPlan& plan = s.lexical;
  auto evaluator = s.lease();
  s.bind_shape(*evaluator, shape);
  if (!all_hold(*evaluator, plan.checks[0])) return;
  Config config;
  config.choice.assign(s.parameters.size(), 0);
  double* slots = evaluator->variables() + s.shape_variables.size();
  // Returns false once `visit` asked to stop.
  std::function<bool(std::size_t)> walk = [&](std::size_t depth) -> bool {
    if (depth == s.parameters.size()) return visit(config);
    const Parameter& p = s.parameters[depth];
    for (std::uint32_t i = 0; i < p.numeric.size(); ++i) {
      config.choice[depth] = i;
      slots[depth] = static_cast<double>(p.numeric[i]);
      if (depth < plan.deepest && !all_hold(*evaluator, plan.checks[depth + 1])) continue;
      if (!walk(depth + 1)) return false;
    }
    return true;
  };
  walk(0);
}

namespace {

// The valid configs at `sorted` (indices into the valid configs of the
// evaluator's bound shape in counting order, ascending, repeats allowed),
// appended to `out` in that order: one walk in counting order that skips
// whole subtrees by their counts, so that each subtree owns a contiguous run
// of the indices.  The shape's top-level checks must hold.
void configs_at_indices(const SearchSpace::Impl& s, ExpressionEvaluator& evaluator,
                        const std::vector<std::uint64_t>& sorted, std::vector<Config>& out) {
  const EnumerationPlan& plan = s.counting;
  const std::size_t count = s.parameters.size();
  double* slots = evaluator.variables() + s.shape_variables.size();
  Config config;
  config.choice.assign(count, 0);
  // Emits sorted[first, last), whose configs all lie below the node bound
  // down to `depth`, whose first valid config has index `base`.
  std::function<void(std::size_t, std::size_t, std::size_t, std::uint64_t)> walk =
      [&](std::size_t depth, std::size_t first, std::size_t last, std::uint64_t base) {
        if (depth >= plan.deepest) {  // no constraint below: a mixed-radix number
          for (std::size_t i = first; i < last; ++i) {
            std::uint64_t k = sorted[i] - base;
            for (std::size_t d = depth; d < count; ++d) {
              config.choice[plan.order[d]] = static_cast<std::uint32_t>(k / plan.suffix_product[d + 1]);
              k %= plan.suffix_product[d + 1];
            }
            out.push_back(config);
          }
          return;
        }
        const std::size_t p = plan.order[depth];
        const Parameter& parameter = s.parameters[p];
        for (std::uint32_t v = 0; v < parameter.numeric.size() && first < last; ++v) {
          slots[p] = static_cast<double>(parameter.numeric[v]);
          if (!all_hold(evaluator, plan.checks[depth + 1])) continue;
          const std::uint64_t below = s.count_below(plan, evaluator, depth + 1);
          const std::size_t end = static_cast<std::size_t>(
              std::lower_bound(sorted.begin() + first, sorted.begin() + last, base + below) - sorted.begin());
          if (end > first) {
            config.choice[p] = v;
            walk(depth + 1, first, end, base);
          }
          first = end;
          base += below;
        }
      };
  walk(0, 0, sorted.size(), 0);
}

}  // namespace

std::optional<Config> SearchSpace::sample(const Shape& shape, std::mt19937_64& rng) const {
  const Impl& s = *impl_;
  const EnumerationPlan& plan = s.counting;
  const std::size_t count = s.parameters.size();
  auto evaluator = s.lease();
  s.bind_shape(*evaluator, shape);
  if (!all_hold(*evaluator, plan.checks[0])) return std::nullopt;
  double* slots = evaluator->variables() + s.shape_variables.size();
  Config config;
  config.choice.assign(count, 0);

  // Rejection from the raw product: uniform over the valid configs whenever it
  // succeeds, and cheap while the acceptance rate is not tiny.
  auto attempt = [&]() {
    for (std::size_t d = 0; d < count; ++d) {
      std::size_t p = plan.order[d];
      std::uniform_int_distribution<std::uint32_t> pick(
          0, static_cast<std::uint32_t>(s.parameters[p].numeric.size() - 1));
      config.choice[p] = pick(rng);
      slots[p] = static_cast<double>(s.parameters[p].numeric[config.choice[p]]);
      if (d < plan.deepest && !all_hold(*evaluator, plan.checks[d + 1])) return false;
    }
    return true;
  };
  // 4096: a space whose valid configs are 0.2-0.3% of the raw product (the
  // flagship with SHAPE_BUCKETS and EXPAND_GEMM, or a replay's restriction of
  // it) still ends here almost always (0.9976^4096 is 0.005%), after about
  // 400 attempts of a few constraint checks each; the exact path below costs
  // a subtree count per parameter value, tens of milliseconds a draw there.
  constexpr int attempts = 4096;
  for (int i = 0; i < attempts; ++i)
    if (attempt()) return config;

  // Exact: the k-th valid config, k uniform, found by skipping whole subtrees
  // by their counts.  A mixture of two uniform draws is still uniform.
  const std::uint64_t total = s.cached_count(shape);
  if (total == 0) return std::nullopt;
  if (total == UINT64_MAX) {  // saturated count: only rejection can be exact
    for (;;)
      if (attempt()) return config;
  }
  const std::vector<std::uint64_t> k{std::uniform_int_distribution<std::uint64_t>(0, total - 1)(rng)};
  std::vector<Config> found;
  configs_at_indices(s, *evaluator, k, found);
  if (found.empty()) return std::nullopt;  // unreachable while counts are consistent
  return std::move(found.front());
}

std::vector<Config> SearchSpace::sample_many(const Shape& shape, std::mt19937_64& rng,
                                             std::size_t n) const {
  const Impl& s = *impl_;
  std::vector<Config> out;
  const std::uint64_t total = n ? s.cached_count(shape) : 0;
  if (total == 0) return out;
  out.reserve(n);
  if (total == UINT64_MAX) {  // saturated: the indices below cannot be drawn
    for (std::size_t i = 0; i < n; ++i)
      if (auto c = sample(shape, rng)) out.push_back(std::move(*c));
    return out;
  }
  // The draws as indices into the valid configs in counting order, sorted so
  // that each subtree of the walk owns a contiguous run of them.
  std::vector<std::uint64_t> index(n);
  std::uniform_int_distribution<std::uint64_t> pick(0, total - 1);
  for (std::uint64_t& k : index) k = pick(rng);
  std::sort(index.begin(), index.end());

  auto evaluator = s.lease();
  s.bind_shape(*evaluator, shape);
  if (all_hold(*evaluator, s.counting.checks[0])) configs_at_indices(s, *evaluator, index, out);
  // Sorted draws put in uniformly random order are distributed as
  // independent draws in the order made.
  for (std::size_t i = out.size(); i > 1; --i)
    std::swap(out[i - 1], out[std::uniform_int_distribution<std::size_t>(0, i - 1)(rng)]);
  return out;
}

}  // namespace mlatune
