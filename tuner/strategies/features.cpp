#include "tuner/strategies/features.h"

#include <algorithm>
#include <cmath>

namespace mlatune::strategies {
namespace {

constexpr std::size_t kGeometryFeatures = 3;  // threads per block, blocks, shared memory

float log2_of(double value) { return static_cast<float>(std::log2(std::max(1.0, value))); }

}  // namespace

ConfigFeatures::ConfigFeatures(const SearchSpace& space, const Shape& shape)
    : space_(space), shape_(shape), prologue_(space.prologue().has_value()) {
  for (const Parameter& p : space.parameters()) {
    const std::size_t indicators = p.kind == ValueKind::name && p.numeric.size() > 2 ? p.numeric.size() : 0;
    one_hot_.push_back(indicators);
    width_ += 1 + indicators;
  }
  width_ += kGeometryFeatures + (prologue_ ? 1 : 0);
}

void ConfigFeatures::append(const Config& config, FeatureRows& rows) const {
  for (std::size_t p = 0; p < one_hot_.size(); ++p) {
    rows.x.push_back(static_cast<float>(config.choice[p]));
    for (std::size_t v = 0; v < one_hot_[p]; ++v) rows.x.push_back(config.choice[p] == v ? 1.0f : 0.0f);
  }
  // A config whose launch is invalid here cannot run anyway: zeros, so that
  // it still has a row of the right width.
  const LaunchGeometry g = space_.geometry(config, shape_);
  const bool launchable = g.valid();
  const double threads = static_cast<double>(g.block[0]) * static_cast<double>(g.block[1]) * static_cast<double>(g.block[2]);
  const double blocks = static_cast<double>(g.grid[0]) * static_cast<double>(g.grid[1]) * static_cast<double>(g.grid[2]);
  rows.x.push_back(launchable ? log2_of(threads) : 0.0f);
  rows.x.push_back(launchable ? log2_of(blocks) : 0.0f);
  rows.x.push_back(launchable ? log2_of(1.0 + static_cast<double>(g.shared_bytes)) : 0.0f);
  if (prologue_) rows.x.push_back(space_.prologue_runs(config, shape_) ? 1.0f : 0.0f);
}

}  // namespace mlatune::strategies
