// Whether a warmed range keeps NVRTC off the first call: at sampled shapes
// of the box (its corners and random shapes, seeded), the dispatcher's
// ranked configs (DispatchIndex::ranked, as many as its stand-in search
// looks at) must include one whose binary is warmed or stored.  Then the
// first call there runs that binary, the choice itself or a stand-in while
// the choice compiles in the background (cache/dispatcher.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cache/dispatch_index.h"
#include "cache/store.h"
#include "tuner/shape_box.h"

namespace mlatune {

inline constexpr std::size_t default_coverage_samples = 2000;
/// Ranked configs looked at per shape: the dispatcher's stand-in search
/// (cache/dispatcher.cpp) looks at this many.
inline constexpr std::size_t coverage_rank_limit = 8;
/// Uncovered shapes the report names.
inline constexpr std::size_t coverage_examples = 5;

/// How one fallback or the default fares at the sampled shapes.
struct StandingCoverage {
  std::string origin;        // "fallback 0", "default"
  std::string config_text;
  std::uint64_t ready = 0;   // sampled shapes where it runs and its binary is warmed or stored
};

struct CoverageReport {
  std::uint64_t corners = 0;   // distinct corners of the box among the samples
  std::uint64_t sampled = 0;   // corners + random shapes
  std::uint64_t seed = 0;
  std::uint64_t uncovered = 0; // sampled shapes where no ranked config has a ready binary
  std::uint64_t unrunnable = 0; // sampled shapes no config can run (refused, not compiled)
  std::vector<std::string> examples;  // the first few: shape and the dispatcher's choice
  std::vector<StandingCoverage> standing;  // the fallbacks in order, then the default
  /// The most workspace bytes (summed over a launch's workspace arguments)
  /// a config the dispatcher ranks at a sampled shape takes (the choice, a
  /// stand-in its first call may run, or a race's candidate), and that
  /// shape's text; 0 and empty where none runs a prologue.  A process maps
  /// that much at its first calls there unless it reserved it at open
  /// (DispatcherOptions::workspace_reserve_bytes).
  std::uint64_t largest_workspace_bytes = 0;
  std::string largest_workspace_shape;
  bool guaranteed() const { return uncovered == 0; }
};

/// The corners of the box, then `random` shapes drawn with `seed` (each
/// variable uniform or log-uniform over its range, by a coin).
std::vector<Shape> coverage_samples(const ShapeBox& box, std::size_t random, std::uint64_t seed);

/// Whether a stored record is a binary the index may load (its target's
/// architecture and NVRTC, the space's kernel and template).
bool usable_by(const BinaryRecord& record, const DispatchIndex& index);

/// A reserve that covers `bytes`, as MLATUNE_WORKSPACE_RESERVE takes it:
/// whole mebibytes, rounded up ("1789M" for 1,875,237,120 bytes); "0" for none.
std::string reserve_text(std::uint64_t bytes);

/// Checks the samples against `warmed` (keys known to be stored) and the
/// store; `jobs` threads ask the index (0: one per core).
CoverageReport check_coverage(Store& store, const DispatchIndex& index, const ShapeBox& box,
                              const std::set<BinaryKey>& warmed, std::size_t samples, std::uint64_t seed,
                              unsigned jobs);

}  // namespace mlatune
