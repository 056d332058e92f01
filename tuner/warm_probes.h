// The binaries one config needs over a box of shapes, for `mlatune cache
// warm`.
//
// A config's binary at a shape is named by its definitions: the parameters
// (fixed for the config) and the compiled shape values SHAPE_<name> (the
// shape's own value when a variable is compiled exactly, a bucket when the
// space compiles it to one).  So a config needs one binary per distinct tuple
// of compiled values reachable in the box, whatever the dispatcher chooses
// where: planning is per config, not per probe shape, and scales with the
// number of compiled values, not with the number of tuned shapes.
//
// The tuples are found without enumerating the box: each shape variable is
// scanned over its range with the others held at a base shape (a compiled
// value that does not read a variable does not change with it).  Variables
// that change a common compiled value form one group, scanned over the
// product of their ranges (bounded); a group's classes are its distinct
// sub-tuples, and the tuples are the product of the groups' classes.  Each
// tuple then gets a representative shape inside the box at which the config
// can run (check and launch geometry), tried among a few witnesses per class
// (first, last, multiples of 8, 4 and 2, for residue constraints) and a few
// values of the variables nothing compiled reads; a representative must give
// the tuple itself (so an interaction the scans did not see can only lose a
// binary, never plan a wrong one: the coverage check of tuner/warm_coverage.h
// is what finds such a loss).  Tuples where no witness can run are skipped.
//
// A config with more tuples than a bound compiles some variable exactly over
// a wide range (one binary per value): it is not warmable over that range.
// The dispatcher covers such shapes with a warmed stand-in and compiles the
// exact binary in the background (cache/dispatcher.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/space.h"
#include "tuner/shape_box.h"

namespace mlatune {

/// The default bound on binaries per config.  The flagship's bucketed
/// configs need 10 D buckets x 16 R buckets = 160 over D=8..256, R=16..1024;
/// an exact one needs 249 x 1009.
inline constexpr std::size_t default_max_binaries_per_config = 256;
/// Shapes scanned jointly for variables that change one compiled value.
inline constexpr std::uint64_t max_joint_scan = 1u << 22;
/// Witness combinations tried per tuple before it counts as never valid.
inline constexpr std::size_t max_representative_attempts = 1024;

/// The compiled values of `config` at `shape` (one string per compiled name,
/// in a fixed order), or nullopt where the config compiles nothing there
/// (e.g. beyond a bucket list's last bucket).
using CompiledValues =
    std::function<std::optional<std::vector<std::string>>(const Config& config, const Shape& shape)>;
/// The SHAPE_<name> values of SearchSpace::definitions.
CompiledValues space_compiled_values(const SearchSpace& space);

/// What one config needs over a box.
struct ConfigBinaries {
  Config config;
  std::uint64_t tuples = 0;           // distinct compiled-value tuples in the box (saturates)
  std::vector<std::string> varying;   // shape variables that change a compiled value
  bool warmable = true;               // tuples within the bound
  std::vector<Shape> shapes;          // warmable: one representative per tuple the config can run
  std::uint64_t never_valid = 0;      // warmable: tuples without a representative
};

/// The binaries `config` needs over `box`: at most `max_binaries` tuples, else
/// not warmable (no representatives searched).
ConfigBinaries plan_config_binaries(const SearchSpace& space, const ShapeBox& box, const Config& config,
                                    std::size_t max_binaries = default_max_binaries_per_config,
                                    const CompiledValues& compiled = {});

}  // namespace mlatune
