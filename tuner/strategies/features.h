// How a config becomes the numbers a surrogate model reads (tree ensembles:
// tuner/strategies/forest.h).  Per parameter its value index: integer
// parameters list their values in order, so the index orders them as the
// values do (and trees only compare); booleans 0/1; names by index too, and
// for names of more than two values one indicator per value as well, so that
// one split can single out any one of them (the file's order of names means
// nothing).  Then what the space itself says the config launches at the
// shape: log2 of the threads per block, of the blocks, and of one plus the
// dynamic shared memory, and whether the prologue runs.  These are the same
// for every kernel family, need no knowledge of the kernel, and carry
// interactions between parameters that the parameters alone leave a tree to
// rediscover (threads per block is a product of several).
#pragma once
#include <cstddef>
#include <vector>

#include "core/space.h"
#include "tuner/strategies/forest.h"

namespace mlatune::strategies {

class ConfigFeatures {
 public:
  /// Refers to the space, which must outlive it.
  ConfigFeatures(const SearchSpace& space, const Shape& shape);
  std::size_t width() const { return width_; }
  /// Appends the features of `config` (valid at the shape) to `rows`, whose
  /// width must be width().
  void append(const Config& config, FeatureRows& rows) const;

 private:
  const SearchSpace& space_;
  Shape shape_;
  std::vector<std::size_t> one_hot_;  // per parameter: its indicators (0: none)
  bool prologue_ = false;
  std::size_t width_ = 0;
};

}  // namespace mlatune::strategies
