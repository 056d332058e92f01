#include "tuner/revalidation.h"

#include <set>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune {

RevalidationPlan plan_revalidation(Store& store, const SearchSpace& space, const DeviceIdentity& device,
                                   const ToolchainInfo& toolchain) {
  const KernelInfo current{space.kernel_name(), space.template_hash(), space.definition_hash()};
  RevalidationPlan plan;
  std::set<Shape> shapes;
  for (const BestRecord& record : store.all_best()) {
    if (!(record.kernel == current)) continue;
    if (record.device == device && record.toolchain == toolchain) continue;
    const BestEntry& best = record.entry;
    try {
      const Shape shape = space.parse_shape(best.shape);
      const Config config = space.parse_config(best.config);
      plan.given.at_shape[shape].push_back(config);
      if (shapes.insert(shape).second) plan.shapes.push_back(shape);
    } catch (const InputError& error) {
      plan.unreadable.push_back(fmt::format("{} at {}: {}", best.config, best.shape, error.message()));
      continue;
    }
    plan.foreign.push_back({best.shape, best.config, record.device, record.toolchain, best.median_us});
  }
  return plan;
}

}  // namespace mlatune
