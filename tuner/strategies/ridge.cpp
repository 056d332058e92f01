#include "tuner/strategies/ridge.h"

#include <algorithm>
#include <cmath>

namespace mlatune::strategies {
namespace {

// How many feature indices two sorted rows share: one entry of X X^T.
std::size_t common(const std::vector<std::size_t>& a, const std::vector<std::size_t>& b) {
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

}  // namespace

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

RidgeSurrogate::RidgeSurrogate(const SearchSpace& space) {
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

void RidgeSurrogate::fit(const std::vector<std::pair<Config, double>>& data) {
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

double RidgeSurrogate::predict(const Config& c) const {
  double y = mean_;
  for (std::size_t p = 0; p < sizes_.size(); ++p) y += weights_[single_offset_[p] + c.choice[p]];
  for (const auto& pair : pairs_)
    y += weights_[pair.offset + c.choice[pair.i] * sizes_[pair.j] + c.choice[pair.j]];
  return y;
}

std::vector<std::size_t> RidgeSurrogate::features(const Config& c) const {
  std::vector<std::size_t> out;
  for (std::size_t p = 0; p < sizes_.size(); ++p) out.push_back(single_offset_[p] + c.choice[p]);
  for (const auto& pair : pairs_)
    out.push_back(pair.offset + c.choice[pair.i] * sizes_[pair.j] + c.choice[pair.j]);
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace mlatune::strategies
