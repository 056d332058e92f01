// The worker program's side of tuner/worker.h: owns the CUDA context, the
// workload and the evaluator, and answers one request at a time.
#include <cstdlib>
#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/cuda.h"
#include "core/error.h"
#include "tuner/evaluator.h"
#include "core/space.h"
#include "tuner/worker.h"
#include "tuner/workload.h"

namespace mlatune {

using json = nlohmann::json;

namespace {

/// Exit status of a worker whose CUDA context broke (sticky error).
constexpr int context_lost_status = 3;

json error_reply(std::string_view kind, std::string_view message) {
  return {{"type", "error"}, {"kind", kind}, {"message", message}};
}

struct Session {
  std::optional<SearchSpace> space;
  std::unique_ptr<Workload> workload;
  std::unique_ptr<Evaluator> evaluator;
  bool test_faults = false;
};

json handle_set_workload(Session& session, const json& request) {
  session.evaluator.reset();
  session.workload.reset();
  session.space.reset();
  TimingOptions timing;
  auto cache = parse_cache_mode(request.at("cache").get<std::string>());
  if (!cache) throw InternalError("unknown cache mode " + request.at("cache").get<std::string>());
  timing.cache = *cache;
  timing.budget_ms = request.at("budget_ms").get<double>();
  timing.max_repetitions = request.at("max_repetitions").get<int>();
  timing.min_repetitions = request.at("min_repetitions").get<int>();
  timing.stability = request.at("stability").get<double>();
  timing.cut_min_samples = request.at("cut_min_samples").get<int>();

  session.space.emplace(SearchSpace::load(request.at("space").get<std::string>()));
  Shape shape = session.space->parse_shape(request.at("shape").get<std::string>());
  WorkloadOptions options;
  options.seed = request.at("seed").get<std::uint64_t>();
  options.cache = timing.cache;
  session.workload = std::make_unique<Workload>(*session.space, shape, options);
  session.evaluator = std::make_unique<Evaluator>(*session.workload, timing);
  return {{"type", "workload"},
          {"device", encode(session.workload->device())},
          {"seed", session.workload->seed()},
          {"reference_us", session.workload->reference_us()},
          {"floor", encode(session.evaluator->floor())},
          {"input_sets", session.workload->input_sets()},
          {"device_bytes", session.workload->device_bytes()}};
}

}  // namespace

int run_worker_server(int in_fd, int out_fd) {
  Session session;
  const char* faults = std::getenv("MLATUNE_WORKER_TEST_FAULTS");
  session.test_faults = faults && std::string_view(faults) == "1";
  MessageReader reader(in_fd);
  auto progress = [out_fd] { write_message(out_fd, json{{"type", "progress"}}); };

  while (true) {
    json request;
    if (reader.read(request) == MessageReader::Status::closed) return 0;
    std::string type = request.value("type", "");
    json reply;
    bool exit_after_reply = false;
    try {
      if (type == "quit") {
        write_message(out_fd, json{{"type", "bye"}});
        return 0;
      } else if (type == "probe") {
        GpuProbe probe = probe_gpu();
        reply = {{"type", "probe"}, {"usable", probe.usable}, {"reason", probe.reason}};
        if (probe.usable) reply["device"] = encode(probe.device);
      } else if (type == "set_workload") {
        reply = handle_set_workload(session, request);
      } else if (type == "evaluate") {
        if (!session.evaluator) throw InternalError("evaluate before set_workload");
        Cutoff cutoff;
        if (request.contains("cutoff")) cutoff = decode_cutoff(request.at("cutoff"));
        EvaluationResult result =
            session.evaluator->evaluate(decode_candidate(request.at("candidate")), cutoff, progress);
        exit_after_reply = result.context_lost;
        reply = {{"type", "result"}, {"result", encode(result)}};
      } else if (type == "retime") {
        if (!session.evaluator) throw InternalError("retime before set_workload");
        std::vector<Candidate> candidates;
        for (const json& c : request.at("candidates")) candidates.push_back(decode_candidate(c));
        auto timings = session.evaluator->retime(candidates, request.at("rounds").get<int>(), progress);
        json list = json::array();
        for (const auto& t : timings) list.push_back(t ? encode(*t) : json(nullptr));
        reply = {{"type", "timings"}, {"timings", list}};
      } else if (type == "test_fault" && session.test_faults) {
        std::string action = request.at("action").get<std::string>();
        if (action == "abort") std::abort();
        if (action == "exit") std::_Exit(context_lost_status);
        if (action == "hang") {
          while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
        }
        EvaluationResult result = decode_result(request.at("result"));
        if (action == "lost") {
          result.outcome = Outcome::crashed;
          result.reason = "simulated sticky CUDA error";
          result.context_lost = true;
          exit_after_reply = true;
        } else if (action != "echo") {
          throw InternalError("unknown test fault " + action);
        }
        reply = {{"type", "result"}, {"result", encode(result)}};
      } else {
        throw InternalError(fmt::format("unknown request '{}'", type));
      }
    } catch (const CudaError& error) {
      // The context may be gone; a fresh process is the only safe way on.
      reply = error_reply("environment", error.what());
      exit_after_reply = error.sticky();
    } catch (const InputError& error) {
      reply = error_reply("input", error.what());
    } catch (const InternalError& error) {
      reply = error_reply("internal", error.what());
    } catch (const Error& error) {
      reply = error_reply("environment", error.what());
    } catch (const json::exception& error) {
      reply = error_reply("environment", fmt::format("malformed request: {}", error.what()));
    }
    // The tuner must not send the next candidate to a worker that is leaving.
    if (exit_after_reply && reply.value("type", "") == "error") reply["exiting"] = true;
    write_message(out_fd, reply);
    if (exit_after_reply) return context_lost_status;
  }
}

}  // namespace mlatune
