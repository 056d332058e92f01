#include "tuner/strategy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "core/error.h"

namespace mlatune {
namespace {

// Uniform integer in [0, n), n > 0, by rejection: unlike
// std::uniform_int_distribution, the same on every standard library.
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t limit =
      std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % n;
  std::uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % n;
}

// Uniform double in [0, 1), from the top 53 bits.
double uniform_unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// The valid configs not yet proposed, and uniform draws among them.
class Untried {
 public:
  Untried(const SearchSpace& space, const Shape& shape, const StrategyMemory& memory)
      : space_(space), shape_(shape), total_(space.count(shape)) {
    if (total_ <= memory.max_held_configs) {
      space.for_each_valid(shape, [&](const Config& c) {
        all_.push_back(c);
        return true;
      });
      order_ = all_;
      holds_all_ = true;
      sampling_ = false;
    }
  }

  bool tried(const Config& c) const { return tried_.count(c) != 0; }
  void mark(const Config& c) { tried_.insert(c); }
  std::uint64_t remaining() const { return total_ - tried_.size(); }
  /// Every valid config, when the space is small enough to hold them.
  const std::vector<Config>* all() const { return holds_all_ ? &all_ : nullptr; }

  /// A uniform draw among the untried configs (not marked: the caller marks
  /// what it proposes); nullopt when none is left.
  std::optional<Config> draw(std::mt19937_64& rng) {
    if (remaining() == 0) return std::nullopt;
    if (sampling_) {
      // Rejection against the tried set, while it is not most of the space.
      for (int attempt = 0; attempt < 64; ++attempt) {
        auto c = space_.sample(shape_, rng);
        if (c && !tried(*c)) return c;
      }
      // Nearly exhausted: enumerate what is left and draw from that.
      space_.for_each_valid(shape_, [&](const Config& c) {
        if (!tried(c)) order_.push_back(c);
        return true;
      });
      sampling_ = false;
    }
    // A lazy Fisher-Yates shuffle of order_: the tail from position_ holds
    // every untried config, so a uniform pick from it that is not tried is a
    // uniform pick among the untried.
    while (position_ < order_.size()) {
      std::size_t pick = position_ + uniform_below(rng, order_.size() - position_);
      std::swap(order_[position_], order_[pick]);
      const Config& c = order_[position_++];
      if (!tried(c)) return c;
    }
    return std::nullopt;
  }

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

// Configs one move away: one parameter changed to an adjacent value (integer
// parameters, whose values are listed in order) or to any other value
// (booleans and names, which have no order).  Valid ones only.
std::vector<Config> neighbours(const SearchSpace& space, const Shape& shape, const Config& from) {
  std::vector<Config> out;
  const auto& parameters = space.parameters();
  for (std::size_t p = 0; p < parameters.size(); ++p) {
    const auto n = static_cast<std::uint32_t>(parameters[p].numeric.size());
    const std::uint32_t at = from.choice[p];
    auto add = [&](std::uint32_t value) {
      Config c = from;
      c.choice[p] = value;
      if (space.check(c, shape)) out.push_back(std::move(c));
    };
    if (parameters[p].kind == ValueKind::integer) {
      if (at > 0) add(at - 1);
      if (at + 1 < n) add(at + 1);
    } else {
      for (std::uint32_t v = 0; v < n; ++v)
        if (v != at) add(v);
    }
  }
  return out;
}

// ---- brute force -------------------------------------------------------------

class BruteForce final : public Strategy {
 public:
  BruteForce(const SearchSpace& space, const Shape& shape, const StrategyMemory& memory)
      : space_(space),
        shape_(shape),
        chunk_size_(std::max<std::uint64_t>(1, memory.max_held_configs)) {}

  std::optional<Config> next() override {
    if (position_ == chunk_.size()) refill();
    if (position_ == chunk_.size()) return std::nullopt;
    return chunk_[position_++];
  }
  void observe(const Config&, std::optional<double>) override {}

 private:
  // The next chunk of valid configs after the last one proposed, so that a
  // huge space is never held in memory at once.
  void refill() {
    if (!chunk_.empty()) last_ = chunk_.back();
    chunk_.clear();
    position_ = 0;
    space_.for_each_valid(shape_, [&](const Config& c) {
      if (last_ && !(*last_ < c)) return true;
      chunk_.push_back(c);
      return chunk_.size() < chunk_size_;
    });
  }

  const SearchSpace& space_;
  Shape shape_;
  std::uint64_t chunk_size_;
  std::vector<Config> chunk_;
  std::size_t position_ = 0;
  std::optional<Config> last_;  // the last config of the previous chunk
};

// ---- random ------------------------------------------------------------------

class RandomSearch final : public Strategy {
 public:
  RandomSearch(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
               const StrategyMemory& memory)
      : untried_(space, shape, memory), rng_(seed) {}

  std::optional<Config> next() override {
    auto c = untried_.draw(rng_);
    if (c) untried_.mark(*c);
    return c;
  }
  void observe(const Config&, std::optional<double>) override {}

 private:
  Untried untried_;
  std::mt19937_64 rng_;
};

// ---- simulated annealing -------------------------------------------------------

// Works on log(time), so that the temperature is a relative slowdown: at
// temperature T a move that is 100*T % slower is accepted with probability 1/e.
// A failed config is never accepted as the current point.  When the current
// point has no untried valid neighbour, or the best has not improved for a
// while, it restarts: alternately from the best config seen that still has
// untried neighbours (intensify) and from a fresh random config (diversify).
class Annealing final : public Strategy {
 public:
  Annealing(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
            const StrategyMemory& memory)
      : space_(space), shape_(shape), untried_(space, shape, memory), rng_(seed) {}

  std::optional<Config> next() override {
    if (untried_.remaining() == 0) return std::nullopt;
    if (current_ && since_improvement_ < kPatience) {
      if (auto move = untried_neighbour(current_->config)) return propose(std::move(*move));
    }
    // Restart.
    since_improvement_ = 0;
    temperature_ = kStartTemperature;
    current_.reset();
    if (++restarts_ % 2 == 0) {
      // A config whose neighbours are all tried stays so: drop it, so that
      // restarts late in a long run do not rescan it.
      for (auto at = ok_by_time_.begin(); at != ok_by_time_.end(); at = ok_by_time_.erase(at)) {
        if (auto move = untried_neighbour(at->second)) {
          current_ = Point{at->second, at->first};
          return propose(std::move(*move));
        }
      }
    }
    auto c = untried_.draw(rng_);
    if (!c) return std::nullopt;
    return propose(std::move(*c));
  }

  void observe(const Config& config, std::optional<double> time_us) override {
    if (!time_us) {
      ++since_improvement_;
      return;
    }
    const double log_time = std::log(std::max(*time_us, 1e-12));
    ok_by_time_.emplace(log_time, config);
    if (!best_ || log_time < *best_) {
      best_ = log_time;
      since_improvement_ = 0;
    } else {
      ++since_improvement_;
    }
    if (!current_) {
      current_ = Point{config, log_time};
    } else {
      const double delta = log_time - current_->log_time;
      if (delta <= 0 || uniform_unit(rng_) < std::exp(-delta / temperature_))
        current_ = Point{config, log_time};
    }
    temperature_ = std::max(kMinTemperature, temperature_ * kCooling);
  }

 private:
  static constexpr double kStartTemperature = 0.05;
  static constexpr double kMinTemperature = 0.002;
  static constexpr double kCooling = 0.95;
  static constexpr int kPatience = 40;

  struct Point {
    Config config;
    double log_time;
  };

  std::optional<Config> untried_neighbour(const Config& from) {
    std::vector<Config> options;
    for (auto& c : neighbours(space_, shape_, from))
      if (!untried_.tried(c)) options.push_back(std::move(c));
    if (options.empty()) return std::nullopt;
    return options[uniform_below(rng_, options.size())];
  }

  Config propose(Config c) {
    untried_.mark(c);
    return c;
  }

  const SearchSpace& space_;
  Shape shape_;
  Untried untried_;
  std::mt19937_64 rng_;
  std::optional<Point> current_;
  std::optional<double> best_;
  std::multimap<double, Config> ok_by_time_;  // restart points, fastest first
  double temperature_ = kStartTemperature;
  int since_improvement_ = 0;
  int restarts_ = 0;
};

// ---- model-based ---------------------------------------------------------------

// Solves (A) x = b in place for a symmetric positive definite n x n A (row
// major) by Cholesky; A is overwritten.  The ridge term keeps A positive
// definite, so the factorization cannot fail on a non-positive pivot except
// through rounding, which is clamped.
std::vector<double> solve_spd(std::vector<double>& a, std::vector<double> b, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (std::size_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    d = std::sqrt(std::max(d, 1e-12));
    a[j * n + j] = d;
    for (std::size_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      const double* ri = &a[i * n];
      const double* rj = &a[j * n];
      for (std::size_t k = 0; k < j; ++k) s -= ri[k] * rj[k];
      a[i * n + j] = s / d;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {  // L y = b
    double s = b[i];
    for (std::size_t k = 0; k < i; ++k) s -= a[i * n + k] * b[k];
    b[i] = s / a[i * n + i];
  }
  for (std::size_t i = n; i-- > 0;) {  // L^T x = y
    double s = b[i];
    for (std::size_t k = i + 1; k < n; ++k) s -= a[k * n + i] * b[k];
    b[i] = s / a[i * n + i];
  }
  return b;
}

// A surrogate of log(time): ridge regression on one-hot parameter values plus
// one-hot pairs of values of two parameters (interactions: on a GPU the best
// tile size depends on the thread count).  Each config activates one feature
// per parameter and one per pair, so the design matrix is handled sparsely.
class Surrogate {
 public:
  explicit Surrogate(const SearchSpace& space) {
    const auto& parameters = space.parameters();
    std::size_t next = 0;
    for (const auto& p : parameters) {
      single_offset_.push_back(next);
      sizes_.push_back(p.numeric.size());
      next += p.numeric.size();
    }
    // All pairs while the feature count stays modest; the Cholesky solve is
    // cubic in it.
    for (std::size_t i = 0; i < parameters.size(); ++i)
      for (std::size_t j = i + 1; j < parameters.size(); ++j) {
        if (next + sizes_[i] * sizes_[j] > kMaxFeatures) continue;
        pairs_.push_back({i, j, next});
        next += sizes_[i] * sizes_[j];
      }
    feature_count_ = next;
    weights_.assign(feature_count_, 0.0);
  }

  /// Fits to (config, log time) pairs.
  void fit(const std::vector<std::pair<Config, double>>& data) {
    const std::size_t n = data.size();
    if (n == 0) return;
    mean_ = 0;
    for (const auto& [c, y] : data) mean_ += y;
    mean_ /= static_cast<double>(n);
    std::vector<std::vector<std::size_t>> rows;
    rows.reserve(n);
    for (const auto& [c, y] : data) rows.push_back(features(c));
    std::vector<double> centred(n);
    for (std::size_t r = 0; r < n; ++r) centred[r] = data[r].second - mean_;

    weights_.assign(feature_count_, 0.0);
    if (n <= feature_count_) {
      // Dual form: (X X^T + lambda I) alpha = y, w = X^T alpha.  Rows hold
      // sorted feature indices of equal count, so X X^T is a merge count.
      std::vector<double> k(n * n);
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j <= i; ++j) {
          double shared = static_cast<double>(common(rows[i], rows[j]));
          if (i == j) shared += kLambda;
          k[i * n + j] = k[j * n + i] = shared;
        }
      auto alpha = solve_spd(k, centred, n);
      for (std::size_t r = 0; r < n; ++r)
        for (std::size_t f : rows[r]) weights_[f] += alpha[r];
    } else {
      // Primal form: (X^T X + lambda I) w = X^T y.
      const std::size_t p = feature_count_;
      std::vector<double> a(p * p, 0.0);
      std::vector<double> b(p, 0.0);
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t f : rows[r]) {
          b[f] += centred[r];
          for (std::size_t g : rows[r]) a[f * p + g] += 1.0;
        }
      }
      for (std::size_t f = 0; f < p; ++f) a[f * p + f] += kLambda;
      weights_ = solve_spd(a, b, p);
    }
  }

  double predict(const Config& c) const {
    double y = mean_;
    for (std::size_t p = 0; p < sizes_.size(); ++p) y += weights_[single_offset_[p] + c.choice[p]];
    for (const auto& pair : pairs_)
      y += weights_[pair.offset + c.choice[pair.i] * sizes_[pair.j] + c.choice[pair.j]];
    return y;
  }

 private:
  static constexpr std::size_t kMaxFeatures = 1024;
  static constexpr double kLambda = 1.0;

  struct Pair {
    std::size_t i, j, offset;
  };

  std::vector<std::size_t> features(const Config& c) const {
    std::vector<std::size_t> out;
    for (std::size_t p = 0; p < sizes_.size(); ++p) out.push_back(single_offset_[p] + c.choice[p]);
    for (const auto& pair : pairs_)
      out.push_back(pair.offset + c.choice[pair.i] * sizes_[pair.j] + c.choice[pair.j]);
    std::sort(out.begin(), out.end());
    return out;
  }

  static std::size_t common(const std::vector<std::size_t>& a, const std::vector<std::size_t>& b) {
    std::size_t count = 0, i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
      if (a[i] < b[j])
        ++i;
      else if (b[j] < a[i])
        ++j;
      else
        ++count, ++i, ++j;
    }
    return count;
  }

  std::vector<std::size_t> sizes_;
  std::vector<std::size_t> single_offset_;
  std::vector<Pair> pairs_;
  std::size_t feature_count_ = 0;
  std::vector<double> weights_;
  double mean_ = 0;
};

// A few random configs first, then the untried config the surrogate predicts
// fastest, with a small chance of a random one instead (exploration).  The
// candidates are every untried valid config when the space is small enough to
// enumerate, else a fresh random pool plus the neighbours of the best so far.
// The fit is redone when the observations have grown by an eighth, so a long
// run costs a few dozen fits, not one per observation.
class ModelBased final : public Strategy {
 public:
  ModelBased(const SearchSpace& space, const Shape& shape, std::uint64_t seed,
             const StrategyMemory& memory)
      : space_(space),
        shape_(shape),
        untried_(space, shape, memory),
        rng_(seed),
        surrogate_(space) {}

  std::optional<Config> next() override {
    if (untried_.remaining() == 0) return std::nullopt;
    if (observations_.size() < kInitialRandom || uniform_unit(rng_) < kExploration) {
      auto c = untried_.draw(rng_);
      if (c) untried_.mark(*c);
      return c;
    }
    if (observations_.size() >= fitted_at_ + std::max<std::size_t>(1, fitted_at_ / 8)) refit();
    while (ranked_ < ranking_.size()) {
      const Config& c = candidates()[ranking_[ranked_++]];
      if (!untried_.tried(c)) {
        untried_.mark(c);
        return c;
      }
    }
    // Every candidate of the pool is tried (large spaces only).
    auto c = untried_.draw(rng_);
    if (c) untried_.mark(*c);
    return c;
  }

  void observe(const Config& config, std::optional<double> time_us) override {
    if (time_us) {
      double y = std::log(std::max(*time_us, 1e-12));
      slowest_ = std::max(slowest_, y);
      observations_.push_back({config, y});
    } else {
      observations_.push_back({config, std::nullopt});
    }
  }

 private:
  static constexpr std::size_t kInitialRandom = 10;
  static constexpr double kExploration = 0.05;
  static constexpr std::size_t kPoolSize = 2000;
  // A failed config counts as this factor slower than the slowest measured.
  static constexpr double kFailurePenalty = 1.3862943611198906;  // log(4)

  void refit() {
    std::vector<std::pair<Config, double>> data;
    data.reserve(observations_.size());
    for (const auto& [c, y] : observations_)
      data.push_back({c, y ? *y : slowest_ + kFailurePenalty});
    surrogate_.fit(data);
    fitted_at_ = observations_.size();
    if (!untried_.all()) refresh_pool(data);
    // Predictions change only here, so rank the candidates once per fit;
    // next() walks the ranking, skipping what was tried since.
    const auto& pool = candidates();
    std::vector<std::pair<double, std::size_t>> predicted;
    predicted.reserve(pool.size());
    for (std::size_t i = 0; i < pool.size(); ++i)
      if (!untried_.tried(pool[i])) predicted.push_back({surrogate_.predict(pool[i]), i});
    std::sort(predicted.begin(), predicted.end());
    ranking_.clear();
    for (const auto& [y, i] : predicted) ranking_.push_back(i);
    ranked_ = 0;
  }

  const std::vector<Config>& candidates() const {
    const auto* all = untried_.all();
    return all ? *all : pool_;
  }

  void refresh_pool(const std::vector<std::pair<Config, double>>& data) {
    std::set<Config> pool;
    for (std::size_t i = 0; i < kPoolSize; ++i)
      if (auto c = space_.sample(shape_, rng_)) pool.insert(std::move(*c));
    std::vector<std::pair<double, Config>> by_time;
    for (const auto& [c, y] : data) by_time.push_back({y, c});
    std::sort(by_time.begin(), by_time.end());
    for (std::size_t i = 0; i < std::min<std::size_t>(5, by_time.size()); ++i)
      for (auto& c : neighbours(space_, shape_, by_time[i].second)) pool.insert(std::move(c));
    pool_.assign(pool.begin(), pool.end());
  }

  const SearchSpace& space_;
  Shape shape_;
  Untried untried_;
  std::mt19937_64 rng_;
  Surrogate surrogate_;
  std::vector<std::pair<Config, std::optional<double>>> observations_;
  double slowest_ = 0;
  std::size_t fitted_at_ = 0;
  std::vector<Config> pool_;          // candidates, when the space is not held whole
  std::vector<std::size_t> ranking_;  // candidates by prediction, fastest first
  std::size_t ranked_ = 0;            // ranking_ before this was walked
};

}  // namespace

std::string_view to_string(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::brute_force:
      return "brute_force";
    case StrategyKind::random:
      return "random";
    case StrategyKind::annealing:
      return "annealing";
    case StrategyKind::model:
      return "model";
  }
  return "unknown";
}

const std::vector<StrategyKind>& all_strategy_kinds() {
  static const std::vector<StrategyKind> kinds = {StrategyKind::brute_force, StrategyKind::random,
                                                  StrategyKind::annealing, StrategyKind::model};
  return kinds;
}

StrategyKind parse_strategy_kind(std::string_view name) {
  std::string valid;
  for (StrategyKind kind : all_strategy_kinds()) {
    if (to_string(kind) == name) return kind;
    if (!valid.empty()) valid += ", ";
    valid += to_string(kind);
  }
  throw InputError(fmt::format("unknown strategy '{}' (valid: {})", name, valid));
}

std::unique_ptr<Strategy> make_strategy(StrategyKind kind, const SearchSpace& space,
                                        const Shape& shape, std::uint64_t seed,
                                        StrategyMemory memory) {
  switch (kind) {
    case StrategyKind::brute_force:
      return std::make_unique<BruteForce>(space, shape, memory);
    case StrategyKind::random:
      return std::make_unique<RandomSearch>(space, shape, seed, memory);
    case StrategyKind::annealing:
      return std::make_unique<Annealing>(space, shape, seed, memory);
    case StrategyKind::model:
      return std::make_unique<ModelBased>(space, shape, seed, memory);
  }
  throw InputError("unknown strategy kind");
}

}  // namespace mlatune
