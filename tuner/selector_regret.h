// The dispatcher's selector judged on shapes it was not given: tuned shapes
// of one device are split into kept and held out, the index is built from a
// copy of the database without the held-out shapes' best entries, and at
// each held-out shape the config it chooses is compared with the best that
// tuning found there.
//
// regret = (fastest measured median of the chosen config at the shape) /
// (best median at the shape), >= 1; 1 means the selector found the best.
// Where the database holds no measurement of the chosen config at that
// shape, the shape is listed as unmeasured (tune those configs there to
// complete the picture).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cache/dispatch_index.h"
#include "cache/store.h"
#include "core/space.h"

namespace mlatune {

/// Which tuned shapes are held out.
struct Holdout {
  /// every:N: of the device's tuned shapes in ascending order, the N-th,
  /// 2N-th, ... (positions N-1, 2N-1, ... counted from 0).  0: use `shapes`.
  std::uint64_t every = 0;
  std::vector<Shape> shapes;  // given shapes (each must be tuned on the device)
};

/// "every:N" or a file of shapes, one per line ('#' starts a comment).
/// Throws InputError for malformed text.
Holdout parse_holdout_every(std::string_view text);
std::vector<Shape> read_shape_file(const SearchSpace& space, const std::filesystem::path& file);

/// The selector's decision at one held-out shape.
struct RegretRow {
  Shape shape;
  Choice choice;
  std::string best_config;
  double best_us = 0;
  std::optional<double> chosen_us;  // fastest ok measurement of the chosen config here
  std::optional<double> regret() const {
    if (!chosen_us || best_us <= 0) return std::nullopt;
    return *chosen_us / best_us;
  }
};

/// Geomean and worst of a group of rows (measured ones only).
struct RegretSummary {
  std::size_t rows = 0;
  std::size_t measured = 0;
  double geomean = 0;  // 0 when nothing was measured
  double worst = 0;
  std::optional<Shape> worst_shape;
};
RegretSummary summarize(const std::vector<const RegretRow*>& rows);

struct RegretReport {
  DeviceIdentity device;
  std::size_t tuned = 0;  // tuned shapes of the device
  std::size_t kept = 0;
  std::vector<RegretRow> rows;  // one per held-out shape, ascending
  RegretSummary overall;
  std::map<ChoiceReason, RegretSummary> by_reason;
};

/// Runs the analysis on `database` (not changed: the index is built from a
/// temporary copy, removed afterwards) for `device`'s tuned shapes.
RegretReport selector_regret(const std::filesystem::path& database, const SearchSpace& space,
                             const DeviceInfo& device, const Holdout& holdout);

}  // namespace mlatune
