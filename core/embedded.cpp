#include "core/embedded.h"

#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune {

std::optional<std::string_view> find_embedded(std::string_view path) {
  for (const EmbeddedFile& file : embedded_files())
    if (file.path == path) return file.bytes;
  for (const EmbeddedFile& file : embedded_files()) {
    std::string_view p = file.path;
    if (p.size() > path.size() && p.ends_with(path) && p[p.size() - path.size() - 1] == '/')
      return file.bytes;
  }
  return std::nullopt;
}

std::string unreadable_text_file_reason(const std::filesystem::path& path) {
  std::error_code ec;
  // Reading a directory fails late; reading /dev/zero never ends.
  if (!std::filesystem::is_regular_file(path, ec))
    return std::filesystem::is_directory(path, ec) ? "is a directory, not a file"
                                                   : "is not a regular file (a device, FIFO or socket)";
  std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return {};  // the read below reports it
  if (size > max_text_file_bytes)
    return fmt::format("is {} bytes; expected a text file of at most {} bytes", size,
                       max_text_file_bytes);
  return {};
}

LoadedText load_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    if (std::string why = unreadable_text_file_reason(path); !why.empty())
      throw InputError(SourceLocation{path.string()}, why);
    std::ifstream in(path, std::ios::binary);
    if (!in) throw EnvironmentError(fmt::format("cannot open {} for reading", path.string()));
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (in.bad()) throw EnvironmentError(fmt::format("error while reading {}", path.string()));
    return {buffer.str(), path.string()};
  }
  // Not on disk: try "<parent dir name>/<file name>" first, then the bare name.
  std::string with_parent =
      (path.parent_path().filename() / path.filename()).generic_string();
  for (const std::string& key : {with_parent, path.filename().generic_string()}) {
    if (auto bytes = find_embedded(key)) {
      for (const EmbeddedFile& file : embedded_files())
        if (file.bytes.data() == bytes->data())
          return {std::string(*bytes), fmt::format("embedded:{}", file.path)};
    }
  }
  throw InputError(SourceLocation{path.string()},
                   "no such file (and no embedded copy of it in this mlatune build)");
}

}  // namespace mlatune
