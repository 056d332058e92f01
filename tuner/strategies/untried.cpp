#include "tuner/strategies/untried.h"

#include <limits>
#include <utility>

namespace mlatune::strategies {

std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t limit =
      std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % n;
  std::uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % n;
}

Untried::Untried(const SearchSpace& space, const Shape& shape, const StrategyMemory& memory)
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

std::optional<Config> Untried::draw(std::mt19937_64& rng) {
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

}  // namespace mlatune::strategies
