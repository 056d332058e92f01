#include "core/template_source.h"

#include <regex>
#include <set>

#include <fmt/format.h>

#include "core/embedded.h"
#include "core/error.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

// Includes nest at most this deep: a cycle is refused by `seen`, and this
// bounds what a pathological chain of distinct files can do.
constexpr int max_include_depth = 16;

void append_inlined(std::string_view text, const fs::path& path, std::set<std::string>& seen, int depth,
                    std::string& out) {
  static const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)"\s*(//.*)?$)re");
  const std::string name = path.filename().string();
  std::size_t line_number = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string line(text.substr(start, end - start));
    start = end + 1;
    ++line_number;
    std::smatch match;
    if (!std::regex_match(line, match, include_line)) {
      out += line;
      out += '\n';
      continue;
    }
    const fs::path included = (path.parent_path() / match[1].str()).lexically_normal();
    if (depth >= max_include_depth)
      throw InputError(SourceLocation{path.string(), static_cast<int>(line_number)},
                       fmt::format("includes nest deeper than {} files", max_include_depth));
    if (seen.insert(included.generic_string()).second) {
      LoadedText loaded;
      try {
        loaded = load_text_file(included);
      } catch (const InputError& error) {
        throw InputError(SourceLocation{path.string(), static_cast<int>(line_number)},
                         fmt::format("included file '{}' cannot be read: {}", match[1].str(), error.what()));
      }
      out += fmt::format("#line 1 \"{}\"\n", included.filename().string());
      append_inlined(loaded.text, included, seen, depth + 1, out);
    }
    out += fmt::format("#line {} \"{}\"\n", line_number + 1, name);
  }
}

}  // namespace

std::string inline_template_includes(std::string_view text, const fs::path& path) {
  if (text.find("#include") == std::string_view::npos &&
      text.find("# include") == std::string_view::npos)
    return std::string(text);  // the common case: the text as it was, byte for byte
  std::set<std::string> seen{path.lexically_normal().generic_string()};
  std::string out;
  out.reserve(text.size());
  append_inlined(text, path, seen, 0, out);
  return out;
}

}  // namespace mlatune
