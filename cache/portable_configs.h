// Best configs that travel: a database's best entries as a JSON file
// (docs/portable-configs.md) that another database imports, with no binaries
// (the importing side compiles them).  Each entry says which kernel version,
// device and toolchain its time was measured with, so that a time measured
// elsewhere is never taken for this device's: Store::import_best stores it
// under the device it was measured on, and `mlatune cache revalidate`
// measures foreign configs here.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/store.h"

namespace mlatune {

/// The "format" field of every portable configs file.
inline constexpr const char* portable_format_name = "mlatune-portable-configs";
/// The format this build writes and the only one it reads.
inline constexpr int portable_format_version = 1;

/// One best config as it travels: what it is for, what it was measured
/// with, and how fast it ran there.
struct PortableEntry {
  KernelInfo kernel;
  DeviceIdentity device;
  ToolchainInfo toolchain;
  std::string shape;   // canonical shape text
  std::string config;  // canonical config text
  Timing timing;       // median and the other statistics of its measurement
  std::optional<ErrorFigures> error;
  std::optional<ResourceUsage> resources;
  std::string measured_at;
  /// What ran when the time was measured, as a hash of the code (the PTX
  /// its variables nothing references left out) and of the launch at the
  /// shape (tuner/code_identity.h), written by `export-best --space` for
  /// entries of that space's version; absent in older files.
  /// It lets an entry outlive a template or space change that leaves its
  /// code as it was.
  std::optional<std::string> code;
  bool operator==(const PortableEntry&) const;
};

/// A portable configs file.
struct PortableConfigs {
  std::string exported_by;  // mlatune version that wrote it
  std::string exported_at;  // UTC time stamp
  std::vector<PortableEntry> entries;
};

/// The file's JSON text.
std::string portable_json(const PortableConfigs& configs);
/// Reads the JSON text; InputError naming `file_name` and the offending
/// field for anything malformed, and for another format or format version.
PortableConfigs parse_portable_json(std::string_view text, const std::string& file_name);

PortableConfigs read_portable_file(const std::filesystem::path& file);
/// Writes atomically (a temporary file renamed over `file`).
void write_portable_file(const std::filesystem::path& file, const PortableConfigs& configs);

/// The entries of kernel `current.name`: those of its version, and those of
/// other template or definition hashes.
struct VersionSplit {
  std::vector<PortableEntry> current;
  std::vector<PortableEntry> other;
};
VersionSplit split_by_version(const PortableConfigs& configs, const KernelInfo& current);

/// The entries of `current`'s kernel name; InputError when any of them was
/// tuned under another template or definition hash (unless
/// `skip_other_versions`, which drops those), or when there is none.
std::vector<PortableEntry> entries_for(const PortableConfigs& configs, const KernelInfo& current,
                                       const std::string& file_name, bool skip_other_versions);

}  // namespace mlatune
