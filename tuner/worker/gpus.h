// Which GPUs of the host a sweep runs on (`mlatune tune --gpus`), and the
// worker lanes (tuner/worker/pool.h) that give each one a worker process of
// its own.  A worker is given its GPU through CUDA_VISIBLE_DEVICES, set in
// its environment only, so that the worker's code keeps using device 0 and
// the tuner process never initializes CUDA (it asks a worker how many GPUs
// there are).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "tuner/worker/pool.h"

namespace mlatune {

/// `--gpus all` or `--gpus 0,2`: ordinals as the tuner's own environment
/// numbers its GPUs (positions in its CUDA_VISIBLE_DEVICES, when set).
struct GpuSelection {
  bool all = false;
  std::vector<int> ordinals;  // ascending, each once; empty with `all`
};

/// "all", or a comma-separated list of distinct non-negative ordinals;
/// anything else is an InputError naming `--gpus`.
GpuSelection parse_gpu_selection(std::string_view text);

/// The ordinals selected on a host whose worker sees `device_count` GPUs;
/// InputError when one is not there (or there is none).
std::vector<int> selected_gpus(const GpuSelection& selection, int device_count);

/// CUDA_VISIBLE_DEVICES for the worker of the tuner's GPU `ordinal`: the
/// ordinal-th entry of `inherited` (the tuner's own CUDA_VISIBLE_DEVICES; an
/// index, a UUID or a MIG name, passed on as written), else the ordinal.
/// InputError when `inherited` has no such entry.
std::string visible_device(int ordinal, const char* inherited);

/// One lane per ordinal, labelled "GPU <ordinal>", with `base`'s options and
/// the environment that gives it that GPU.
std::vector<PoolLane> gpu_lanes(const std::vector<int>& ordinals, const WorkerOptions& base,
                                const char* inherited);

/// The GPU that every lane reported (results of several GPUs are stored as
/// one device only when they are the same model: equal DeviceIdentity).
/// EnvironmentError when a lane cannot use its GPU; InputError, listing
/// them, when the lanes have GPUs of different models.
DeviceInfo common_device(const std::vector<DeviceReport>& reports, const std::vector<std::string>& labels);

}  // namespace mlatune
