#include "tuner/strategies/bayes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <utility>

#include "tuner/strategies/features.h"
#include "tuner/strategies/forest.h"
#include "tuner/strategies/untried.h"

namespace mlatune::strategies {
namespace {

// Phases, in order:
//   1. warm start: the configs tuned at other shapes (StrategyContext::
//      warm_start), as given;
//   2. design: configs spread over the space, each the one of a few random
//      untried configs that shows the most parameter values not measured
//      yet, then the farthest (in parameters changed) from everything
//      proposed.  It goes on past its size while a value of a name
//      parameter (an algorithm, say) that still has untried configs has not
//      been measured, for at most twice its size more: a rare algorithm
//      (tf32x3 is 3.5 % of S0's configs and its fastest) must be seen once
//      before a model can rank it.  It also goes on until two configs ran:
//      with failures only there is nothing to model times with.  Values a
//      nearby shape found slow as a whole (StrategyContext::costly_values)
//      are left out of it: those configs are proposed blind (before results
//      are in), and a slow algorithm's random config can take seconds a
//      launch; the warm start carries each one's fastest config there;
//   3. model: two tree ensembles refitted on everything measured, one of
//      log(time) over the configs that ran, one of whether a config runs
//      (compile errors, wrong results and crashes are failures), and in
//      turn:
//        global: the untried candidate with the best acquisition;
//        local:  the best untried one-move neighbour of an incumbent;
//        pair:   the best untried config two moves from an incumbent;
//      where the acquisition is P(runs) times exp(best log time - (mean -
//      spread)): a lower confidence bound one spread (standard deviation
//      between the trees) below the predicted log time, as a speedup over
//      the best so far.  The incumbents, taken in turn, are the fastest
//      config and, for each value of a name parameter, the fastest with it
//      where that is within 25 % of the fastest: the best of a second
//      algorithm is a second basin.
// Why this mix: on the recorded H200 sweeps, expected improvement explored
// the wide spread of slow regions and found S0's optimum in a median 135
// evaluations over 30 seeds, the lower bound in 27; the searches around
// incumbents cut the tails where the model alone stayed in the basin of a
// good second algorithm (the optimum two parameters away from where the
// model looked).
// The candidates are every untried valid config when the space is held
// whole, else a pool: fresh random configs, the untried one-move neighbours
// of the incumbents, and the best of the last pool.  Predictions are redone
// per fit, which comes when the observations have grown by a 32nd (at least
// one): a long search costs about a hundred fits, and a proposal is a pass
// over cached predictions.  Proposals made before their predecessors'
// results are in (a sweep's lookahead) take the next best.
class Bayes final : public Strategy {
 public:
  Bayes(const SearchSpace& space, const Shape& shape, std::uint64_t seed, const StrategyMemory& memory,
        const StrategyContext& context)
      : space_(space),
        shape_(shape),
        untried_(space, shape, memory),
        rng_(seed),
        features_(space, shape),
        warm_(context.warm_start),
        costly_(context.costly_values.begin(), context.costly_values.end()),
        regression_({.trees = kTrees}),
        classifier_({.trees = kTrees}) {
    observed_.width = features_.width();
    candidate_rows_.width = features_.width();
    for (const Parameter& p : space.parameters()) {
      measured_.emplace_back(p.numeric.size(), false);
      untried_with_.emplace_back(p.numeric.size(), 0);
    }
    if (const auto* all = untried_.all())
      for (const Config& c : *all) {
        features_.append(c, candidate_rows_);
        for (std::size_t p = 0; p < c.choice.size(); ++p) ++untried_with_[p][c.choice[p]];
      }
    std::size_t design = std::clamp<std::size_t>(2 * space.parameters().size(), kDesignMin, kDesignMax);
    if (context.max_evals)
      design = std::min<std::size_t>(design, std::max<std::uint64_t>(3, *context.max_evals / 4));
    // Warm-start configs stand in for up to half of the design.
    design_size_ = warm_.size() + std::max(design - std::min(design, warm_.size()), design / 2);
    design_limit_ = design_size_ + 2 * design;
    // A small budget is mostly the model's.
    if (context.max_evals)
      design_limit_ = std::min<std::size_t>(design_limit_, std::max<std::uint64_t>(design_size_, *context.max_evals / 2));
  }

  std::optional<Config> next() override {
    if (untried_.remaining() == 0) return std::nullopt;
    while (warm_next_ < warm_.size()) {
      const Config& c = warm_[warm_next_++];
      if (!untried_.tried(c) && space_.check(c, shape_)) return propose(c);
    }
    if (in_design())
      if (auto c = design_pick()) return propose(std::move(*c));
    if (ok_ >= 2) {
      if (!fitted_at_ || observed_.size() >= *fitted_at_ + std::max<std::size_t>(1, observed_.size() / 32))
        refit();
      const Step step = kSteps[model_steps_++ % std::size(kSteps)];
      if (step != Step::global)
        if (auto c = local_pick(step == Step::pair)) return propose(std::move(*c));
      if (auto c = global_pick()) return propose(std::move(*c));
    }
    // Nothing modelled is left untried (a pool, late in a large space): a
    // uniform draw.
    auto c = untried_.draw(rng_);
    if (!c) return std::nullopt;
    return propose(std::move(*c));
  }

  void observe(const Config& config, std::optional<double> time_us) override {
    features_.append(config, observed_);
    observed_configs_.push_back(config);
    runs_.push_back(time_us ? 1.0 : 0.0);
    log_times_.push_back(time_us ? std::log(std::max(*time_us, 1e-12)) : 0.0);
    for (std::size_t p = 0; p < config.choice.size(); ++p) measured_[p][config.choice[p]] = true;
    if (time_us) {
      ++ok_;
      best_ = std::min(best_, log_times_.back());
    }
  }

 private:
  enum class Step { global, local, pair };
  static constexpr Step kSteps[] = {Step::global, Step::local, Step::pair};
  static constexpr int kTrees = 32;
  static constexpr std::size_t kDesignMin = 8, kDesignMax = 24;
  static constexpr int kDesignDraws = 64;       // random candidates per design pick
  static constexpr double kKappa = 1.0;         // spreads below the mean: the lower bound
  static constexpr double kBasinMargin = 0.25;  // a second algorithm's best within this of the best
  static constexpr std::size_t kPoolFresh = 500, kPoolKept = 1500;

  Config propose(Config c) {
    untried_.mark(c);
    if (untried_.all())
      for (std::size_t p = 0; p < c.choice.size(); ++p) --untried_with_[p][c.choice[p]];
    proposed_.push_back(c);
    return c;
  }

  bool in_design() const {
    if (proposed_.size() < design_size_ || ok_ < 2) return true;
    if (proposed_.size() >= design_limit_ || !untried_.all()) return false;
    for (std::size_t p = 0; p < measured_.size(); ++p)
      if (space_.parameters()[p].kind == ValueKind::name)
        for (std::size_t v = 0; v < measured_[p].size(); ++v)
          if (!measured_[p][v] && untried_with_[p][v] > 0 && !costly_.count({p, static_cast<std::uint32_t>(v)}))
            return true;
    return false;
  }

  /// Whether `c` has a value a nearby shape found slow as a whole
  /// (StrategyContext::costly_values): the design leaves it out.
  bool costly(const Config& c) const {
    for (std::size_t p = 0; p < c.choice.size() && !costly_.empty(); ++p)
      if (costly_.count({p, c.choice[p]})) return true;
    return false;
  }

  /// A uniform draw among the valid configs (nullopt after a few misses
  /// against tried ones), without consuming Untried's shuffled order.
  std::optional<Config> random_untried() {
    for (int attempt = 0; attempt < 8; ++attempt) {
      std::optional<Config> c;
      if (const auto* all = untried_.all())
        c = (*all)[uniform_below(rng_, all->size())];
      else
        c = space_.sample(shape_, rng_);
      if (c && !untried_.tried(*c)) return c;
    }
    return std::nullopt;
  }

  std::optional<Config> design_pick() {
    std::optional<Config> best;
    std::pair<std::size_t, std::size_t> best_score{0, 0};  // (values not measured, distance to proposed)
    for (int draw = 0; draw < kDesignDraws; ++draw) {
      std::optional<Config> c = random_untried();
      if (!c || costly(*c)) continue;
      std::size_t fresh = 0;
      for (std::size_t p = 0; p < c->choice.size(); ++p) fresh += measured_[p][c->choice[p]] ? 0 : 1;
      std::size_t distance = std::numeric_limits<std::size_t>::max();
      for (const Config& other : proposed_) {
        std::size_t d = 0;
        for (std::size_t p = 0; p < c->choice.size(); ++p) d += c->choice[p] != other.choice[p];
        distance = std::min(distance, d);
      }
      const std::pair<std::size_t, std::size_t> score{fresh, distance};
      if (!best || score > best_score) {
        best = std::move(c);
        best_score = score;
      }
    }
    return best;
  }

  /// Larger is better: P(runs) x exp(best - lower bound of the log time).
  double acquisition(double mean, double spread, double runs) const {
    return runs * std::exp(best_ - (mean - kKappa * spread));
  }

  struct Scored {
    double acquisition, mean;
    std::uint64_t tie;  // equal scores (a flat model) in a random order, not the enumeration's
    bool operator>(const Scored& o) const {
      if (acquisition != o.acquisition) return acquisition > o.acquisition;
      if (mean != o.mean) return mean < o.mean;
      return tie < o.tie;
    }
  };

  Scored score(const float* row) {
    const TreeEnsemble::Prediction time = regression_.predict(row);
    const double runs = failures_ ? std::clamp(classifier_.predict(row).mean, 0.0, 1.0) : 1.0;
    return {acquisition(time.mean, time.spread, runs), time.mean, rng_()};
  }

  std::optional<Config> global_pick() const {
    std::optional<std::size_t> best;
    const std::vector<Config>& pool = candidates();
    for (std::size_t i = 0; i < pool.size(); ++i)
      if (!untried_.tried(pool[i]) && (!best || scores_[i] > scores_[*best])) best = i;
    if (!best) return std::nullopt;
    return pool[*best];
  }

  /// Observations to search around: the fastest, then for each value of a
  /// name parameter the fastest with that value within the margin of the
  /// fastest; fastest first.
  std::vector<std::size_t> incumbents() const {
    std::vector<std::pair<double, std::size_t>> fastest;
    for (std::size_t i = 0; i < runs_.size(); ++i)
      if (runs_[i] != 0) fastest.emplace_back(log_times_[i], i);
    std::sort(fastest.begin(), fastest.end());
    std::vector<std::size_t> out;
    std::set<std::pair<std::size_t, std::uint32_t>> seen;  // (name parameter, value) with an incumbent
    const auto& parameters = space_.parameters();
    for (const auto& [log_time, i] : fastest) {
      if (log_time > best_ + std::log1p(kBasinMargin)) break;
      bool take = out.empty();
      for (std::size_t p = 0; p < parameters.size(); ++p)
        if (parameters[p].kind == ValueKind::name && seen.insert({p, observed_configs_[i].choice[p]}).second)
          take = true;
      if (take) out.push_back(i);
    }
    return out;
  }

  /// Untried valid configs one move from `from` (neighbours()), or two:
  /// every pair of moves, whether the config after the first is valid or not.
  std::vector<Config> moves(const Config& from, bool two) const {
    if (!two) {
      std::vector<Config> out;
      for (Config& c : neighbours(space_, shape_, from))
        if (!untried_.tried(c)) out.push_back(std::move(c));
      return out;
    }
    const auto& parameters = space_.parameters();
    auto values = [&](std::size_t p) {  // the values a move of p reaches
      std::vector<std::uint32_t> out;
      const std::uint32_t at = from.choice[p];
      const auto n = static_cast<std::uint32_t>(parameters[p].numeric.size());
      if (parameters[p].kind == ValueKind::integer) {
        if (at > 0) out.push_back(at - 1);
        if (at + 1 < n) out.push_back(at + 1);
      } else {
        for (std::uint32_t v = 0; v < n; ++v)
          if (v != at) out.push_back(v);
      }
      return out;
    };
    std::vector<Config> out;
    for (std::size_t p = 0; p < parameters.size(); ++p)
      for (std::uint32_t v : values(p))
        for (std::size_t q = p + 1; q < parameters.size(); ++q)
          for (std::uint32_t w : values(q)) {
            Config c = from;
            c.choice[p] = v;
            c.choice[q] = w;
            if (!untried_.tried(c) && space_.check(c, shape_)) out.push_back(std::move(c));
          }
    return out;
  }

  /// The best untried config one move (or two) from an incumbent, the
  /// incumbents taken in turn.
  std::optional<Config> local_pick(bool two) {
    const std::vector<std::size_t> around = incumbents();
    for (std::size_t k = 0; k < around.size(); ++k) {
      const std::size_t at = around[(local_turn_ + k) % around.size()];
      const std::vector<Config> options = moves(observed_configs_[at], two);
      if (options.empty()) continue;
      FeatureRows rows{features_.width(), {}};
      for (const Config& c : options) features_.append(c, rows);
      std::size_t best = 0;
      Scored best_score = score(rows.row(0));
      for (std::size_t i = 1; i < options.size(); ++i) {
        const Scored s = score(rows.row(i));
        if (s > best_score) best = i, best_score = s;
      }
      local_turn_ = (local_turn_ + k + 1) % around.size();
      return options[best];
    }
    return std::nullopt;
  }

  const std::vector<Config>& candidates() const {
    const auto* all = untried_.all();
    return all ? *all : pool_;
  }

  void refit() {
    fitted_at_ = observed_.size();
    FeatureRows ran{observed_.width, {}};
    std::vector<double> ran_log_times;
    for (std::size_t i = 0; i < runs_.size(); ++i) {
      if (runs_[i] == 0) continue;
      ran.x.insert(ran.x.end(), observed_.row(i), observed_.row(i) + observed_.width);
      ran_log_times.push_back(log_times_[i]);
    }
    regression_.fit(ran, ran_log_times, rng_);
    failures_ = ok_ < runs_.size();
    if (failures_) classifier_.fit(observed_, runs_, rng_);
    if (!untried_.all()) refresh_pool();
    // Predictions change only here: keep them per candidate, so that a
    // proposal is one pass over the candidates.
    const std::vector<Config>& pool = candidates();
    scores_.assign(pool.size(), Scored{0, 0, 0});
    for (std::size_t i = 0; i < pool.size(); ++i)
      if (!untried_.tried(pool[i])) scores_[i] = score(candidate_rows_.row(i));
  }

  // The best of the last pool (by its last scores), fresh random configs
  // and the incumbents' neighbours: a pool that follows the search without
  // drawing thousands of samples per fit.
  void refresh_pool() {
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < pool_.size(); ++i)
      if (!untried_.tried(pool_[i])) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores_[a] > scores_[b]; });
    std::set<Config> pool;
    for (std::size_t k = 0; k < std::min(kPoolKept, order.size()); ++k) pool.insert(pool_[order[k]]);
    for (Config& c : space_.sample_many(shape_, rng_, kPoolFresh))
      if (!untried_.tried(c)) pool.insert(std::move(c));
    for (std::size_t at : incumbents())
      for (Config& c : moves(observed_configs_[at], false)) pool.insert(std::move(c));
    pool_.assign(pool.begin(), pool.end());
    candidate_rows_.x.clear();
    for (const Config& c : pool_) features_.append(c, candidate_rows_);
  }

  const SearchSpace& space_;
  Shape shape_;
  Untried untried_;
  std::mt19937_64 rng_;
  ConfigFeatures features_;
  std::vector<Config> warm_;
  std::set<std::pair<std::size_t, std::uint32_t>> costly_;  // left out of the design
  std::size_t warm_next_ = 0;
  std::size_t design_size_ = 0;   // proposals before the model phase, warm start included
  std::size_t design_limit_ = 0;  // ... at most, while name values are unmeasured
  std::vector<std::vector<bool>> measured_;            // per parameter and value: observed
  std::vector<std::vector<std::size_t>> untried_with_;  // per parameter and value: untried (held spaces)
  std::vector<Config> proposed_;

  FeatureRows observed_;  // one row per observation, in order
  std::vector<Config> observed_configs_;
  std::vector<double> runs_;       // 1: ran (a time), 0: failed
  std::vector<double> log_times_;  // where it ran
  std::size_t ok_ = 0;
  double best_ = std::numeric_limits<double>::infinity();

  TreeEnsemble regression_, classifier_;
  bool failures_ = false;                 // the classifier is fitted (some config failed)
  std::optional<std::size_t> fitted_at_;  // observations at the last fit
  std::vector<Config> pool_;              // candidates when the space is not held
  FeatureRows candidate_rows_;            // features of candidates(), in order
  std::vector<Scored> scores_;            // per candidate, from the last fit
  std::size_t model_steps_ = 0;
  std::size_t local_turn_ = 0;  // the incumbent the next local step starts from
};

}  // namespace

std::unique_ptr<Strategy> make_bayes(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
                                     const StrategyMemory& memory, const StrategyContext& context) {
  return std::make_unique<Bayes>(space, shape, seed, memory, context);
}

}  // namespace mlatune::strategies
