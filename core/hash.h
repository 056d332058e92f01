// Content hashes used as cache keys (compiled binaries, template and space
// versions): XXH3-128 from the xxHash library (header-only use, no link
// dependency), printed as 32 hex digits.
#pragma once
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

namespace mlatune {

/// content_hash one part at a time; a copy goes on from where the original
/// stood, so a prefix shared by many hashes (a kernel's template text) is
/// hashed once.
class ContentHasher {
 public:
  ContentHasher();
  ~ContentHasher();
  ContentHasher(const ContentHasher& other);
  ContentHasher& operator=(const ContentHasher& other);
  /// Adds one length-prefixed part, as content_hash does for each.
  void add(std::string_view part);
  /// content_hash of the parts added so far (the hasher can go on).
  std::string digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Hash of a sequence of byte strings; each part is length-prefixed, so
/// ("ab","c") and ("a","bc") differ.
std::string content_hash(std::initializer_list<std::string_view> parts);
std::string content_hash(std::string_view bytes);

}  // namespace mlatune
