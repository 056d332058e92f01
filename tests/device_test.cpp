#include "core/device.h"

#include <dlfcn.h>

#include <gtest/gtest.h>

namespace mlatune {
namespace {

bool libcuda_present() {
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (handle) dlclose(handle);
  return handle != nullptr;
}

TEST(Device, DetectionAnswersWithADeviceOrAReason) {
  std::string why_not;
  std::optional<DeviceInfo> device = detect_device(&why_not);
  if (!libcuda_present()) {
    ASSERT_FALSE(device);
    EXPECT_EQ(why_not, "no CUDA driver found (libcuda.so.1 absent)");
    return;
  }
  if (!device) {
    EXPECT_FALSE(why_not.empty());
    return;
  }
  EXPECT_EQ(device->arch.rfind("sm_", 0), 0u);
  EXPECT_GT(device->sm_count, 0);
  EXPECT_GT(device->memory_bytes, 0);
  EXPECT_FALSE(device->name.empty());
  EXPECT_FALSE(device->driver_version.empty());
}

TEST(Device, AskingTwiceGivesTheSameAnswer) {
  std::string first, second;
  auto a = detect_device(&first);
  auto b = detect_device(&second);
  EXPECT_EQ(a.has_value(), b.has_value());
  EXPECT_EQ(first, second);
  EXPECT_FALSE(detect_device(nullptr).has_value() != a.has_value());
}

}  // namespace
}  // namespace mlatune
