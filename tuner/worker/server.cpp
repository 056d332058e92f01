#include "tuner/worker/server.h"

#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "core/compiler.h"
#include "core/cuda.h"
#include "core/space.h"
#include "tuner/evaluator.h"
#include "tuner/worker/codec.h"
#include "tuner/worker/framing.h"
#include "tuner/workload.h"

namespace mlatune {
namespace {

/// Exit status of a worker whose CUDA context broke (sticky error).
constexpr int context_lost_status = 3;

struct Session {
  int out_fd = -1;
  std::optional<SearchSpace> space;
  std::unique_ptr<Workload> workload;
  std::unique_ptr<Evaluator> evaluator;
  bool test_faults = false;
  std::optional<Compiler> compiler;  // made on the first compile request
};

/// A reply, and whether the worker leaves after sending it.
struct Answer {
  Reply reply;
  bool exit_after = false;
};

void send(int fd, const Reply& reply) { write_message(fd, encode_reply(reply)); }

Answer handle(Session&, const ProbeRequest&) {
  GpuProbe probe = probe_gpu();
  DeviceReport report{probe.usable, probe.reason, {}, probe.device_count};
  if (probe.usable) report.device = probe.device;
  return {report};
}

Answer handle(Session& session, const SetWorkloadRequest& request) {
  session.evaluator.reset();
  session.workload.reset();
  session.space.reset();
  session.space.emplace(SearchSpace::load(request.space_file));
  Shape shape = session.space->parse_shape(request.shape);
  WorkloadOptions options;
  options.seed = request.seed;
  options.cache = request.timing.cache;
  session.workload = std::make_unique<Workload>(*session.space, shape, options);
  session.evaluator = std::make_unique<Evaluator>(*session.workload, request.timing);
  WorkloadInfo info;
  info.device = session.workload->device();
  info.seed = session.workload->seed();
  info.reference_us = session.workload->reference_us();
  info.floor = session.evaluator->floor();
  info.input_sets = session.workload->input_sets();
  info.device_bytes = session.workload->device_bytes();
  return {info};
}

/// Heartbeats to the tuner while a step runs: each restarts its timeout.
std::function<void()> heartbeat(const Session& session) {
  return [fd = session.out_fd] { send(fd, ProgressReply{}); };
}

Answer handle(Session& session, const EvaluateRequest& request) {
  if (!session.evaluator) throw InternalError("evaluate before set_workload");
  EvaluationResult result =
      session.evaluator->evaluate(request.candidate, request.cutoff.value_or(Cutoff{}), heartbeat(session));
  const bool lost = result.context_lost;
  return {ResultReply{std::move(result)}, lost};
}

Answer handle(Session& session, const RetimeRequest& request) {
  if (!session.evaluator) throw InternalError("retime before set_workload");
  return {TimingsReply{session.evaluator->retime(request.candidates, request.rounds, heartbeat(session))}};
}

Answer handle(Session& session, const TestFaultRequest& request) {
  // Refused like any unknown request unless the tuner's tests allowed it.
  if (!session.test_faults) throw InputError("unknown request 'test_fault'");
  if (request.action == "abort") std::abort();
  if (request.action == "exit") std::_Exit(context_lost_status);
  if (request.action == "hang") {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  EvaluationResult result = request.result;
  bool exit_after = false;
  if (request.action == "lost") {
    result.outcome = Outcome::crashed;
    result.reason = "simulated sticky CUDA error";
    result.context_lost = true;
    exit_after = true;
  } else if (request.action != "echo") {
    throw InternalError("unknown test fault " + request.action);
  }
  return {ResultReply{std::move(result)}, exit_after};
}

Answer handle(Session&, const QuitRequest&) { return {ByeReply{}}; }

// NVRTC only: no CUDA context is made, so a compile-only worker needs no GPU.
Answer handle(Session& session, const CompileJobRequest& request) {
  if (!session.compiler) session.compiler.emplace();
  return {CompiledReply{session.compiler->compile(request.request)}};
}

ErrorReply error_reply(ErrorReply::Kind kind, std::string message) {
  return ErrorReply{kind, std::move(message), false};
}

/// Serves one request; errors become error replies.
Answer serve(Session& session, const std::vector<std::uint8_t>& bytes) {
  try {
    Request request = decode_request(bytes);
    return std::visit([&](const auto& r) { return handle(session, r); }, request);
  } catch (const CudaError& error) {
    // The context may be gone; a fresh process is the only safe way on.
    return {error_reply(ErrorReply::Kind::environment, error.what()), error.sticky()};
  } catch (const MalformedMessage& error) {
    return {error_reply(ErrorReply::Kind::environment, error.what())};
  } catch (const InputError& error) {
    return {error_reply(ErrorReply::Kind::input, error.what())};
  } catch (const Error& error) {
    return {error_reply(ErrorReply::Kind::environment, error.what())};
  } catch (const InternalError& error) {
    return {error_reply(ErrorReply::Kind::internal, error.what())};
  }
}

}  // namespace

int run_worker_server(int in_fd, int out_fd) {
  Session session;
  session.out_fd = out_fd;
  const char* faults = std::getenv("MLATUNE_WORKER_TEST_FAULTS");
  session.test_faults = faults && std::string_view(faults) == "1";
  MessageReader reader(in_fd);
  while (true) {
    std::vector<std::uint8_t> bytes;
    if (reader.read(bytes) == MessageReader::Status::closed) return 0;
    Answer answer = serve(session, bytes);
    // The tuner must not send the next candidate to a worker that is leaving.
    if (auto* error = std::get_if<ErrorReply>(&answer.reply); error && answer.exit_after) error->exiting = true;
    send(out_fd, answer.reply);
    if (std::holds_alternative<ByeReply>(answer.reply)) return 0;
    if (answer.exit_after) return context_lost_status;
  }
}

}  // namespace mlatune
