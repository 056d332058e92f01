// The evaluator's helper kernels (templates/mlatune_support.cu) compiled for
// the device at hand and loaded, plus the minimal NVRTC call that compiles
// them and the reference kernels.
//
// Why a second NVRTC caller beside the Compiler (core/compiler.h): the worker
// must compile its own helpers and the float64 reference for whatever GPU it
// finds, and this file predates the Compiler; the two can be unified later.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cuda.h"

namespace mlatune {

/// Result of one NVRTC compilation: a cubin, or the log that says why not.
struct CubinBuild {
  bool ok = false;
  std::string cubin;
  std::string log;
};

/// Compiles `source` (named `name` in messages; `entry` is one of its
/// extern "C" kernels) to a cubin for `arch` ("sm_90") with `-D` definitions,
/// through the one NVRTC path (core/compiler.h).  Throws EnvironmentError
/// when NVRTC itself fails; a compile error in the source is `log`.
CubinBuild nvrtc_compile_cubin(std::string_view source, const std::string& name, const std::string& entry,
                               const std::vector<std::pair<std::string, std::string>>& definitions,
                               const std::string& arch);

/// Number of blocks of every comparison (see mlatune_support.cu).
inline constexpr unsigned compare_blocks = 256;
inline constexpr unsigned compare_threads = 256;
inline constexpr unsigned compare_partials = 5;

/// Totals of one comparison of an output with its float64 reference.
struct ComparisonSums {
  double squared_difference = 0.0;
  double squared_reference = 0.0;
  double max_abs = 0.0;
  std::uint64_t nonfinite_output = 0;
  std::uint64_t nonfinite_reference = 0;
};

/// What one integrity check found: how many bytes (of a guard) or elements
/// (of an input) changed, and the lowest offset or index that did.
struct Tally {
  std::uint64_t changed = 0;
  std::uint64_t first = UINT64_MAX;  // UINT64_MAX when nothing changed
};

/// Device-side counters for several integrity checks at once: each check
/// writes its slot, and one read brings every slot back (one copy, one
/// synchronization per validation launch, however large the buffers).
class Tallies {
 public:
  Tallies() = default;
  explicit Tallies(std::size_t slots);
  std::size_t slots() const { return slots_; }
  /// Zeroes every count and sets every `first` to UINT64_MAX (asynchronous).
  void reset(const Stream& stream) const;
  /// Device addresses of slot `slot`'s two counters.
  std::uint64_t* changed(std::size_t slot) const;
  std::uint64_t* first(std::size_t slot) const;
  /// Every slot, after the checks queued on `stream` (synchronizes).
  std::vector<Tally> read(const Stream& stream) const;

 private:
  DeviceBuffer buffer_;  // slots_ counts, then slots_ firsts
  std::size_t slots_ = 0;
};

/// The support kernels, loaded in the current context.  Every launch goes
/// to `stream` and is checked; none synchronizes except compare().
class SupportKernels {
 public:
  explicit SupportKernels(const DeviceProperties& device);

  void fill_normal_f32(void* data, std::uint64_t n, std::uint64_t key, const Stream& stream) const;
  void fill_normal_f64(void* data, std::uint64_t n, std::uint64_t key, const Stream& stream) const;
  void fill_int32(void* data, std::uint64_t n, std::uint64_t key, const Stream& stream) const;
  void fill_int64(void* data, std::uint64_t n, std::uint64_t key, const Stream& stream) const;
  void poison_f32(void* data, std::uint64_t n, const Stream& stream) const;
  void poison_f64(void* data, std::uint64_t n, const Stream& stream) const;
  void flush_l2(void* data, std::uint64_t words, std::uint32_t value, const Stream& stream) const;
  /// Compares `n` elements of `out` (float32 when `out_is_f32`, else float64)
  /// with `ref` (float64); `scratch` holds compare_blocks * compare_partials
  /// + compare_partials doubles.  Synchronizes `stream`.
  ComparisonSums compare(const void* out, bool out_is_f32, const void* ref, std::uint64_t n,
                         void* scratch, const Stream& stream) const;
  /// Writes `pattern` into `words` 32-bit words at `data`.
  void fill_guard(void* data, std::uint64_t words, std::uint32_t pattern, const Stream& stream) const;
  /// Counts the bytes of `words` words at `data` that differ from `pattern`
  /// into slot `slot` of `tallies` (first = byte offset from `data`).
  void check_guard(const void* data, std::uint64_t words, std::uint32_t pattern,
                   const Tallies& tallies, std::size_t slot, const Stream& stream) const;
  /// Counts the elements of `element_size` bytes (4 or 8) that differ bit for
  /// bit between `a` and `b` into slot `slot` (first = element index).
  void diff(const void* a, const void* b, std::uint64_t elements, std::size_t element_size,
            const Tallies& tallies, std::size_t slot, const Stream& stream) const;
  /// out[i] = (double)in[i] for `n` float32 elements.
  void widen_f32(const void* in, void* out, std::uint64_t n, const Stream& stream) const;
  /// One thread spinning for about `cycles` clocks (no memory traffic).
  void spin(std::int64_t cycles, const Stream& stream) const;
  /// The empty kernel, whose time is the floor of every measurement.
  const LoadedKernel& empty() const { return empty_; }

 private:
  void launch_elementwise(const LoadedKernel& kernel, std::uint64_t n, void** args,
                          const Stream& stream) const;
  int grid_limit_ = 1;
  LoadedKernel fill_f32_, fill_f64_, fill_i32_, fill_i64_, poison_f32_, poison_f64_, flush_,
      compare_f32_, compare_f64_, reduce_, empty_, spin_, fill_guard_, check_guard_, diff_u32_,
      diff_u64_, widen_f32_;
};

}  // namespace mlatune
