#include "tuner/binary_trim.h"

#include <set>

#include <fmt/format.h>

#include "cache/dispatch_index.h"
#include "core/compiler.h"
#include "tuner/shape_box.h"
#include "tuner/warm.h"

namespace mlatune {
namespace {

/// The device an index for `arch` stands for: the first tuned device of that
/// architecture, as `cache warm --arch` takes it, else one known only by it.
DeviceInfo device_for(const TunedEntries& tuned, const std::string& arch) {
  DeviceInfo device;
  for (const DeviceIdentity& d : tuned.devices)
    if (d.arch == arch) {
      static_cast<DeviceIdentity&>(device) = d;
      break;
    }
  device.arch = arch;
  return device;
}

}  // namespace

TrimReport trim_binaries(Store& store, const SearchSpace& space, const TrimOptions& options) {
  const ToolchainInfo toolchain = ToolchainInfo::current();
  const TunedEntries tuned = tuned_entries(store, space, toolchain);
  TrimReport report;
  std::set<std::string> best_keys, warm_keys;

  // What each device's hits load: the index's choice at its own tuned shapes.
  for (const DeviceIdentity& identity : tuned.devices) {
    DeviceInfo device;
    static_cast<DeviceIdentity&>(device) = identity;
    const DispatchIndex index = DispatchIndex::build(store, space, DispatchTarget{device, toolchain});
    for (const Shape& shape : tuned.shapes) {
      const Choice choice = index.choose(shape);
      if (choice.reason == ChoiceReason::hit) best_keys.insert(choice.binary.hash);
    }
  }

  // What first calls inside each warmed range load.
  for (const WarmRange& range : store.warm_ranges()) {
    if (range.kernel_name != space.kernel_name() || range.template_hash != space.template_hash() ||
        range.definition_hash != space.definition_hash() || range.nvrtc_version != toolchain.nvrtc_version)
      continue;
    ++report.warm_ranges;
    const DispatchIndex index =
        DispatchIndex::build(store, space, DispatchTarget{device_for(tuned, range.arch), toolchain});
    WarmOptions warm;
    warm.box = parse_shape_box(space, range.range);
    warm.jobs = options.jobs;
    warm.max_binaries_per_config = options.max_binaries_per_config;
    const WarmPlan plan = plan_warm(index, tuned, warm);
    for (const WarmBinary& b : plan.binaries) warm_keys.insert(b.key.hash);
    if (static_cast<std::int64_t>(plan.binaries.size()) != range.binaries)
      report.notes.push_back(fmt::format(
          "the range {} for {} recorded {} binaries and plans {} now (warmed with another "
          "--max-binaries-per-config, or tuned since): warm it again if first calls there must not compile",
          range.range, range.arch, range.binaries, plan.binaries.size()));
  }
  if (tuned.entries.empty())
    report.notes.push_back(fmt::format(
        "no best entry of {} (this version, NVRTC {}) is in the database, as after a compile-only sweep: the next "
        "GPU sweep compiles again every binary dropped here",
        space.kernel_name(), toolchain.nvrtc_version));
  report.for_best = static_cast<std::int64_t>(best_keys.size());
  report.for_warm = static_cast<std::int64_t>(warm_keys.size());

  std::vector<std::string> drop;
  for (const Store::StoredBinary& b : store.binaries_of(space.kernel_name())) {
    if (b.template_hash != space.template_hash() || b.nvrtc_version != toolchain.nvrtc_version) {
      ++report.other_versions;
      continue;
    }
    ++report.considered;
    report.considered_bytes += b.stored_bytes;
    if (best_keys.count(b.key) || warm_keys.count(b.key)) {
      ++report.kept;
      report.kept_bytes += b.stored_bytes;
    } else {
      drop.push_back(b.key);
      ++report.dropped;
      report.dropped_bytes += b.stored_bytes;
    }
  }
  if (!options.dry_run && !drop.empty()) store.delete_binaries(drop);
  return report;
}

}  // namespace mlatune
