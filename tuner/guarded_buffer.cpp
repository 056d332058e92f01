#include "tuner/guarded_buffer.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace mlatune {

namespace {

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

std::string byte_count(std::uint64_t n) { return fmt::format("{} byte{}", n, n == 1 ? "" : "s"); }

}  // namespace

GuardLayout guard_layout(std::size_t bytes) {
  if (bytes % 4 != 0)
    throw InputError(fmt::format("a guarded buffer of {} bytes: the size must be a multiple of 4", bytes));
  std::size_t guard = std::clamp(bytes / 4, min_guard_bytes, max_guard_bytes);
  GuardLayout layout;
  layout.front = round_up(guard, guard_alignment);
  layout.bytes = bytes;
  layout.total = layout.front + round_up(bytes + guard, guard_alignment);
  return layout;
}

GuardLayout unguarded_layout(std::size_t bytes) { return GuardLayout{0, bytes, bytes}; }

GuardedBuffer::GuardedBuffer(const GuardLayout& layout, const SupportKernels& support,
                             const Stream& stream)
    : layout_(layout), allocation_(std::max<std::size_t>(layout.total, 1)) {
  fill_guards(support, stream);
}

void GuardedBuffer::fill_guards(const SupportKernels& support, const Stream& stream) const {
  if (!guarded()) return;
  auto* base = static_cast<unsigned char*>(allocation_.get());
  support.fill_guard(base, layout_.front / 4, guard_word, stream);
  support.fill_guard(base + layout_.front + layout_.bytes, layout_.back() / 4, guard_word, stream);
}

void GuardedBuffer::check_guards(const SupportKernels& support, const Tallies& tallies,
                                 std::size_t slot, const Stream& stream) const {
  const auto* base = static_cast<const unsigned char*>(allocation_.get());
  support.check_guard(base, layout_.front / 4, guard_word, tallies, slot, stream);
  support.check_guard(base + layout_.front + layout_.bytes, layout_.back() / 4, guard_word, tallies,
                      slot + 1, stream);
}

std::optional<std::string> guard_damage(std::string_view name, const GuardLayout& layout,
                                        const Tally& front, const Tally& back) {
  std::vector<std::string> parts;
  if (front.changed > 0) {
    // Offsets count from the buffer's first byte: the front guard's are negative.
    auto offset = static_cast<std::int64_t>(front.first) - static_cast<std::int64_t>(layout.front);
    parts.push_back(fmt::format("wrote {} before the start of {} (first changed byte at {})",
                                byte_count(front.changed), name, offset));
  }
  if (back.changed > 0)
    parts.push_back(fmt::format("wrote {} past the end of {} (first changed byte at +{})",
                                byte_count(back.changed), name, back.first));
  if (parts.empty()) return std::nullopt;
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::optional<std::string> input_damage(std::string_view name, const Tally& tally,
                                        std::uint64_t elements) {
  if (tally.changed == 0) return std::nullopt;
  return fmt::format("overwrote input {} (first changed element {}; {} of {} elements changed)", name,
                     tally.first, tally.changed, elements);
}

}  // namespace mlatune
