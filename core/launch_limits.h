// The device limits a planned launch must respect, checked before the GPU is
// asked: grid and block extents, threads per block (the device's, and the
// kernel's given its registers), shared memory per block (static plus
// dynamic), for the main kernel and for the prologue.  One check for the
// evaluator and the dispatcher; GPU-free (the device and the kernels'
// attributes are plain values), so it is tested with a fake device.
#pragma once
#include <string>
#include <string_view>

#include "core/cuda.h"
#include "core/launch_plan.h"

namespace mlatune {

/// Why `geometry` cannot launch a kernel with `attributes` on `device`;
/// empty when it can.  `what` prefixes the message ("" or "prologue: ").
std::string limit_refusal(const LaunchGeometry& geometry, const KernelAttributes& attributes,
                          const DeviceProperties& device, std::string_view what = "");

/// The same for every kernel of `steps`: the main kernel, then the prologue
/// where one runs (`prologue` holds its attributes; it must be set then).
std::string limit_refusal(const LaunchSteps& steps, const KernelAttributes& main,
                          const KernelAttributes* prologue, const DeviceProperties& device);

}  // namespace mlatune
