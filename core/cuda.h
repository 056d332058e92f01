// The CUDA runtime, seen through mlatune's error and ownership rules: one
// checking function for every runtime call (a typed CudaError with the call
// text, file:line, the error's name and description), move-only owners for
// device memory, events, streams and loaded kernels, and a probe that says
// whether a GPU is usable here and why not.
//
// Only the runtime API is used (libcudart_static): it loads the driver lazily,
// so programs linking this start on machines without libcuda.so.1 and learn
// "no driver" as an error value.  cuda_runtime_api.h stays in the .cpp files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/device.h"
#include "core/error.h"

namespace mlatune {

/// A failed CUDA runtime call.  `sticky()` says whether the error has broken
/// the CUDA context (illegal address, trap, ...): then every later call in
/// this process fails too, and only a new process can use the GPU again.
class CudaError : public EnvironmentError {
 public:
  CudaError(int code, std::string_view call, std::string_view file, int line);
  int code() const { return code_; }
  /// "cudaErrorIllegalAddress".
  const std::string& name() const { return name_; }
  /// "an illegal memory access was encountered".
  const std::string& description() const { return description_; }
  bool sticky() const;

 private:
  int code_;
  std::string name_;
  std::string description_;
};

/// Whether a runtime error code leaves the context unusable.
bool cuda_error_is_sticky(int code);
/// cudaGetErrorName / cudaGetErrorString of a code.
std::string cuda_error_name(int code);
std::string cuda_error_string(int code);

/// Throws CudaError unless `code` is cudaSuccess.
void cuda_check(int code, std::string_view call, std::string_view file, int line);
/// Same, for destructors: reports to stderr and returns false instead of throwing.
bool cuda_check_nothrow(int code, std::string_view call, std::string_view file, int line) noexcept;

#define MLATUNE_CUDA(call) ::mlatune::cuda_check(static_cast<int>(call), #call, __FILE__, __LINE__)
#define MLATUNE_CUDA_NOTHROW(call) \
  ::mlatune::cuda_check_nothrow(static_cast<int>(call), #call, __FILE__, __LINE__)

/// What mlatune needs to know about the device it runs on.
struct DeviceProperties {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int multiprocessors = 0;
  std::int64_t l2_bytes = 0;
  std::int64_t total_memory = 0;
  std::int64_t shared_per_block_optin = 0;  // the most a block may opt in to
  std::int64_t shared_per_block = 0;        // without opting in (48 KiB)
  int max_threads_per_block = 0;
  std::int64_t max_grid[3] = {0, 0, 0};
  std::int64_t max_block[3] = {0, 0, 0};
  std::string driver_version;  // the CUDA version the driver supports, "13.0"
  /// "sm_90": the architecture to compile for.
  std::string arch() const;
  /// What results depend on (the store's device identity).
  DeviceInfo info() const;
};

/// Whether a GPU can be used by this process: `usable` with the device's
/// description, or the reason it cannot ("no CUDA driver (libcuda.so.1 not
/// found)", "no CUDA device", ...).  Initializes CUDA when a driver exists.
struct GpuProbe {
  bool usable = false;
  std::string reason;
  DeviceProperties device;
  int device_count = 0;  // devices this process sees (cudaGetDeviceCount), when it could ask
};
GpuProbe probe_gpu(int ordinal = 0);

/// cudaGetLastError: returns and clears the last error of this thread (so a
/// refused launch does not resurface at the next call).
int cuda_take_last_error();

/// Free and total device memory in bytes (cudaMemGetInfo).
std::pair<std::int64_t, std::int64_t> device_memory();

/// A device allocation (cudaMalloc), freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return pointer_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;
  void* pointer_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A non-blocking CUDA stream, destroyed on destruction.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /// The cudaStream_t, as an opaque pointer.
  void* get() const { return stream_; }
  void synchronize() const;

 private:
  void* stream_ = nullptr;
};

/// A CUDA event with timing enabled.
class Event {
 public:
  Event();
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void synchronize() const;
  /// Milliseconds from `start` to this event (both recorded and complete).
  float elapsed_ms_since(const Event& start) const;
  void* get() const { return event_; }

 private:
  void* event_ = nullptr;
};

/// Static resource use of a loaded kernel (cudaFuncGetAttributes).
struct KernelAttributes {
  int max_threads_per_block = 0;  // limited by the kernel's registers
  int registers = 0;
  std::int64_t static_shared_bytes = 0;
  std::int64_t local_bytes = 0;
};

/// One kernel of a cubin loaded with the runtime's library API
/// (cudaLibraryLoadData + cudaLibraryGetKernel).  Kernels of one image share
/// its library (sibling()), which is unloaded with the last of them.
class LoadedKernel {
 public:
  LoadedKernel() = default;
  /// Throws CudaError if the image cannot be loaded (wrong architecture, ...)
  /// or has no kernel `entry`.
  LoadedKernel(std::string_view image, const std::string& entry);
  ~LoadedKernel();
  LoadedKernel(LoadedKernel&& other) noexcept;
  LoadedKernel& operator=(LoadedKernel&& other) noexcept;
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  /// Another kernel of the same loaded image, without loading it again (a
  /// load costs milliseconds on a first call); throws CudaError when the
  /// image has no kernel `entry`.
  LoadedKernel sibling(const std::string& entry) const;

  const std::string& entry() const { return entry_; }
  /// The cudaKernel_t, as an opaque pointer: for a caller that launches it
  /// with cudaLaunchKernel itself (the benchmark's raw baseline).
  void* handle() const { return kernel_; }
  KernelAttributes attributes() const;
  /// cudaFuncAttributeMaxDynamicSharedMemorySize; returns the runtime's error
  /// code (0 on success) because a refusal is a property of the config.
  int set_max_dynamic_shared(std::int64_t bytes) const;
  /// cudaLaunchKernel; returns the error code of the launch call itself
  /// (a refused launch is a value, not an exception).
  int launch(const std::int64_t grid[3], const std::int64_t block[3], std::int64_t shared_bytes,
             void** arguments, const Stream& stream) const;
  /// Same, on a stream the caller owns (a cudaStream_t as an opaque pointer;
  /// null is the legacy default stream).
  int launch(const std::int64_t grid[3], const std::int64_t block[3], std::int64_t shared_bytes,
             void** arguments, void* stream) const;

 private:
  struct Library;  // the image and its cudaLibrary_t, unloaded by the last kernel
  LoadedKernel(std::shared_ptr<const Library> library, const std::string& entry);
  std::shared_ptr<const Library> library_;
  void* kernel_ = nullptr;
  std::string entry_;
};

}  // namespace mlatune
