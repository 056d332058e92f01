// fake_gpu_worker: stands in for mlatune-worker (WorkerOptions::executable)
// on a machine without a GPU, so that the scheduling of candidates over
// several workers (tuner/worker/pool.h, tuner/measurement_source.cpp) is
// tested everywhere.  It speaks the real protocol (tuner/worker/codec.h) and
// pretends to be the GPU that CUDA_VISIBLE_DEVICES names:
//   MLATUNE_FAKE_GPU_COUNT   devices a probe reports (default 2)
//   MLATUNE_FAKE_GPU_NAMES   "A,B,...": the model of GPU 0, 1, ... (default
//                            "Fake GPU" for all)
//   MLATUNE_FAKE_DELAY_MS    an evaluation takes 1 to 3 times this, by label,
//                            so that results come in out of order
//   MLATUNE_FAKE_SLOW_GPU    this GPU (as CUDA_VISIBLE_DEVICES names it)
//                            takes 5 times as long
//   MLATUNE_FAKE_CRASH       an evaluation whose label contains this text
//                            aborts the worker (a crash), ...
//   MLATUNE_FAKE_HANG        ... or never answers (a hang)
//   MLATUNE_FAKE_LOG         a file that gets "<gpu> workload <shape>" per
//                            workload set up and "<gpu> grid <x> <label>"
//                            per evaluation (the candidate's grid.x), so
//                            that a test can tell which workload each
//                            candidate ran against
// A candidate's time is a function of its label alone, so every fake GPU
// measures the same time for it.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "tuner/worker/codec.h"
#include "tuner/worker/framing.h"
#include "tuner/worker/lifeline.h"
#include "tuner/worker/messages.h"

namespace mlatune {
namespace {

std::string env(const char* name, const char* fallback = "") {
  const char* value = std::getenv(name);
  return value ? value : fallback;
}

std::uint64_t label_hash(const std::string& label) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : label) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

/// The time every fake GPU measures for a candidate: 1.0 to 100.9 us.
double fake_time_us(const std::string& label) { return 1.0 + static_cast<double>(label_hash(label) % 1000) / 10.0; }

std::string this_gpu() { return env("CUDA_VISIBLE_DEVICES", "0"); }

DeviceProperties fake_device() {
  std::vector<std::string> names;
  std::string list = env("MLATUNE_FAKE_GPU_NAMES");
  for (std::size_t start = 0; !list.empty() && start <= list.size();) {
    std::size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    names.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  const std::size_t index = static_cast<std::size_t>(std::atoi(this_gpu().c_str()));
  DeviceProperties d;
  d.name = index < names.size() ? names[index] : "Fake GPU";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.multiprocessors = 132;
  d.total_memory = std::int64_t{80} << 30;
  d.l2_bytes = std::int64_t{50} << 20;
  d.shared_per_block_optin = 227 * 1024;
  d.shared_per_block = 48 * 1024;
  d.max_threads_per_block = 1024;
  d.driver_version = "13.0";
  return d;
}

TimingStats fake_timing(const std::string& label) {
  const double t = fake_time_us(label);
  return summarize_times({t, t, t}, CacheMode::cold, "fake");
}

void log_line(const std::string& line) {
  const std::string path = env("MLATUNE_FAKE_LOG");
  if (path.empty()) return;
  if (FILE* f = std::fopen(path.c_str(), "a")) {
    std::fprintf(f, "%s %s\n", this_gpu().c_str(), line.c_str());
    std::fclose(f);
  }
}

bool label_has(const std::string& label, const char* variable) {
  const std::string text = env(variable);
  return !text.empty() && label.find(text) != std::string::npos;
}

Reply evaluate(const EvaluateRequest& request) {
  const std::string& label = request.candidate.label;
  log_line("grid " + std::to_string(request.candidate.geometry.grid[0]) + " " + label);
  if (label_has(label, "MLATUNE_FAKE_CRASH")) std::abort();
  while (label_has(label, "MLATUNE_FAKE_HANG")) std::this_thread::sleep_for(std::chrono::seconds(1));
  const int delay_ms = std::atoi(env("MLATUNE_FAKE_DELAY_MS", "0").c_str());
  const int slow = this_gpu() == env("MLATUNE_FAKE_SLOW_GPU", "none") ? 5 : 1;
  const auto steps = static_cast<int>(1 + label_hash(label) % 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms * steps * slow));
  EvaluationResult result;
  result.timing = fake_timing(label);
  return ResultReply{result};
}

Reply answer(const Request& request) {
  if (std::holds_alternative<ProbeRequest>(request))
    return DeviceReport{true, "", fake_device(), std::atoi(env("MLATUNE_FAKE_GPU_COUNT", "2").c_str())};
  if (const auto* set = std::get_if<SetWorkloadRequest>(&request)) {
    log_line("workload " + set->shape);
    WorkloadInfo info;
    info.device = fake_device();
    info.seed = set->seed;
    info.reference_us = 1.0;
    info.floor = summarize_times({0.5, 0.5, 0.5}, CacheMode::cold, "fake");
    info.input_sets = 2;
    return info;
  }
  if (const auto* e = std::get_if<EvaluateRequest>(&request)) return evaluate(*e);
  if (const auto* r = std::get_if<RetimeRequest>(&request)) {
    TimingsReply timings;
    for (const Candidate& c : r->candidates) timings.timings.push_back(fake_timing(c.label));
    return timings;
  }
  if (std::holds_alternative<QuitRequest>(request)) return ByeReply{};
  return ErrorReply{ErrorReply::Kind::internal, "the fake worker does not serve this request", false};
}

}  // namespace
}  // namespace mlatune

int main(int argc, char** argv) {
  // Like the real worker: never outlive the test that started it.
  if (auto parent = mlatune::parent_pid_argument(argc, argv)) mlatune::die_with_parent(*parent);
  mlatune::MessageReader requests(3);
  std::vector<std::uint8_t> bytes;
  while (requests.read(bytes) == mlatune::MessageReader::Status::message) {
    const mlatune::Reply reply = mlatune::answer(mlatune::decode_request(bytes));
    mlatune::write_message(4, mlatune::encode_reply(reply));
    if (std::holds_alternative<mlatune::ByeReply>(reply)) return 0;
  }
  return 0;
}
