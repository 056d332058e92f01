// The probe shapes of a warm-up: few enough shapes that the dispatcher can be
// asked about each, chosen so that every binary it may choose somewhere in a
// box of shapes is chosen at one of them.
//
// The binary the dispatcher runs at a shape depends on the shape through the
// config it chooses (which tuned shape is nearest, which configs are valid
// there) and through the compiled shape values (SHAPE_<NAME> definitions, a
// bucket or the exact value).  Each variable's range is small, so it is
// scanned value by value, the other variables held at representative values
// (the geometric middle of their ranges, and each of them in turn at its low
// and high end).  At each value the signature is what can change the binary:
// for every candidate config (tuned configs, default, fallbacks) the value
// of every constraint that reads the variable or a compiled value, whether
// its launch geometry is valid, and its compiled shape definitions.  Values
// are grouped into classes by signature and by the nearest tuned value of
// that variable (log scale, as the dispatcher measures distance); the first
// value of each class, and the two ends of the range, are the variable's
// probe values.  The probe shapes are the product of those values, plus the
// tuned shapes inside the box as they are (they are hits there).
//
// This covers every combination of per-variable classes.  A choice that
// depends on an interaction of two variables that none of the scans sees
// (at the representative values) can still be missed; the first-call
// benchmark (tests/bench_first_call.cpp) counts compiles inside a warmed
// range, which is how such a miss would show.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/space.h"
#include "tuner/shape_box.h"

namespace mlatune {

/// The default bound on probe shapes (product plus tuned shapes).
inline constexpr std::uint64_t default_max_probe_shapes = 250'000;

/// One variable's probe values and how they were found.
struct VariableProbes {
  std::string name;
  std::vector<std::int64_t> values;  // ascending, inside the variable's range
  std::size_t classes = 0;           // distinct (signature, nearest tuned value) classes
};

/// The probe shapes of one box.
struct ProbePlan {
  std::vector<VariableProbes> variables;  // in declaration order
  std::vector<Shape> tuned_inside;        // tuned shapes inside the box
  std::uint64_t product = 0;              // shapes in the product of the probe values

  std::uint64_t count() const { return product + tuned_inside.size(); }
  /// Probe shape `index` < count(): the product in mixed radix (first
  /// variable slowest), then the tuned shapes.
  Shape shape(std::uint64_t index) const;
};

/// Finds the probe shapes of `box`.  `candidates` are the configs the
/// dispatcher may run (tuned, default, fallbacks); `tuned_shapes` the shapes
/// with a best entry the dispatcher uses.  Throws InputError, naming each
/// variable's probe count, when there would be more than `max_probe_shapes`.
ProbePlan plan_probes(const SearchSpace& space, const ShapeBox& box, const std::vector<Config>& candidates,
                      const std::vector<Shape>& tuned_shapes,
                      std::uint64_t max_probe_shapes = default_max_probe_shapes);

}  // namespace mlatune
