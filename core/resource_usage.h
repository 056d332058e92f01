// What ptxas reports about one compiled kernel: registers, barriers, static
// shared memory, stack frame and spills.  Parsed from the text that
// `--ptxas-options=-v` adds to the NVRTC log, so that the tuner can rank or
// reject configs before it ever launches them.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace mlatune {

/// The ptxas resource report of one function.
struct ResourceUsage {
  int registers = 0;
  int barriers = 0;
  std::int64_t shared_bytes = 0;        // static shared memory (dynamic is a launch value)
  std::int64_t constant_bytes = 0;      // cmem[0], when ptxas prints it
  std::int64_t stack_frame_bytes = 0;
  std::int64_t spill_store_bytes = 0;
  std::int64_t spill_load_bytes = 0;

  /// True when the kernel keeps data in local memory: register spills, or a
  /// stack frame (a runtime-indexed local array lives there).  Either makes a
  /// config suspect: local memory is as slow as global memory.
  bool spills() const {
    return spill_store_bytes > 0 || spill_load_bytes > 0 || stack_frame_bytes > 0;
  }
  bool operator==(const ResourceUsage&) const = default;
};

/// Every function named in a ptxas -v report, by its (possibly mangled)
/// name.  Lines that are not part of the report (warnings, notes) are ignored.
std::map<std::string, ResourceUsage> parse_ptxas_report(std::string_view log);

/// The report of the entry function `entry`, or nullopt when the log has no
/// report for it (not compiled, not an entry, or a mangled name).
std::optional<ResourceUsage> find_resource_usage(std::string_view log, std::string_view entry);

}  // namespace mlatune
