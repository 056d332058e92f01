#include "tuner/strategies/forest.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tuner/strategies/untried.h"

namespace mlatune::strategies {

void TreeEnsemble::fit(const FeatureRows& rows, const std::vector<double>& y, std::mt19937_64& rng) {
  nodes_.clear();
  roots_.clear();
  if (rows.size() == 0 || y.size() != rows.size()) return;
  for (int t = 0; t < options_.trees; ++t) grow(rows, y, rng);
}

// One tree, grown depth first from an explicit stack.  A node is split while
// it holds at least two leaves' worth of observations whose targets differ
// and some drawn split separates them; else it is a leaf with their mean.
void TreeEnsemble::grow(const FeatureRows& rows, const std::vector<double>& y, std::mt19937_64& rng) {
  const std::size_t width = rows.width;
  const std::size_t min_leaf = std::max<std::size_t>(1, options_.min_leaf);
  const std::size_t splits =
      options_.splits_per_node > 0 ? static_cast<std::size_t>(options_.splits_per_node) : width;
  std::vector<std::uint32_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0u);
  std::vector<std::size_t> features(width);
  std::iota(features.begin(), features.end(), std::size_t{0});
  low_.resize(width);
  high_.resize(width);

  struct Pending {
    std::uint32_t node;
    std::size_t begin, end;  // its observations: order[begin, end)
  };
  roots_.push_back(static_cast<std::uint32_t>(nodes_.size()));
  nodes_.push_back({});
  std::vector<Pending> stack{{roots_.back(), 0, order.size()}};
  while (!stack.empty()) {
    const Pending at = stack.back();
    stack.pop_back();
    const std::size_t n = at.end - at.begin;
    double sum = 0, low = y[order[at.begin]], high = low;
    for (std::size_t i = at.begin; i < at.end; ++i) {
      const double v = y[order[i]];
      sum += v;
      low = std::min(low, v);
      high = std::max(high, v);
    }
    nodes_[at.node].value = sum / static_cast<double>(n);
    if (n < 2 * min_leaf || low == high) continue;

    // One pass over the node's rows for every feature's extremes (rows are
    // contiguous), then per feature a threshold drawn between them and one
    // pass for the sum on its left.  Keep the split that reduces the squared
    // error most, the one maximizing sum_left^2 / n_left + sum_right^2 /
    // n_right.  Trying every feature, the order only breaks ties, so it is
    // drawn only when fewer are tried.
    std::fill(low_.begin(), low_.end(), std::numeric_limits<float>::infinity());
    std::fill(high_.begin(), high_.end(), -std::numeric_limits<float>::infinity());
    for (std::size_t i = at.begin; i < at.end; ++i) {
      const float* r = rows.row(order[i]);
      for (std::size_t f = 0; f < width; ++f) {
        low_[f] = std::min(low_[f], r[f]);
        high_[f] = std::max(high_[f], r[f]);
      }
    }
    int best_feature = -1;
    float best_threshold = 0;
    double best_score = -1;
    std::size_t tried = 0;
    for (std::size_t k = 0; k < width && tried < splits; ++k) {
      if (splits < width) std::swap(features[k], features[k + uniform_below(rng, width - k)]);
      const std::size_t f = features[k];
      const float fmin = low_[f], fmax = high_[f];
      if (fmin == fmax) continue;
      ++tried;
      float threshold = fmin + static_cast<float>(uniform_unit(rng)) * (fmax - fmin);
      if (threshold >= fmax) threshold = fmin;  // rounding: keep both sides non-empty
      double left_sum = 0;
      std::size_t left_n = 0;
      for (std::size_t i = at.begin; i < at.end; ++i)
        if (rows.row(order[i])[f] <= threshold) left_sum += y[order[i]], ++left_n;
      const std::size_t right_n = n - left_n;
      if (left_n < min_leaf || right_n < min_leaf) continue;
      const double right_sum = sum - left_sum;
      const double score = left_sum * left_sum / static_cast<double>(left_n) +
                           right_sum * right_sum / static_cast<double>(right_n);
      if (score > best_score) {
        best_score = score;
        best_feature = static_cast<int>(f);
        best_threshold = threshold;
      }
    }
    if (best_feature < 0) continue;
    const auto f = static_cast<std::size_t>(best_feature);
    const auto middle = std::partition(order.begin() + static_cast<std::ptrdiff_t>(at.begin),
                                       order.begin() + static_cast<std::ptrdiff_t>(at.end),
                                       [&](std::uint32_t i) { return rows.row(i)[f] <= best_threshold; });
    const auto split = static_cast<std::size_t>(middle - order.begin());
    const auto left = static_cast<std::uint32_t>(nodes_.size());
    nodes_.push_back({});
    nodes_.push_back({});
    nodes_[at.node].feature = best_feature;
    nodes_[at.node].threshold = best_threshold;
    nodes_[at.node].left = left;
    nodes_[at.node].right = left + 1;
    stack.push_back({left, at.begin, split});
    stack.push_back({left + 1, split, at.end});
  }
}

TreeEnsemble::Prediction TreeEnsemble::predict(const float* row) const {
  if (roots_.empty()) return {};
  double sum = 0, sum_squares = 0;
  for (std::uint32_t root : roots_) {
    const Node* node = &nodes_[root];
    while (node->feature >= 0)
      node = &nodes_[row[node->feature] <= node->threshold ? node->left : node->right];
    sum += node->value;
    sum_squares += node->value * node->value;
  }
  const auto trees = static_cast<double>(roots_.size());
  const double mean = sum / trees;
  return {mean, std::sqrt(std::max(0.0, sum_squares / trees - mean * mean))};
}

}  // namespace mlatune::strategies
