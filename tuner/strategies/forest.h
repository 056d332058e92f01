// A tree ensemble for surrogate models: extremely randomized trees (Geurts,
// Ernst and Wehenkel, 2006), regression trees each grown on all the data
// with split thresholds drawn at random between a feature's extremes in the
// node, the best of a few such splits kept.  Trees grown this way disagree
// where the data say little, so the spread of their predictions is a usable
// uncertainty (what Bayesian optimization needs), and a tree learns the
// sharp, interacting effects of tuning parameters (an algorithm switch, a
// tile size that stops fitting) that a smooth model blurs.  On 0/1 targets
// the mean is a probability (a classifier).
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace mlatune::strategies {

/// Rows of features, row-major: row i is x[i * width, (i + 1) * width).
struct FeatureRows {
  std::size_t width = 0;
  std::vector<float> x;
  std::size_t size() const { return width == 0 ? 0 : x.size() / width; }
  const float* row(std::size_t i) const { return x.data() + i * width; }
};

class TreeEnsemble {
 public:
  struct Options {
    int trees = 32;
    /// Random splits tried per node, the best kept; 0: one per feature.
    int splits_per_node = 0;
    std::size_t min_leaf = 1;  // observations at least in each leaf
  };

  /// The mean over the trees and the standard deviation between them.
  struct Prediction {
    double mean = 0;
    double spread = 0;
  };

  TreeEnsemble() = default;
  explicit TreeEnsemble(Options options) : options_(options) {}

  /// Fits `y` (one target per row of `rows`, at least one row), replacing
  /// any earlier fit.  Deterministic for the state of `rng`.
  void fit(const FeatureRows& rows, const std::vector<double>& y, std::mt19937_64& rng);
  bool fitted() const { return !roots_.empty(); }
  /// The prediction for one row of the same width as the fitted rows.
  Prediction predict(const float* row) const;


 private:
  struct Node {
    int feature = -1;  // -1: a leaf
    float threshold = 0;
    std::uint32_t left = 0, right = 0;  // children (indices into nodes_)
    double value = 0;                   // a leaf's mean target
  };
  void grow(const FeatureRows& rows, const std::vector<double>& y, std::mt19937_64& rng);

  Options options_;
  std::vector<Node> nodes_;            // every tree's nodes
  std::vector<std::uint32_t> roots_;   // each tree's root in nodes_
  std::vector<float> low_, high_;      // scratch: a node's extremes per feature
};

}  // namespace mlatune::strategies
