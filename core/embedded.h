// Files compiled into the binary at build time (kernel templates and search
// spaces), so that mlatune runs from any directory.  A file on disk always wins
// over its embedded copy: users edit templates without rebuilding mlatune.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace mlatune {

/// One embedded file, named by its path relative to the source root.
struct EmbeddedFile {
  std::string_view path;   // e.g. "templates/fused_mla_attention.cu"
  std::string_view bytes;
};

std::span<const EmbeddedFile> embedded_files();

/// The embedded file whose relative path is `path`, or whose path ends in
/// "/<path>" (so "fused_mla_attention.cu" finds "templates/fused_mla_attention.cu").
std::optional<std::string_view> find_embedded(std::string_view path);

/// Where a text came from: a file on disk, or the copy embedded at build time.
struct LoadedText {
  std::string text;
  std::string origin;  // the disk path, or "embedded:<relative path>"
};

/// The largest text file mlatune reads (templates, spaces): a bound on the
/// memory a wrong path can claim.
inline constexpr std::uintmax_t max_text_file_bytes = std::uintmax_t{16} << 20;

/// Why `path`, which exists, cannot be read as a text file (not a regular
/// file, or larger than max_text_file_bytes); empty when it can.
std::string unreadable_text_file_reason(const std::filesystem::path& path);

/// Reads `path` from disk; if it does not exist, falls back to the embedded
/// copy with the same relative path or file name.  Throws InputError when
/// neither exists or the path is not a regular file of at most
/// max_text_file_bytes (EnvironmentError when reading it fails).
LoadedText load_text_file(const std::filesystem::path& path);

}  // namespace mlatune
