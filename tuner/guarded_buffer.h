// A device buffer with guard regions: one allocation holding a front guard,
// the buffer itself and a back guard, the guards filled with a known
// pattern.  A kernel that writes a little past either end of the buffer
// changes the pattern instead of faulting (the guard is inside the same
// allocation, so the hardware sees nothing wrong) or of silently corrupting a
// neighbouring allocation; a check on the GPU finds the change afterwards.
// Used for every buffer a candidate sees during validation (tuner/workload.h,
// the evaluator's workspace lease).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/cuda.h"
#include "tuner/support_kernels.h"

namespace mlatune {

/// Every guard byte: 0xA5A5A5A5 is -2.9e-16 as a float32 and -1.1e-129 as a
/// float64, values no kernel of ours computes, and neither zero nor NaN (the
/// values a kernel writes by accident, and our own output poison).
inline constexpr std::uint32_t guard_word = 0xA5A5A5A5u;

/// Where the parts of a guarded allocation lie, in bytes from its start.
struct GuardLayout {
  std::size_t front = 0;  // front guard [0, front); the buffer starts here
  std::size_t bytes = 0;  // the buffer [front, front + bytes)
  std::size_t total = 0;  // back guard [front + bytes, total)
  std::size_t back() const { return total - front - bytes; }
};

/// Data alignment of a guarded buffer: what cudaMalloc guarantees, so float4
/// and wider loads stay aligned.
inline constexpr std::size_t guard_alignment = 256;
/// Smallest guard on either side.
inline constexpr std::size_t min_guard_bytes = 64 * 1024;
/// Largest guard on either side.
inline constexpr std::size_t max_guard_bytes = 16 * 1024 * 1024;

/// The layout for a buffer of `bytes` (a multiple of 4): each guard is a
/// quarter of the buffer, between min_guard_bytes and max_guard_bytes, so an
/// index off by a whole row or batch of a large tensor still lands in it; the
/// front guard is a multiple of guard_alignment and the back guard fills the
/// allocation up to the next multiple of it.  Throws InputError for a size
/// that is not a multiple of 4.
GuardLayout guard_layout(std::size_t bytes);
/// The layout without guards (front and back empty): for buffers that only
/// timing launches use, which nothing checks.
GuardLayout unguarded_layout(std::size_t bytes);

/// One guarded device allocation; its guards hold the pattern from birth.
class GuardedBuffer {
 public:
  GuardedBuffer() = default;
  /// Allocates `layout.total` bytes and fills the guards on `stream`.
  GuardedBuffer(const GuardLayout& layout, const SupportKernels& support, const Stream& stream);

  void* data() const { return static_cast<unsigned char*>(allocation_.get()) + layout_.front; }
  std::size_t bytes() const { return layout_.bytes; }
  const GuardLayout& layout() const { return layout_; }
  bool guarded() const { return layout_.total > layout_.bytes; }

  /// Writes the pattern over both guards again (asynchronous).
  void fill_guards(const SupportKernels& support, const Stream& stream) const;
  /// Queues the check of the front guard into slot `slot` of `tallies` and
  /// of the back guard into `slot + 1`.
  void check_guards(const SupportKernels& support, const Tallies& tallies, std::size_t slot,
                    const Stream& stream) const;

 private:
  GuardLayout layout_;
  DeviceBuffer allocation_;
};

/// What the checks of both guards of buffer `name` found, as one sentence:
/// "wrote 4 bytes past the end of out (first changed byte at +0)",
/// "wrote 4 bytes before the start of out (first changed byte at -4)", or
/// both joined by "; ".  Empty when neither guard changed.
std::optional<std::string> guard_damage(std::string_view name, const GuardLayout& layout,
                                        const Tally& front, const Tally& back);

/// "overwrote input b (first changed element 17; 1 of 65536 elements
/// changed)", or empty when `tally` found no change.
std::optional<std::string> input_damage(std::string_view name, const Tally& tally,
                                        std::uint64_t elements);

}  // namespace mlatune
