// Ridge regression for the model-based strategy: a Cholesky solver and a
// surrogate of log(time) over one-hot parameter values and value pairs.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "core/space.h"

namespace mlatune::strategies {

/// Solves A x = b for a symmetric positive definite n x n A (row major) by
/// Cholesky; A is overwritten.  The ridge term keeps A positive definite, so
/// the factorization cannot fail on a non-positive pivot except through
/// rounding, which is clamped.
std::vector<double> solve_spd(std::vector<double>& a, std::vector<double> b, std::size_t n);

/// A surrogate of log(time): ridge regression on one-hot parameter values plus
/// one-hot pairs of values of two parameters (interactions: on a GPU the best
/// tile size depends on the thread count).  Each config activates one feature
/// per parameter and one per pair, so the design matrix is handled sparsely.
class RidgeSurrogate {
 public:
  explicit RidgeSurrogate(const SearchSpace& space);

  /// Fits to (config, log time) pairs.
  void fit(const std::vector<std::pair<Config, double>>& data);
  double predict(const Config& c) const;

 private:
  static constexpr std::size_t kMaxFeatures = 1024;
  static constexpr double kLambda = 1.0;

  struct Pair {
    std::size_t i, j, offset;
  };

  std::vector<std::size_t> features(const Config& c) const;

  std::vector<std::size_t> sizes_;
  std::vector<std::size_t> single_offset_;
  std::vector<Pair> pairs_;
  std::size_t feature_count_ = 0;
  std::vector<double> weights_;
  double mean_ = 0;
};

}  // namespace mlatune::strategies
