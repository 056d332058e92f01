// `tune --gpus`: the selection as typed (tuner/worker/gpus.h), the GPUs it
// picks on a host, what each worker's CUDA_VISIBLE_DEVICES becomes (also
// under an inherited one), and when several GPUs count as one device.
#include "tuner/worker/gpus.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mlatune {
namespace {

TEST(GpuSelection, AllOrAListOfDistinctOrdinals) {
  EXPECT_TRUE(parse_gpu_selection("all").all);
  EXPECT_EQ(parse_gpu_selection("2,0").ordinals, (std::vector<int>{0, 2}));
  EXPECT_EQ(parse_gpu_selection("3").ordinals, (std::vector<int>{3}));
  for (const char* bad : {"", "x", "-1", "0,,1", "1,", "1,1", "0 ,1", "All"})
    EXPECT_THROW(parse_gpu_selection(bad), InputError) << bad;
}

TEST(GpuSelection, PicksGpusThatAreThere) {
  EXPECT_EQ(selected_gpus(parse_gpu_selection("all"), 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(selected_gpus(parse_gpu_selection("0,2"), 3), (std::vector<int>{0, 2}));
  EXPECT_THROW(selected_gpus(parse_gpu_selection("0,3"), 3), InputError);
  EXPECT_THROW(selected_gpus(parse_gpu_selection("all"), 0), InputError);
}

TEST(GpuSelection, WorkersSeeTheTunersGpuByItsOwnName) {
  EXPECT_EQ(visible_device(1, nullptr), "1");
  EXPECT_EQ(visible_device(1, ""), "1");
  EXPECT_EQ(visible_device(1, "4,6"), "6");
  EXPECT_EQ(visible_device(0, "GPU-8d1f,GPU-77aa"), "GPU-8d1f");
  EXPECT_THROW(visible_device(2, "4,6"), InputError);
  WorkerOptions base;
  base.environment = {"KEEP=1"};
  std::vector<PoolLane> lanes = gpu_lanes({0, 1}, base, "5,7");
  ASSERT_EQ(lanes.size(), 2u);
  EXPECT_EQ(lanes[1].label, "GPU 1");
  EXPECT_EQ(lanes[1].options.environment, (std::vector<std::string>{"KEEP=1", "CUDA_VISIBLE_DEVICES=7"}));
}

DeviceReport report(const char* name, std::int64_t memory = 150 << 20) {
  DeviceReport r;
  r.usable = true;
  r.device.name = name;
  r.device.cc_major = 9;
  r.device.multiprocessors = 132;
  r.device.total_memory = memory;
  r.device.driver_version = "13.0";
  return r;
}

TEST(GpuSelection, OneDeviceOnlyWhenEveryIdentityAgrees) {
  EXPECT_EQ(common_device({report("NVIDIA H200"), report("NVIDIA H200")}, {"GPU 0", "GPU 1"}).name, "NVIDIA H200");
  EXPECT_THROW(common_device({report("NVIDIA H200"), report("NVIDIA H100")}, {"GPU 0", "GPU 1"}), InputError);
  // Same name, other memory (another variant of the model): not one device.
  EXPECT_THROW(common_device({report("NVIDIA H200"), report("NVIDIA H200", 96 << 20)}, {"GPU 0", "GPU 1"}),
               InputError);
  DeviceReport broken;
  broken.reason = "no GPU";
  EXPECT_THROW(common_device({report("NVIDIA H200"), broken}, {"GPU 0", "GPU 1"}), EnvironmentError);
}

}  // namespace
}  // namespace mlatune
