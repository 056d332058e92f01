#include "core/cuda.h"

#include "core/binary_image.h"

#include <cstdio>
#include <dlfcn.h>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

namespace mlatune {

std::string cuda_error_name(int code) {
  const char* name = cudaGetErrorName(static_cast<cudaError_t>(code));
  return name ? name : fmt::format("cudaError {}", code);
}

std::string cuda_error_string(int code) {
  const char* text = cudaGetErrorString(static_cast<cudaError_t>(code));
  return text ? text : "unknown CUDA error";
}

bool cuda_error_is_sticky(int code) {
  // The errors after which the CUDA programming guide says the context is
  // corrupted and the process must be restarted to use the device again.
  switch (static_cast<cudaError_t>(code)) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

namespace {
std::string describe(int code, std::string_view call, std::string_view file, int line) {
  return fmt::format("{}:{}: {} failed: {} ({})", file, line, call, cuda_error_string(code),
                     cuda_error_name(code));
}
}  // namespace

CudaError::CudaError(int code, std::string_view call, std::string_view file, int line)
    : EnvironmentError(describe(code, call, file, line)),
      code_(code),
      name_(cuda_error_name(code)),
      description_(cuda_error_string(code)) {}

bool CudaError::sticky() const { return cuda_error_is_sticky(code_); }

void cuda_check(int code, std::string_view call, std::string_view file, int line) {
  if (code != cudaSuccess) throw CudaError(code, call, file, line);
}

bool cuda_check_nothrow(int code, std::string_view call, std::string_view file,
                        int line) noexcept {
  if (code == cudaSuccess) return true;
  // After a sticky error every release fails the same way; that error was
  // already reported by the call that met it first, so only others are shown.
  if (cuda_error_is_sticky(code)) return false;
  std::fprintf(stderr, "mlatune: warning: %.*s:%d: %.*s failed: %s (%s)\n",
               static_cast<int>(file.size()), file.data(), line, static_cast<int>(call.size()),
               call.data(), cudaGetErrorString(static_cast<cudaError_t>(code)),
               cudaGetErrorName(static_cast<cudaError_t>(code)));
  return false;
}

std::string DeviceProperties::arch() const { return fmt::format("sm_{}{}", cc_major, cc_minor); }

DeviceInfo DeviceProperties::info() const {
  DeviceInfo info;
  info.name = name;
  info.arch = arch();
  info.sm_count = multiprocessors;
  info.memory_bytes = total_memory;
  info.driver_version = driver_version;
  info.l2_bytes = l2_bytes;
  info.max_shared_per_block_optin = shared_per_block_optin;
  return info;
}

namespace {

// cudart reports a missing libcuda.so.1 and a driver that is too old with the
// same code; looking for the library tells the two apart.
bool driver_library_present() {
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!handle) return false;
  dlclose(handle);
  return true;
}

std::string cuda_version_string(int version) {
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

}  // namespace

GpuProbe probe_gpu(int ordinal) {
  GpuProbe probe;
  int count = 0;
  int code = cudaGetDeviceCount(&count);
  if (code == cudaErrorInsufficientDriver) {
    if (!driver_library_present()) {
      probe.reason = "no CUDA driver found (libcuda.so.1 absent)";
    } else {
      int runtime = 0;
      (void)cudaRuntimeGetVersion(&runtime);
      probe.reason = fmt::format("the CUDA driver is older than this program's CUDA runtime {}: {} ({})",
                                 cuda_version_string(runtime), cuda_error_string(code),
                                 cuda_error_name(code));
    }
    return probe;
  }
  if (code != cudaSuccess) {
    probe.reason = fmt::format("cudaGetDeviceCount failed: {} ({})", cuda_error_string(code),
                               cuda_error_name(code));
    return probe;
  }
  probe.device_count = count;
  if (count == 0) {
    probe.reason = "no GPU (the CUDA driver reports no device)";
    return probe;
  }
  if (ordinal < 0 || ordinal >= count) {
    probe.reason = fmt::format("CUDA device {} requested but only {} present", ordinal, count);
    return probe;
  }
  code = cudaSetDevice(ordinal);
  if (code != cudaSuccess) {
    probe.reason = fmt::format("cudaSetDevice({}) failed: {} ({})", ordinal,
                               cuda_error_string(code), cuda_error_name(code));
    return probe;
  }
  DeviceProperties& d = probe.device;
  d.ordinal = ordinal;
  char name[256] = {};
  cudaDeviceProp props{};
  code = cudaGetDeviceProperties(&props, ordinal);
  if (code != cudaSuccess) {
    probe.reason = fmt::format("cudaGetDeviceProperties failed: {} ({})", cuda_error_string(code),
                               cuda_error_name(code));
    return probe;
  }
  std::snprintf(name, sizeof name, "%s", props.name);
  d.name = name;
  d.cc_major = props.major;
  d.cc_minor = props.minor;
  d.multiprocessors = props.multiProcessorCount;
  d.l2_bytes = props.l2CacheSize;
  d.total_memory = static_cast<std::int64_t>(props.totalGlobalMem);
  d.shared_per_block_optin = static_cast<std::int64_t>(props.sharedMemPerBlockOptin);
  d.shared_per_block = static_cast<std::int64_t>(props.sharedMemPerBlock);
  d.max_threads_per_block = props.maxThreadsPerBlock;
  for (int i = 0; i < 3; ++i) {
    d.max_grid[i] = props.maxGridSize[i];
    d.max_block[i] = props.maxThreadsDim[i];
  }
  int driver = 0;
  code = cudaDriverGetVersion(&driver);
  if (code != cudaSuccess) {
    probe.reason = fmt::format("cudaDriverGetVersion failed: {} ({})", cuda_error_string(code),
                               cuda_error_name(code));
    return probe;
  }
  d.driver_version = cuda_version_string(driver);
  probe.usable = true;
  return probe;
}

int cuda_take_last_error() { return cudaGetLastError(); }

std::pair<std::int64_t, std::int64_t> device_memory() {
  std::size_t free_bytes = 0, total_bytes = 0;
  MLATUNE_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  return {static_cast<std::int64_t>(free_bytes), static_cast<std::int64_t>(total_bytes)};
}

// ---- DeviceBuffer -------------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  MLATUNE_CUDA(cudaMalloc(&pointer_, bytes));
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() noexcept {
  if (pointer_) MLATUNE_CUDA_NOTHROW(cudaFree(pointer_));
  pointer_ = nullptr;
  bytes_ = 0;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(std::exchange(other.pointer_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    pointer_ = std::exchange(other.pointer_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// ---- Stream -------------------------------------------------------------------

Stream::Stream() {
  cudaStream_t stream = nullptr;
  MLATUNE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_ = stream;
}

Stream::~Stream() {
  if (stream_) MLATUNE_CUDA_NOTHROW(cudaStreamDestroy(static_cast<cudaStream_t>(stream_)));
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_) MLATUNE_CUDA_NOTHROW(cudaStreamDestroy(static_cast<cudaStream_t>(stream_)));
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const {
  MLATUNE_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

// ---- Event --------------------------------------------------------------------

Event::Event() {
  cudaEvent_t event = nullptr;
  MLATUNE_CUDA(cudaEventCreateWithFlags(&event, cudaEventDefault));
  event_ = event;
}

Event::~Event() {
  if (event_) MLATUNE_CUDA_NOTHROW(cudaEventDestroy(static_cast<cudaEvent_t>(event_)));
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) MLATUNE_CUDA_NOTHROW(cudaEventDestroy(static_cast<cudaEvent_t>(event_)));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(const Stream& stream) {
  MLATUNE_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(event_),
                               static_cast<cudaStream_t>(stream.get())));
}

void Event::synchronize() const {
  MLATUNE_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.0f;
  MLATUNE_CUDA(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.event_),
                                    static_cast<cudaEvent_t>(event_)));
  return ms;
}

// ---- LoadedKernel -------------------------------------------------------------

struct LoadedKernel::Library {
  // An image is one cubin or a pack of them (core/binary_image.h): each is
  // loaded as a library of its own.  cudaLibraryLoadData reads a cubin's
  // size from its ELF header; the owned copies are heap-aligned and outlive
  // their libraries (lazy loading may read them later).
  explicit Library(std::string_view image_view) {
    for (std::string_view cubin : unpack_images(image_view)) images.emplace_back(cubin);
    for (const std::string& cubin : images) {
      cudaLibrary_t loaded = nullptr;
      MLATUNE_CUDA(cudaLibraryLoadData(&loaded, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
      libraries.push_back(loaded);
    }
  }
  ~Library() {
    for (void* library : libraries) MLATUNE_CUDA_NOTHROW(cudaLibraryUnload(static_cast<cudaLibrary_t>(library)));
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  std::vector<std::string> images;
  std::vector<void*> libraries;
};

LoadedKernel::LoadedKernel(std::string_view image, const std::string& entry)
    : LoadedKernel(std::make_shared<const Library>(image), entry) {}

LoadedKernel::LoadedKernel(std::shared_ptr<const Library> library, const std::string& entry)
    : library_(std::move(library)), entry_(entry) {
  int code = cudaSuccess;
  for (std::size_t i = 0; i < library_->libraries.size(); ++i) {
    cudaKernel_t kernel = nullptr;
    code = cudaLibraryGetKernel(&kernel, static_cast<cudaLibrary_t>(library_->libraries[i]), entry.c_str());
    if (code == cudaSuccess) {
      kernel_ = kernel;
      return;
    }
    // Not in this cubin of a pack: clear the error the runtime recorded, so
    // that the next launch's check does not report it.
    if (i + 1 < library_->libraries.size()) (void)cudaGetLastError();
  }
  throw CudaError(code, fmt::format("cudaLibraryGetKernel(\"{}\")", entry), __FILE__, __LINE__);
}

LoadedKernel LoadedKernel::sibling(const std::string& entry) const {
  if (!library_) throw InternalError("LoadedKernel::sibling of a kernel that holds no image");
  return LoadedKernel(library_, entry);
}

LoadedKernel::~LoadedKernel() = default;

LoadedKernel::LoadedKernel(LoadedKernel&& other) noexcept
    : library_(std::move(other.library_)),
      kernel_(std::exchange(other.kernel_, nullptr)),
      entry_(std::move(other.entry_)) {}

LoadedKernel& LoadedKernel::operator=(LoadedKernel&& other) noexcept {
  if (this != &other) {
    library_ = std::move(other.library_);
    kernel_ = std::exchange(other.kernel_, nullptr);
    entry_ = std::move(other.entry_);
  }
  return *this;
}

KernelAttributes LoadedKernel::attributes() const {
  // A cudaKernel_t is accepted wherever the runtime takes a kernel as const void*.
  cudaFuncAttributes attributes{};
  MLATUNE_CUDA(cudaFuncGetAttributes(&attributes, static_cast<const void*>(kernel_)));
  KernelAttributes result;
  result.max_threads_per_block = attributes.maxThreadsPerBlock;
  result.registers = attributes.numRegs;
  result.static_shared_bytes = static_cast<std::int64_t>(attributes.sharedSizeBytes);
  result.local_bytes = static_cast<std::int64_t>(attributes.localSizeBytes);
  return result;
}

int LoadedKernel::set_max_dynamic_shared(std::int64_t bytes) const {
  return cudaFuncSetAttribute(static_cast<const void*>(kernel_),
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

int LoadedKernel::launch(const std::int64_t grid[3], const std::int64_t block[3],
                         std::int64_t shared_bytes, void** arguments, const Stream& stream) const {
  return launch(grid, block, shared_bytes, arguments, stream.get());
}

int LoadedKernel::launch(const std::int64_t grid[3], const std::int64_t block[3],
                         std::int64_t shared_bytes, void** arguments, void* stream) const {
  dim3 g(static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]),
         static_cast<unsigned>(grid[2]));
  dim3 b(static_cast<unsigned>(block[0]), static_cast<unsigned>(block[1]),
         static_cast<unsigned>(block[2]));
  return cudaLaunchKernel(static_cast<const void*>(kernel_), g, b, arguments,
                          static_cast<std::size_t>(shared_bytes),
                          static_cast<cudaStream_t>(stream));
}

}  // namespace mlatune
