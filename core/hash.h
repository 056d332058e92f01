// Content hashes used as cache keys (compiled binaries, template and space
// versions): XXH3-128 from the xxHash library (header-only use, no link
// dependency), printed as 32 hex digits.
#pragma once
#include <string>
#include <string_view>
#include <initializer_list>

namespace mlatune {

/// Hash of a sequence of byte strings; each part is length-prefixed, so
/// ("ab","c") and ("a","bc") differ.
std::string content_hash(std::initializer_list<std::string_view> parts);
std::string content_hash(std::string_view bytes);

}  // namespace mlatune
