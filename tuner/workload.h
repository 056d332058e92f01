// A workload: the device buffers of one kernel family at one shape, filled
// with fresh random normal inputs on the GPU, with the float64 reference
// output computed by the space's reference kernel.  It holds several input
// sets: at least two for validation, more when timing rotates inputs to
// defeat the L2.  The buffers of validation are guarded and their inputs
// kept pristine, so that a candidate that writes where it must not is caught.
// Lives in the worker process (it initializes CUDA).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda.h"
#include "core/launch_plan.h"
#include "tuner/evaluator.h"
#include "core/space.h"
#include "tuner/guarded_buffer.h"
#include "tuner/input_kinds.h"
#include "tuner/support_kernels.h"

namespace mlatune {

struct WorkloadOptions {
  std::uint64_t seed = 0;  // the caller draws a fresh one unless the user gave one
  CacheMode cache = CacheMode::cold;
  int validation_sets = 2;
  /// Input kinds to validate on (tuner/input_kinds.h); empty: the space's
  /// (input_kinds_for).  Validation set s holds kind s % kinds, and there are
  /// at least as many validation sets as kinds, so every candidate meets the
  /// tolerance on every kind.
  std::vector<InputKind> kinds;
};

class Workload {
 public:
  /// Allocates and fills everything for `shape`.  Throws EnvironmentError
  /// ("no GPU: ...") without a usable GPU, InputError when the shape does not
  /// fit in device memory or the reference kernel cannot compile or run
  /// correctly, CudaError for a failing runtime call.
  Workload(const SearchSpace& space, const Shape& shape, WorkloadOptions options);
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  const DeviceProperties& device() const;
  const SupportKernels& support() const;
  const Stream& stream() const;
  const Tolerance& tolerance() const;
  std::uint64_t seed() const;

  /// Input sets held; the first validation_sets() have reference outputs.
  int input_sets() const;
  int validation_sets() const;
  /// The input kind of validation set `set`.
  InputKind input_kind(int set) const;
  /// Argument pointers of input set `set`, in launch order (for cudaLaunchKernel).
  void** arguments(int set);

  /// Bytes of each workspace argument at this shape, in launch order.
  std::vector<std::int64_t> workspace_bytes() const;
  /// Points the workspace arguments of every input set at `buffers` (one
  /// per workspace argument; null to pass a null pointer, as for a config
  /// without a prologue) and checks their guards in check_integrity().  The
  /// caller keeps them alive until it installs others.  Host-side only:
  /// affects launches issued afterwards.
  void set_workspace(const std::vector<const GuardedBuffer*>& buffers);

  /// Writes NaN into every output buffer (asynchronously, on stream()).
  void poison_outputs();
  /// Compares the outputs with the reference of validation set `set`
  /// (synchronizes).  `passed` is judged against tolerance().
  ValidationStats compare(int set);

  /// Memory integrity of validation.  Every output, every input of the
  /// validation sets and every installed workspace sits between guards
  /// (tuner/guarded_buffer.h), and the validation inputs have pristine copies.
  ///
  /// restore_integrity(): refills every guard and copies the pristine inputs
  /// back, so that what the next checks find is the next candidate's doing
  /// (timing launches are not checked).  Asynchronous.
  void restore_integrity();
  /// After a launch on validation set `set`: what the launch wrote outside
  /// its buffers or into its inputs, naming each buffer ("wrote 4 bytes past
  /// the end of out (first changed byte at +0)", "overwrote input b (first
  /// changed element 17; ...)"); empty when nothing.  Whatever changed is
  /// restored before returning.  Synchronizes.
  std::optional<std::string> check_integrity(int set);
  /// Keeps a float64 copy of the current outputs (a first run's).
  void keep_outputs();
  /// Compares the outputs with the copy keep_outputs() took, the copy in
  /// place of the reference (synchronizes).  `passed` is judged against
  /// tolerance(), the bar a kernel with atomics that round differently from
  /// run to run must still meet.
  ValidationStats compare_with_kept();
  /// Writes the flush buffer (cold mode only; asynchronous).
  void flush_l2();
  std::int64_t flush_bytes() const;

  /// Host copies, for checking against a CPU implementation: the raw bytes
  /// of input buffer `input` (its index among the input buffers, in launch
  /// order) of input set `set`, and the float64 reference of output `output`
  /// for validation set `set`.  Synchronous.
  std::vector<unsigned char> download_input(int set, std::size_t input) const;
  std::vector<double> download_reference(int set, std::size_t output) const;

  /// Median time of the reference kernel (µs), for timeouts.
  double reference_us() const;
  /// Bytes of device memory this workload holds.
  std::int64_t device_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// The argument layout of a workload whose arguments are `bound`: every
/// config's at that shape (scalars depend on the shape alone).  Throws
/// InputError with the layout's refusal when a scalar cannot be passed: no
/// config can run that shape.
ArgumentLayout workload_layout(const std::vector<BoundArgument>& bound);

/// Whether `stats` meets `tolerance`: finite everywhere, relative L2 and (if
/// set) max abs within bounds.  Returns the reason when not.
std::optional<std::string> tolerance_failure(const ValidationStats& stats, const Tolerance& tolerance);

}  // namespace mlatune
