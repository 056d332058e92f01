// GPU architectures as NVRTC names them (sm_90, sm_90a, sm_100f), and the
// two questions a space's `requires:` section raises: can a device run code
// that needs an architecture, and which architecture does a config compile
// for.  Pure functions: no NVRTC, no GPU.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace mlatune {

/// sm_<number><variant>: number 90 for compute capability 9.0; variant 0
/// (runs on this and any later capability), 'a' (architecture-specific
/// features such as wgmma and setmaxnreg: runs on exactly this capability)
/// or 'f' (family-specific: this capability and later minors of its major).
struct Architecture {
  int number = 0;
  char variant = 0;
  /// Reads "sm_90", "sm_90a", "sm_100f"; nullopt for anything else.
  static std::optional<Architecture> parse(std::string_view text);
  std::string str() const;
  bool operator==(const Architecture&) const = default;
};

/// Empty when a device of architecture `device` (its capability; a variant
/// there is ignored) can run code that needs `needed`; otherwise why not,
/// e.g. "needs sm_90a (compute capability 9.0 exactly); this device is sm_80".
std::string missing_architecture(const Architecture& needed, const Architecture& device);

/// The architecture to compile a config for, given the one the caller names
/// (`base`: the device's, or --arch) and the one the config needs: the needed
/// one when it has a variant or `base` is older than it, else `base`.  So
/// without a GPU a config still compiles for what it needs.
std::string compile_target(std::string_view base, const std::optional<Architecture>& needed);

/// Whether a cubin compiled for `binary` runs on a device of `device`: the
/// same capability (a variant-free cubin of an older one is not reused).
bool runs_binary(std::string_view binary, std::string_view device);

}  // namespace mlatune
