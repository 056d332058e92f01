#include "tuner/strategies/brute_force.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace mlatune::strategies {
namespace {

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

}  // namespace

std::unique_ptr<Strategy> make_brute_force(const SearchSpace& space, const Shape& shape,
                                           std::uint64_t /*seed: the order is fixed*/,
                                           const StrategyMemory& memory,
                                           const StrategyContext& /*context: unused*/) {
  return std::make_unique<BruteForce>(space, shape, memory);
}

}  // namespace mlatune::strategies
