#include "core/hash.h"

#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <fmt/format.h>

namespace mlatune {

struct ContentHasher::State {
  XXH3_state_t xxh;
};

ContentHasher::ContentHasher() : state_(std::make_unique<State>()) {
  XXH3_INITSTATE(&state_->xxh);
  XXH3_128bits_reset(&state_->xxh);
}

ContentHasher::~ContentHasher() = default;

ContentHasher::ContentHasher(const ContentHasher& other) : state_(std::make_unique<State>()) {
  XXH3_copyState(&state_->xxh, &other.state_->xxh);
}

ContentHasher& ContentHasher::operator=(const ContentHasher& other) {
  if (this != &other) XXH3_copyState(&state_->xxh, &other.state_->xxh);
  return *this;
}

void ContentHasher::add(std::string_view part) {
  const std::uint64_t length = part.size();
  XXH3_128bits_update(&state_->xxh, &length, sizeof length);
  XXH3_128bits_update(&state_->xxh, part.data(), part.size());
}

std::string ContentHasher::digest() const {
  const XXH128_hash_t h = XXH3_128bits_digest(&state_->xxh);
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

std::string content_hash(std::initializer_list<std::string_view> parts) {
  ContentHasher hasher;
  for (std::string_view part : parts) hasher.add(part);
  return hasher.digest();
}

std::string content_hash(std::string_view bytes) { return content_hash({bytes}); }

}  // namespace mlatune
