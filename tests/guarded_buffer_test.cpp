// Guarded buffers without a GPU: the layout arithmetic (alignment, guard
// sizes), the guard pattern, the messages that name what a candidate
// damaged, and the support kernels that check guards and inputs compiling
// for sm_90 with NVRTC.
#include <bit>
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "core/embedded.h"
#include "tuner/guarded_buffer.h"
#include "tuner/support_kernels.h"

namespace mlatune {
namespace {

void expect_sound(const GuardLayout& layout, std::size_t bytes) {
  SCOPED_TRACE(bytes);
  EXPECT_EQ(layout.bytes, bytes);
  // The data starts at a multiple of 256 from a cudaMalloc'd (256-aligned) base.
  EXPECT_EQ(layout.front % guard_alignment, 0u);
  EXPECT_EQ(layout.total % guard_alignment, 0u);
  EXPECT_EQ(layout.front + layout.bytes + layout.back(), layout.total);
  // The check kernels read the guards as 32-bit words.
  EXPECT_EQ(layout.back() % 4, 0u);
  EXPECT_GE(layout.front, min_guard_bytes);
  EXPECT_GE(layout.back(), min_guard_bytes);
  EXPECT_LE(layout.front, max_guard_bytes);
  EXPECT_LT(layout.back(), max_guard_bytes + guard_alignment);
}

TEST(GuardLayout, DataStaysAlignedAndBothGuardsAreLargeEnough) {
  for (std::size_t bytes : {std::size_t{4}, std::size_t{1000} * 4, std::size_t{1001} * 4,
                            std::size_t{65536} * 4, std::size_t{3} * 1000 * 1000 * 4,
                            std::size_t{1} << 30})
    expect_sound(guard_layout(bytes), bytes);
}

TEST(GuardLayout, GuardIsAQuarterOfTheBufferWithinBounds) {
  // Small buffers get the minimum on both sides.
  GuardLayout small = guard_layout(4096);
  EXPECT_EQ(small.front, min_guard_bytes);
  EXPECT_EQ(small.back(), min_guard_bytes);
  // 4 MiB: a 1 MiB guard, so an index a whole quarter of the tensor too far
  // still lands in it.
  GuardLayout medium = guard_layout(std::size_t{4} << 20);
  EXPECT_EQ(medium.front, std::size_t{1} << 20);
  EXPECT_EQ(medium.back(), std::size_t{1} << 20);
  // 1 GiB: capped.
  GuardLayout large = guard_layout(std::size_t{1} << 30);
  EXPECT_EQ(large.front, max_guard_bytes);
  EXPECT_EQ(large.back(), max_guard_bytes);
  // A size that is not a multiple of 256: the back guard takes up the rest.
  GuardLayout odd = guard_layout(1001 * 4);
  EXPECT_EQ(odd.back(), min_guard_bytes + (4096 - 4004));
}

TEST(GuardLayout, SizeMustBeWholeWords) { EXPECT_THROW(guard_layout(6), InputError); }

TEST(GuardLayout, UnguardedIsTheBufferAlone) {
  GuardLayout layout = unguarded_layout(4000);
  EXPECT_EQ(layout.front, 0u);
  EXPECT_EQ(layout.back(), 0u);
  EXPECT_EQ(layout.total, 4000u);
}

TEST(GuardPattern, IsNeitherZeroNorNaNNorAPlausibleValue) {
  auto as_float = std::bit_cast<float>(guard_word);
  std::uint64_t wide = (std::uint64_t{guard_word} << 32) | guard_word;
  auto as_double = std::bit_cast<double>(wide);
  EXPECT_TRUE(std::isfinite(as_float));
  EXPECT_TRUE(std::isfinite(as_double));
  EXPECT_NE(as_float, 0.0f);
  EXPECT_LT(std::fabs(as_float), 1e-15f);
  EXPECT_LT(std::fabs(as_double), 1e-100);
  // The fault family's stray value (42.0f) shares no byte with the pattern,
  // so its four written bytes all count as changed.
  float stray = 42.0f;
  unsigned char bytes[4];
  std::memcpy(bytes, &stray, 4);
  for (unsigned char byte : bytes) EXPECT_NE(byte, guard_word & 0xffu);
}

TEST(GuardDamage, NamesTheBufferTheSideAndTheFirstChangedByte) {
  GuardLayout layout = guard_layout(65536 * 4);
  const Tally clean;
  EXPECT_FALSE(guard_damage("out", layout, clean, clean));
  EXPECT_EQ(guard_damage("out", layout, clean, Tally{4, 0}),
            "wrote 4 bytes past the end of out (first changed byte at +0)");
  EXPECT_EQ(guard_damage("out", layout, Tally{4, layout.front - 4}, clean),
            "wrote 4 bytes before the start of out (first changed byte at -4)");
  EXPECT_EQ(guard_damage("ws", layout, Tally{1, layout.front - 1}, Tally{8, 16}),
            "wrote 1 byte before the start of ws (first changed byte at -1); "
            "wrote 8 bytes past the end of ws (first changed byte at +16)");
}

TEST(InputDamage, NamesTheInputAndTheFirstChangedElement) {
  EXPECT_FALSE(input_damage("b", Tally{}, 65536));
  EXPECT_EQ(input_damage("b", Tally{1, 17}, 65536),
            "overwrote input b (first changed element 17; 1 of 65536 elements changed)");
}

TEST(SupportKernels, IntegrityKernelsCompileForSm90) {
  auto source = find_embedded("templates/mlatune_support.cu");
  ASSERT_TRUE(source);
  CubinBuild build = nvrtc_compile_cubin(*source, "mlatune_support.cu", "mlatune_check_guard", {}, "sm_90");
  ASSERT_TRUE(build.ok) << build.log;
  // Every kernel SupportKernels loads by name is in the image.
  for (const char* entry : {"mlatune_fill_guard", "mlatune_check_guard", "mlatune_diff_u32",
                            "mlatune_diff_u64", "mlatune_widen_f32", "mlatune_compare_f32"})
    EXPECT_NE(build.cubin.find(entry), std::string::npos) << entry;
}

}  // namespace
}  // namespace mlatune
