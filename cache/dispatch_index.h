// The dispatcher's decision table: which config runs a kernel family at a
// shape, built once from the store's best entries and needing no GPU.
//
// Only entries of the space's current kernel version (template and definition
// hashes) and of this toolchain count.  The rule, in order:
//   1. hit: this device's entry at the very shape (valid there).
//   2. nearest / repaired: the `neighbors` tuned entries nearest in log shape
//      space, distance(a, b) = sum over shape variables of |log a_i - log b_i|
//      (so T=1 vs 2 weighs as much as 1024 vs 2048), this device's entries
//      first (other devices' only when none of this device's can be used).
//      Each entry's config is repaired to the shape (cache/config_repair.h:
//      the fewest parameter changes under check and geometry, at most 3);
//      the one needing the fewest changes wins, then the nearer, then the
//      earlier entry.  Zero changes is `nearest`, more is `repaired`.
//   3. fallback: the first config of the space's `fallbacks:` valid here.
//   4. default_config: the space's default, where valid.
//   5. first_valid: the first valid config in enumeration order.
//   6. none: nothing can run the shape.
// Every borrowed config is re-checked against the constraints and the launch
// geometry at the requested shape.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/config_repair.h"
#include "cache/store.h"
#include "core/compiler.h"
#include "core/device.h"
#include "core/space.h"

namespace mlatune {

/// Why a config was chosen.
enum class ChoiceReason {
  hit,          // tuned at this shape on this device
  nearest,      // tuned at another shape (or on another device), valid here
  repaired,     // a nearby tuned config, changed in a few parameters to be valid here
  filled,       // a choice changed in one parameter so that its grid fills the device (races only)
  fallback,     // one of the space's `fallbacks:`
  default_config,  // the space's default config
  first_valid,  // the default is invalid here: the first valid config
  none,         // no config of the space can run this shape
};
std::string_view to_string(ChoiceReason);

/// The decision for one shape.
struct Choice {
  ChoiceReason reason = ChoiceReason::none;
  Config config;             // empty when reason is none
  std::string config_text;   // canonical text of config
  /// The tuned shape whose best config was taken (hit, nearest, repaired).
  std::optional<Shape> source_shape;
  std::string source_device;  // the device it was tuned on (hit, nearest, repaired)
  double tuned_median_us = 0; // its measured time there (hit, nearest, repaired)
  double distance = 0;        // log shape distance to source_shape
  /// repaired: the tuned config as stored, and each parameter changed with
  /// why; `repair` says it in one line: "FLOAT4 true -> false (constraint
  /// 'FLOAT4 == 0 || (R % 4 == 0 && D % 4 == 0)' fails at D=64,R=131)".
  std::string tuned_config_text;
  std::vector<ParameterChange> changes;
  std::string repair;
  std::size_t fallback_index = 0;  // fallback: its position in `fallbacks:`
  /// Names the cubin of config at this shape for this index's architecture
  /// and NVRTC: a binary stored under another key is never used.
  BinaryKey binary;
  /// What that cubin is compiled for: the device's architecture, or the one
  /// the config needs (sm_90a on an sm_90 device).
  std::string arch;
  /// One readable line for logs: the reason and where the config came from.
  std::string explanation;
  bool ok() const { return reason != ChoiceReason::none; }
};

/// What the index is built for: the device launches run on (its arch names
/// the binaries) and the toolchain that compiles them.
struct DispatchTarget {
  DeviceInfo device;
  ToolchainInfo toolchain;
};

/// How far the selector looks (see the top of this file).
struct SelectorOptions {
  std::size_t neighbors = 4;  // tuned entries per device group that are repaired and compared
  RepairLimits repair;
};

/// Thread safety: immutable after build(); choose() may run on many threads.
/// Holds a reference to the space, which must outlive it; for a space with
/// `requires:`, its own copy as the target device sees it
/// (SearchSpace::for_device): a config that needs an architecture the device
/// lacks is never chosen, repaired to, or ranked.
class DispatchIndex {
 public:
  /// How many expression evaluators of its space build() prepares: as many
  /// as choose(), ranked() and their repairs borrow at once, so that a
  /// first use of a shape builds none (SearchSpace::prepare_evaluators).
  static constexpr std::size_t first_use_evaluators = 2;

  /// Reads all best entries once (the store may be read-only), and prepares
  /// first_use_evaluators of the space.
  static DispatchIndex build(Store& store, const SearchSpace& space, DispatchTarget target,
                             SelectorOptions options = {});

  /// ranked(shape, 1).front(), found with less work: the nearest entries
  /// are repaired only as far as they could still win (fewer changes than
  /// the fewest so far), so that a first call whose nearest tuned config is
  /// valid as it is repairs nothing else (26.8 instead of 255 us of CPU at
  /// B=1,T=4000,H=64,D=256,R=1024 in bench_config_repair).
  Choice choose(const Shape& shape) const;
  /// The choice first, then the other configs that can run `shape`, best
  /// first and each once: the other near entries (repaired), the fallbacks,
  /// the default, the first valid config.  At most `limit`; a shape nothing
  /// can run gives one `none` choice.  The dispatcher takes the first whose
  /// binary is ready as a stand-in while the choice compiles, and races
  /// the first few at an untuned shape.  `neighbors` (0: the index's
  /// SelectorOptions) widens how many nearest tuned entries are repaired and
  /// ranked; the first choice is the same either way when the extra entries
  /// need no fewer changes.
  std::vector<Choice> ranked(const Shape& shape, std::size_t limit, std::size_t neighbors = 0) const;
  /// ranked() with each choice's config_text, binary and arch left empty
  /// until finish() sets them: a caller that stops at the first usable
  /// choice (the dispatcher's stand-in) finishes only those it looks at.
  /// Finishing (the binary key) is most of ranked()'s time.
  std::vector<Choice> ranked_unfinished(const Shape& shape, std::size_t limit, std::size_t neighbors = 0) const;
  /// Sets config_text, binary and arch of a choice of ranked_unfinished()
  /// at the same shape (what ranked() sets of every ok choice).
  void finish(Choice& choice, const Shape& shape) const;

  /// Where `choice`'s main kernel launches fewer blocks at `shape` than the
  /// target device has SMs (a tile borrowed from a shape with more queries
  /// or heads leaves SMs idle), the configs one parameter away from it that
  /// launch more blocks there: first the one with the fewest blocks that
  /// still gives every SM one, then those short of that, most blocks first.
  /// At most `limit`; empty when the choice fills the device, when the
  /// device's SM count is unknown, or when no such config can run the shape.
  /// Their reason is `filled` and `repair` says what changed and the block
  /// counts.  The dispatcher races them beside the selector's picks: a
  /// guess at what to time, never at what wins.
  std::vector<Choice> filling_variants(const Choice& choice, const Shape& shape, std::size_t limit) const;

  /// The key of `config`'s binary at `shape` for the target's architecture
  /// and NVRTC: a choice's `binary`, and what `cache warm` names the
  /// binaries it compiles (hashed on from the template's hash state).
  BinaryKey binary_key(const Config& config, const Shape& shape) const;

  /// A stored binary for `choice`, or nullopt when absent or when its record
  /// says it was made for another architecture, NVRTC, kernel or template
  /// (a key collision must not load a foreign cubin).
  std::optional<BinaryRecord> stored_binary(Store& store, const Choice& choice) const;
  /// Whether a binary so labelled is one a dispatcher of this index may
  /// load: its kernel family and template, its NVRTC, and an architecture
  /// its device runs (an sm_90a cubin on an sm_90 device too).
  bool loads(std::string_view kernel_name, std::string_view template_hash, std::string_view nvrtc_version,
             std::string_view arch) const;
  /// The keys of the stored binaries a dispatcher of this index could load
  /// (what its preload reads): labelled with its kernel family, template
  /// and NVRTC, for an architecture its device runs; key order.  An empty
  /// cubin shows only when read (stored_binary refuses it then).
  std::vector<std::string> runnable_binaries(Store& store) const;
  /// The record to store for a binary compiled for `choice`.
  BinaryRecord binary_record(const CompiledBinary& binary) const;

  const SearchSpace& space() const { return *space_; }
  const DispatchTarget& target() const { return target_; }
  /// Best entries of the current kernel version and toolchain, all devices.
  std::size_t entries() const { return entries_.size(); }
  /// Entries ignored: other kernel versions, toolchains, unreadable shapes.
  std::size_t ignored() const { return ignored_; }

 private:
  struct Entry {
    Shape shape;
    Config config;
    std::string config_text;
    std::string device_name;
    bool this_device = false;
    double median_us = 0;
  };
  class Ranking;
  DispatchIndex(const SearchSpace& space, DispatchTarget target, SelectorOptions options);
  void add_hit(Ranking& ranking) const;
  void add_neighbors(Ranking& ranking, bool this_device) const;
  void add_fallbacks(Ranking& ranking) const;
  void add_default(Ranking& ranking) const;
  void add_first_valid(Ranking& ranking) const;
  Choice none(const Shape& shape) const;
  Choice from_entry(const Entry& entry, const Repair& repair, double distance) const;
  /// Why nothing tuned was used: the tail of fallback/default explanations.
  std::string untuned_tail(const Ranking& ranking) const;

  /// The space as target_.device sees it: the caller's when it has no
  /// `requires:` (no copy, no cold evaluators), else owned_ (for_device).
  std::shared_ptr<const SearchSpace> owned_;
  const SearchSpace* space_;
  DispatchTarget target_;
  SelectorOptions options_;
  ConfigRepairer repairer_;
  Compiler compiler_;
  ContentHasher template_hasher_;  // Compiler::source_hasher(space_'s template): keys without the template
  std::vector<Entry> entries_;  // this device's first, then by shape
  std::size_t ignored_ = 0;
};

}  // namespace mlatune
