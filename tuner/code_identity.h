// What a measurement measured, as one hash: the code a config compiles to at
// a shape and the launch it gets there (core/launch_plan.h).  A template or
// space change makes a new kernel version, and every time measured under the
// old one is then refused (cache/portable_configs.h), although most such
// changes (a new algorithm behind its own #if, a comment, a new parameter
// value) leave most configs' machine code as it was.  Equal identities under
// two versions mean the same instructions launched the same way, so the time
// measured under the first holds under the second.
//
// The code is the PTX NVRTC generated (its header names the compiler build,
// which also runs ptxas) with the module-scope variables that nothing in it
// references left out, and the options that reach ptxas.  Not the cubin's
// bytes: NVRTC emits every namespace-scope constexpr of a template as a
// device global, so a template that gains one constant (as every new
// algorithm does) changes every cubin's symbol table and data while the
// instructions of each kernel stay byte for byte the same (seen on
// fused_mla_attention when EXPAND_GEMM gained fma_cluster).  ptxas turns the
// same PTX into the same SASS; a referenced variable stays in, initial
// values included, so a changed lookup table still changes the identity.
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

/// The PTX without the module-scope variable declarations (.global, .const)
/// whose names appear nowhere else in it, repeated until none is left (a
/// variable referenced only from a dropped one's initializer goes too);
/// everything else verbatim, but for blank lines and the blanks around each
/// module-level statement and comment line.
std::string referenced_ptx(std::string_view ptx);

/// The PTX of one entry of a module, as a module of its own: its directives,
/// the variables the entry references and the entry, with block labels
/// numbered as if it were the only function ($L__BB1_3 -> $L__BB_3).  Two
/// compiles give the same code for the entry where these are equal.
/// Throws InternalError where the PTX has no such entry.
std::string entry_ptx(std::string_view ptx, std::string_view entry);

/// The identity of a compiled binary (compiled with keep_ptx) launched as
/// `plan` says: 32 hex digits.  A binary whose prologue was compiled apart
/// hashes both parts' PTX.
std::string code_identity(const CompiledBinary& binary, const LaunchPlan& plan);

/// Whether a config compiled with its prologue apart (`apart`) has the code
/// of the same config compiled whole (`whole`, without prologue_part): each
/// entry's PTX (entry_ptx) the same.  Both compiled with keep_ptx.
bool same_code_apart(const CompiledBinary& whole, const CompiledBinary& apart, std::string_view main_entry,
                     std::string_view prologue_entry);

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
  /// The subject's config as this version writes it (a parameter added
  /// since it was written takes the default config's value).
  std::string config;
  std::string refusal;  // the config does not parse, is invalid, cannot launch, or does not compile
  bool ok() const { return refusal.empty(); }
};

/// The identities of `subjects` under `space`, compiled through `pool` (all
/// submitted before the first is awaited) with their PTX kept: a pool whose
/// hooks look binaries up elsewhere must not be used, since a stored binary
/// has no PTX.  A failing NVRTC (not a failing
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
