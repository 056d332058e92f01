// Repair of a config that cannot run a shape: the nearest config that can,
// where "nearest" is the fewest parameters changed, then the smallest sum of
// the changes' distances in value index, then the smaller config in
// lexicographic order of choice indices (deterministic).
//
// Why: a config tuned at one shape is usually good at a nearby shape, except
// where a constraint that reads the shape rules it out (FLOAT4 where R % 4 !=
// 0).  Switching off the one parameter at fault keeps the rest of what the
// tuner found, where the space's default throws it all away.
//
// The search is bounded and conflict-directed: a config is valid when
// SearchSpace::check and SearchSpace::geometry both accept it; when it is not,
// any valid config within the bound must change a parameter that the failing
// constraint (or the launch expressions, for a geometry failure) reads, so
// only those parameters are tried.  Candidates are visited level by level
// (1 change, 2, then 3), each level in the order above, and the first valid
// one ends the search: it is the nearest.  Needs no GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/space.h"

namespace mlatune {

/// One parameter moved by a repair, and why it had to move: the constraint
/// (or launch expression) that rejected the config it was changed from.
struct ParameterChange {
  std::size_t parameter = 0;
  std::uint32_t from = 0, to = 0;  // value indices
  std::string why;
};

struct RepairLimits {
  std::size_t max_changes = 3;
  /// Configs checked at most (check + geometry each); beyond, the repair
  /// gives up rather than spend the first call's host budget.
  std::size_t max_evaluations = 2000;
};

/// The outcome of a repair: the config (unchanged when it was valid), what
/// changed, and how much work it took.  `config` is empty when no config
/// within the limits is valid.
struct Repair {
  std::optional<Config> config;
  std::vector<ParameterChange> changes;
  std::string rejection;         // why the original cannot run the shape ("" when it can)
  std::size_t evaluations = 0;   // configs checked
  bool exhausted = false;        // stopped by max_evaluations, not by max_changes
  bool ok() const { return config.has_value(); }
};

/// Thread safety: immutable after construction; repair() may run on many
/// threads at once.  Holds a reference to the space, which must outlive it.
class ConfigRepairer {
 public:
  explicit ConfigRepairer(const SearchSpace& space);

  Repair repair(const Config& config, const Shape& shape, RepairLimits limits = {}) const;
  /// Why `config` cannot run `shape` ("constraint '...' fails at R=131", or
  /// "geometry: ..."), or "" when it can.
  std::string rejection(const Config& config, const Shape& shape) const;
  /// "FLOAT4 true -> false (constraint '...' fails at D=64,R=131); ..."
  std::string describe(const std::vector<ParameterChange>& changes) const;

 private:
  /// Whether a config can run a shape; if not, what rejects it (a
  /// constraint's index, or a launch failure with its text) and which
  /// parameters that reads.  The text is made only when a repair needs it.
  struct Verdict {
    bool valid = true;
    std::size_t failed = static_cast<std::size_t>(-1);  // constraint index; -1: the launch
    std::string geometry_reason;
    const std::vector<std::size_t>* culprits = nullptr;  // parameters to try changing
  };
  struct Node;
  Verdict judge(const Config& config, const Shape& shape) const;
  std::string failing_at(std::size_t constraint, const Shape& shape) const;
  std::vector<Node> children(const std::vector<Node>& level, const Config& origin) const;

  const SearchSpace* space_;
  std::vector<std::vector<std::size_t>> constraint_parameters_;  // per constraint
  std::vector<std::vector<std::size_t>> constraint_shape_variables_;
  std::vector<std::size_t> launch_parameters_;  // read by any launch or prologue expression
};

}  // namespace mlatune
