// A kernel template as NVRTC compiles it: one text.  NVRTC has no file
// system of ours to search, and a binary's key is a hash of the template
// text, so a template's quoted includes (#include "x.cuh", resolved next to
// the template on disk, else in the copies embedded at build time) are
// inlined when the template is read: editing an included file changes the
// key like editing the template does.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace mlatune {

/// `text` (the template at `path`) with every line `#include "name"` replaced
/// by the text of `name` relative to path's folder (inlined the same way;
/// each file at most once), between #line directives so that compiler
/// messages name the right file and line.  Angle-bracket includes are left
/// as they are.  Throws InputError naming the including file and line when
/// an included file exists neither on disk nor embedded.
std::string inline_template_includes(std::string_view text, const std::filesystem::path& path);

}  // namespace mlatune
