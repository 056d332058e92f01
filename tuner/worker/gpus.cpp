#include "tuner/worker/gpus.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune {
namespace {

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

int parse_ordinal(std::string_view full, std::string_view part) {
  int value = -1;
  auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), value);
  if (part.empty() || error != std::errc() || end != part.data() + part.size() || value < 0)
    throw InputError(fmt::format("--gpus {}: '{}' is not a GPU ordinal (give `all` or a list such as 0,2)", full,
                                 part));
  return value;
}

std::string identity_text(const DeviceIdentity& d) {
  return fmt::format("{}, {}, {} SMs, {} MiB, driver {}", d.name, d.arch, d.sm_count, d.memory_bytes >> 20,
                     d.driver_version);
}

}  // namespace

GpuSelection parse_gpu_selection(std::string_view text) {
  GpuSelection selection;
  if (text == "all") {
    selection.all = true;
    return selection;
  }
  for (std::string_view part : split(text, ',')) selection.ordinals.push_back(parse_ordinal(text, part));
  std::sort(selection.ordinals.begin(), selection.ordinals.end());
  if (std::adjacent_find(selection.ordinals.begin(), selection.ordinals.end()) != selection.ordinals.end())
    throw InputError(fmt::format("--gpus {}: a GPU is listed twice", text));
  return selection;
}

std::vector<int> selected_gpus(const GpuSelection& selection, int device_count) {
  if (device_count <= 0) throw InputError("--gpus: the worker sees no GPU");
  if (selection.all) {
    std::vector<int> every(static_cast<std::size_t>(device_count));
    for (int i = 0; i < device_count; ++i) every[static_cast<std::size_t>(i)] = i;
    return every;
  }
  for (int ordinal : selection.ordinals)
    if (ordinal >= device_count)
      throw InputError(fmt::format("--gpus: there is no GPU {}; the worker sees {} (0..{})", ordinal,
                                   device_count, device_count - 1));
  return selection.ordinals;
}

std::string visible_device(int ordinal, const char* inherited) {
  if (!inherited || !*inherited) return std::to_string(ordinal);
  const std::vector<std::string_view> entries = split(inherited, ',');
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= entries.size())
    throw InputError(fmt::format("--gpus: GPU {} is not in CUDA_VISIBLE_DEVICES={}", ordinal, inherited));
  return std::string(entries[static_cast<std::size_t>(ordinal)]);
}

std::vector<PoolLane> gpu_lanes(const std::vector<int>& ordinals, const WorkerOptions& base,
                                const char* inherited) {
  std::vector<PoolLane> lanes;
  for (int ordinal : ordinals) {
    PoolLane lane{fmt::format("GPU {}", ordinal), base};
    lane.options.environment.push_back("CUDA_VISIBLE_DEVICES=" + visible_device(ordinal, inherited));
    lanes.push_back(std::move(lane));
  }
  return lanes;
}

DeviceInfo common_device(const std::vector<DeviceReport>& reports, const std::vector<std::string>& labels) {
  if (reports.empty()) throw InternalError("common_device: no lane");
  for (std::size_t i = 0; i < reports.size(); ++i)
    if (!reports[i].usable)
      throw EnvironmentError(fmt::format("{} cannot be used: {}", labels.at(i), reports[i].reason));
  const DeviceInfo first = reports.front().device.info();
  std::string listing;
  bool mixed = false;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const DeviceInfo info = reports[i].device.info();
    mixed = mixed || info.identity() != first.identity();
    listing += fmt::format("{}{}: {}", i ? "; " : "", labels.at(i), identity_text(info));
  }
  if (mixed)
    throw InputError(fmt::format("--gpus selects GPUs of different models ({}); their results must not mix, so "
                                 "tune each model on its own (e.g. --gpus with the GPUs of one model)",
                                 listing));
  return first;
}

}  // namespace mlatune
