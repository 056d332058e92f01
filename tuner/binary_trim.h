// Trimming the stored binaries of a kernel family to those the dispatcher
// may load (`mlatune cache trim`).
//
// A sweep stores the cubin of every config it compiles: a grid of shapes
// leaves thousands, of which the dispatcher ever loads few.  Kept:
//   - the binary of each best entry at its own shape, for the architecture
//     of the device it was tuned on (what a hit loads);
//   - every binary of the plan of each range `mlatune cache warm` recorded
//     for this kernel version and NVRTC (what first calls inside it load),
//     planned again here with the same bound per config.
// Dropped: the other binaries of this kernel version and NVRTC.  Binaries of
// other kernel families are not looked at; those of other template versions
// or NVRTC are left to `mlatune cache prune`, which knows them as stale.
// Nothing measured is lost, and a sweep resumed or run again at a shape it
// measured compiles nothing again: it skips the configs measured there (on
// this device and NVRTC), and re-times only what it evaluated itself, from
// memory.  What compiles again is a dropped binary wanted elsewhere: a
// config at another shape with the same compiled values (a new T of a
// trimmed H, D, R), a sweep on another GPU of the same architecture, and
// every config of a compile-only sweep (it measured nothing).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cache/store.h"
#include "core/space.h"
#include "tuner/warm_probes.h"

namespace mlatune {

struct TrimOptions {
  bool dry_run = false;  // count only; delete nothing
  unsigned jobs = 0;     // planning threads for the warmed ranges; 0: one per core
  /// The bound `cache warm` planned each range with (its own option).
  std::size_t max_binaries_per_config = default_max_binaries_per_config;
};

struct TrimReport {
  std::int64_t considered = 0, considered_bytes = 0;  // this kernel version's and NVRTC's binaries
  std::int64_t kept = 0, kept_bytes = 0;
  std::int64_t dropped = 0, dropped_bytes = 0;        // deleted (or, dry run, would be)
  std::int64_t for_best = 0;    // distinct binaries the best entries' hits load
  std::int64_t for_warm = 0;    // distinct binaries the warmed ranges' plans hold
  std::int64_t warm_ranges = 0;
  std::int64_t other_versions = 0;  // binaries of other template versions or NVRTC: not touched
  /// A warmed range whose plan now differs in size from what it recorded
  /// (warmed with another --max-binaries-per-config, or the tuned entries
  /// changed since): said, so the user can warm it again.
  std::vector<std::string> notes;
};

TrimReport trim_binaries(Store& store, const SearchSpace& space, const TrimOptions& options = {});

}  // namespace mlatune
