// What a measurement measured, as one hash: the cubin a config compiles to at
// a shape and the launch it gets there (core/launch_plan.h).  A template or
// space change makes a new kernel version, and every time measured under the
// old one is then refused (cache/portable_configs.h), although most such
// changes (a new algorithm behind its own #if, a comment, a new parameter
// value) leave most configs' machine code byte for byte as it was.  Equal
// identities under two versions mean the same instructions launched the same
// way, so the time measured under the first holds under the second; a
// different NVRTC build, another option or any change of the code or the
// launch makes them differ (the cubin names the ptxas release that wrote it).
// Needs NVRTC, no GPU.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/portable_configs.h"
#include "core/launch_plan.h"
#include "tuner/compile_pool.h"

namespace mlatune {

class SearchSpace;

/// The identity of a cubin launched as `plan` says: 32 hex digits.
std::string code_identity(std::string_view cubin, const LaunchPlan& plan);

/// One config at one shape, compiled for the architecture of the device
/// `arch` names (the space's `requires:` may raise it, as in a sweep).
struct CodeSubject {
  std::string shape;   // canonical or not: parsed by the space
  std::string config;
  std::string arch;    // "sm_90"
};

/// An identity, or why there is none.
struct CodeIdentity {
  std::string hash;
  std::string refusal;  // the config does not parse, is invalid, cannot launch, or does not compile
  bool ok() const { return refusal.empty(); }
};

/// The identities of `subjects` under `space`, compiled through `pool` (all
/// submitted before the first is awaited).  A failing NVRTC (not a failing
/// compilation) throws EnvironmentError.
std::vector<CodeIdentity> code_identities(const SearchSpace& space, const std::vector<CodeSubject>& subjects,
                                          CompilePool& pool);

/// Entries of other versions of `space`'s kernel, sorted into those that
/// carry over to its current version and those that do not.
struct CarryOver {
  /// Entries whose code identity under the current version is the one they
  /// were measured with, and whose error is within the current tolerance:
  /// now of the current version, nothing else changed.
  std::vector<PortableEntry> carried;
  /// The others, each with why.
  std::vector<std::pair<PortableEntry, std::string>> refused;
};

/// Compiles the entries that carry a code identity under `space` and keeps
/// those whose identity is unchanged.
CarryOver carry_over(const SearchSpace& space, const std::vector<PortableEntry>& other_versions, CompilePool& pool);

}  // namespace mlatune
