// Records one measurement as a finished run of its own, which makes it the
// best entry at its shape for that device and toolchain: what a sweep would
// leave behind, for tests and benchmarks of the dispatcher.
#pragma once
#include <filesystem>
#include <string>

#include "cache/store.h"
#include "core/space.h"

namespace mlatune {

inline void record_tuned_entry(const std::filesystem::path& db, const SearchSpace& space,
                               const std::filesystem::path& space_file, const DeviceInfo& device,
                               const std::string& shape, const std::string& config,
                               const std::string& strategy, Timing timing,
                               ErrorFigures error = {}) {
  Store store = Store::open(db);
  std::int64_t kernel = store.ensure_kernel(
      KernelInfo{space.kernel_name(), space.template_hash(), space.definition_hash()});
  std::int64_t device_id = store.ensure_device(device);
  std::int64_t toolchain = store.ensure_toolchain(ToolchainInfo::current());
  std::int64_t run = store.begin_run(
      RunInfo{kernel, device_id, toolchain, space_file.string(), space.text(), strategy, "{}"});
  Measurement m;
  m.run_id = run;
  m.shape = shape;
  m.config = config;
  m.timing = std::move(timing);
  m.error = error;
  store.record(m);
  store.finish_run(run, RunStatus::finished);
}

}  // namespace mlatune
