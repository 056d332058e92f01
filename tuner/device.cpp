#include "tuner/device.h"

#include <dlfcn.h>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

namespace mlatune {
namespace {

std::string cuda_error(cudaError_t error, const char* call) {
  return fmt::format("{} failed: {} ({})", call, cudaGetErrorName(error), cudaGetErrorString(error));
}

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

std::optional<DeviceInfo> detect_device(std::string* why_not) {
  auto fail = [&](std::string reason) -> std::optional<DeviceInfo> {
    if (why_not) *why_not = std::move(reason);
    return std::nullopt;
  };

  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorInsufficientDriver) {
    if (!driver_library_present()) return fail("no CUDA driver found (libcuda.so.1 absent)");
    int runtime = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    return fail(fmt::format("the CUDA driver is older than this program's CUDA runtime {} ({})",
                            cuda_version_string(runtime),
                            cuda_error(error, "cudaGetDeviceCount")));
  }
  if (error == cudaErrorNoDevice || (error == cudaSuccess && count == 0))
    return fail("no GPU (the CUDA driver reports no device)");
  if (error != cudaSuccess) return fail(cuda_error(error, "cudaGetDeviceCount"));

  DeviceInfo info;
  cudaDeviceProp properties{};
  if (cudaError_t e = cudaGetDeviceProperties(&properties, 0); e != cudaSuccess)
    return fail(cuda_error(e, "cudaGetDeviceProperties"));
  info.name = properties.name;
  info.arch = fmt::format("sm_{}{}", properties.major, properties.minor);
  info.sm_count = properties.multiProcessorCount;
  info.memory_bytes = static_cast<std::int64_t>(properties.totalGlobalMem);
  info.l2_bytes = properties.l2CacheSize;
  info.max_shared_per_block_optin = static_cast<std::int64_t>(properties.sharedMemPerBlockOptin);
  int driver = 0;
  if (cudaError_t e = cudaDriverGetVersion(&driver); e != cudaSuccess)
    return fail(cuda_error(e, "cudaDriverGetVersion"));
  info.driver_version = cuda_version_string(driver);
  return info;
}

}  // namespace mlatune
