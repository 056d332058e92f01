#include "cache/shape_table.h"

namespace mlatune {

std::uint64_t shape_hash(std::span<const std::int64_t> shape) noexcept {
  // Multiply-xorshift per value: shapes that differ in any one size (often by
  // a small amount, or by a power of two) land in different slots.
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ shape.size();
  for (std::int64_t v : shape) {
    h ^= static_cast<std::uint64_t>(v);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h;
}

std::uint64_t next_shape_table_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace mlatune
