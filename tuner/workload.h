// A workload: the device buffers of one kernel family at one shape, filled
// with fresh random normal inputs on the GPU, with the float64 reference
// output computed by the space's reference kernel.  It holds several input
// sets: at least two for validation, more when timing rotates inputs to
// defeat the L2.  Lives in the worker process (it initializes CUDA).
#pragma once
#include <vector>
#include <cstdint>
#include <memory>

#include "core/cuda.h"
#include "core/launch_plan.h"
#include "tuner/evaluator.h"
#include "core/space.h"
#include "tuner/support_kernels.h"

namespace mlatune {

struct WorkloadOptions {
  std::uint64_t seed = 0;  // the caller draws a fresh one unless the user gave one
  CacheMode cache = CacheMode::cold;
  int validation_sets = 2;
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
  /// Argument pointers of input set `set`, in launch order (for cudaLaunchKernel).
  void** arguments(int set);

  /// Bytes of each workspace argument at this shape, in launch order.
  std::vector<std::int64_t> workspace_bytes() const;
  /// Points the workspace arguments of every input set at `pointers` (one
  /// per workspace argument; null to pass none, as for a config without a
  /// prologue).  Host-side only: affects launches issued afterwards.
  void set_workspace(const std::vector<void*>& pointers);

  /// Writes NaN into every output buffer (asynchronously, on stream()).
  void poison_outputs();
  /// Compares the outputs with the reference of validation set `set`
  /// (synchronizes).  `passed` is judged against tolerance().
  ValidationStats compare(int set);
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
