// The CUDA runtime layer without a GPU: error texts, stickiness, and the
// probe's answer (on a GPU machine the probe finds the device instead).
#include "core/cuda.h"

#include <gtest/gtest.h>

namespace mlatune {
namespace {

TEST(CudaError, CarriesCallLocationNameAndDescription) {
  CudaError error(700, "cudaStreamSynchronize(stream)", "tuner/x.cpp", 42);
  std::string text = error.what();
  EXPECT_NE(text.find("tuner/x.cpp:42"), std::string::npos) << text;
  EXPECT_NE(text.find("cudaStreamSynchronize(stream)"), std::string::npos) << text;
  EXPECT_NE(text.find("cudaErrorIllegalAddress"), std::string::npos) << text;
  EXPECT_EQ(error.name(), "cudaErrorIllegalAddress");
  EXPECT_NE(error.description().find("illegal memory access"), std::string::npos);
  EXPECT_EQ(error.code(), 700);
  EXPECT_TRUE(error.sticky());
}

TEST(CudaError, IsAnEnvironmentError) {
  EXPECT_THROW(MLATUNE_CUDA(1), EnvironmentError);
  EXPECT_NO_THROW(MLATUNE_CUDA(0));
  EXPECT_TRUE(MLATUNE_CUDA_NOTHROW(0));
  EXPECT_FALSE(MLATUNE_CUDA_NOTHROW(2));
}

TEST(CudaError, StickyOnlyForContextBreakingErrors) {
  EXPECT_TRUE(cuda_error_is_sticky(719));   // launch failure (trap)
  EXPECT_TRUE(cuda_error_is_sticky(716));   // misaligned address
  EXPECT_FALSE(cuda_error_is_sticky(1));    // invalid value
  EXPECT_FALSE(cuda_error_is_sticky(701));  // too many resources requested for launch
  EXPECT_FALSE(cuda_error_is_sticky(35));   // insufficient driver
  EXPECT_EQ(cuda_error_name(701), "cudaErrorLaunchOutOfResources");
}

TEST(GpuProbe, SaysWhyNotOrWhich) {
  GpuProbe probe = probe_gpu();
  if (probe.usable) {
    EXPECT_FALSE(probe.device.name.empty());
    EXPECT_EQ(probe.device.arch().rfind("sm_", 0), 0u);
    EXPECT_GT(probe.device.l2_bytes, 0);
    EXPECT_TRUE(probe.reason.empty());
  } else {
    EXPECT_FALSE(probe.reason.empty());
    // Without a GPU, allocating must fail with a typed error, never crash.
    EXPECT_THROW(DeviceBuffer(1024), CudaError);
  }
}

TEST(DeviceBuffer, EmptyNeedsNoGpuAndMoves) {
  DeviceBuffer empty(0);
  EXPECT_EQ(empty.get(), nullptr);
  DeviceBuffer moved(std::move(empty));
  EXPECT_EQ(moved.bytes(), 0u);
}

}  // namespace
}  // namespace mlatune
