// The evaluator: runs one compiled candidate on the GPU against a Workload,
// checks every output element against the float64 reference on two input
// sets (each run twice: the runs must agree), checks after every validation
// launch that nothing outside the outputs was written (guards, inputs), and
// times it with CUDA events under a stated cache method.
//
// The types at the top (ValidationStats, Candidate, EvaluationResult; timing
// in tuner/timing.h) carry no CUDA and travel between the tuner and the worker
// process (tuner/worker/client.h); the Evaluator class itself runs in the worker,
// where a crash cannot take the sweep down.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/launch_plan.h"
#include "core/outcome.h"
#include "core/space.h"
#include "tuner/input_kinds.h"
#include "tuner/timing.h"

namespace mlatune {

/// The worst errors of a candidate on one input kind.
struct KindErrors {
  InputKind kind = InputKind::normal;
  double relative_l2 = 0.0;
  double max_abs = 0.0;
};

/// Errors of a candidate's output against the float64 reference, the worst
/// over all validation input sets.
struct ValidationStats {
  double relative_l2 = 0.0;       // ||out - ref|| / ||ref|| over finite outputs
  double max_abs = 0.0;
  std::uint64_t nonfinite = 0;    // NaN or Inf outputs (never pass)
  std::uint64_t elements = 0;     // compared per input set
  int input_sets = 0;
  bool passed = false;
  /// The worst errors on each input kind validated (tuner/input_kinds.h), in
  /// the workload's order; sent over the worker's wire, so sweep summaries
  /// can say them.
  std::vector<KindErrors> per_kind;
};

/// Folds one launch's errors on input kind `kind` into that kind's entry of
/// `per_kind` (added at the end the first time): the worst relative L2 and
/// max abs seen.
void merge_kind_errors(std::vector<KindErrors>& per_kind, InputKind kind, const ValidationStats& stats);

/// A compiled candidate, ready to run: the launch of its LaunchPlan
/// (core/launch_plan.h) and the cubin that holds its entries.
struct Candidate {
  std::string label;   // for messages, e.g. the config as text
  std::string cubin;   // image for the worker's device
  std::string entry;
  LaunchGeometry geometry;
  /// Set when the config's prologue runs at the workload's shape.
  std::optional<PrologueLaunch> prologue;
  /// Bytes of each workspace argument (launch order), allocated only with a
  /// prologue; empty otherwise (workspace arguments are then null pointers).
  std::vector<std::int64_t> workspace_bytes;
};

/// The launch a candidate carries, as the plan's steps (what the evaluator
/// checks and issues).
LaunchSteps launch_steps(const Candidate& candidate);

/// The candidate that runs `plan` (whose refusal the caller has checked)
/// from `cubin`.
Candidate make_candidate(const LaunchPlan& plan, std::string label, std::string cubin);

/// Sets the launch of `candidate` to that of `config` at `shape`
/// (plan_launch's steps; its refusal is not looked at).
void describe_launch(const SearchSpace& space, const Config& config, const Shape& shape,
                     Candidate& candidate);

/// What the evaluation of one candidate found.  `reason` explains every
/// outcome other than ok; the error figures are kept pass or fail.
struct EvaluationResult {
  Outcome outcome = Outcome::ok;
  std::string reason;
  std::optional<ValidationStats> validation;
  std::optional<TimingStats> timing;
  int registers = 0;
  std::int64_t local_bytes = 0;
  /// The CUDA context is unusable after this (sticky error): the process
  /// that ran it must be replaced.
  bool context_lost = false;
};

class Workload;

/// Runs candidates against one Workload in the current process.  Measures
/// the empty-kernel floor with the same method on construction.
class Evaluator {
 public:
  Evaluator(Workload& workload, TimingOptions options);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  /// Loads, validates (every validation input set, two runs each, memory
  /// integrity after every launch) and times `candidate`.  A refused
  /// launch, a wrong result or a sticky CUDA error is a result; `progress` is
  /// called after each step that synchronized with the GPU (the worker turns
  /// it into a heartbeat).  With an active `cutoff`, timing ends early once
  /// the candidate is hopeless (TimingStats::cut), and (unless
  /// TimingOptions::validate_first) the timing comes right after the first
  /// validation launch: a cut candidate is then validated on that launch
  /// only (its ValidationStats::input_sets is 1, its timing method says so),
  /// an uncut one in full after its timing.  That first launch is timed
  /// as well, and one far past the cutoff (judge_first_launch) is cut on it
  /// without a timed launch.
  /// Throws EnvironmentError for a broken environment and for a time below
  /// the empty-kernel floor (a broken measurement).
  EvaluationResult evaluate(const Candidate& candidate, const Cutoff& cutoff = {},
                            const std::function<void()>& progress = {});

  /// Times already validated candidates again, interleaved (round robin over
  /// `rounds` rounds) so that drift affects all alike.  An entry is empty for
  /// a candidate that failed to launch.
  std::vector<std::optional<TimingStats>> retime(const std::vector<Candidate>& candidates,
                                                 int rounds,
                                                 const std::function<void()>& progress = {});

  /// The empty kernel's time with this evaluator's method.
  const TimingStats& floor() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlatune
