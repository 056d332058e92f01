#include "core/hash.h"

#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <fmt/format.h>

namespace mlatune {

std::string content_hash(std::initializer_list<std::string_view> parts) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  for (std::string_view part : parts) {
    std::uint64_t length = part.size();
    XXH3_128bits_update(&state, &length, sizeof length);
    XXH3_128bits_update(&state, part.data(), part.size());
  }
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

std::string content_hash(std::string_view bytes) { return content_hash({bytes}); }

}  // namespace mlatune
