// The worker isolation without a GPU: the framing, and a real mlatune-worker
// told (through its test-only request) to crash, hang or exit, so that crash
// and timeout handling and worker replacement are tested everywhere.
#include "tests/gpu_worker.h"
#include "tuner/worker/client.h"
#include "tuner/worker/codec.h"
#include "tuner/worker/framing.h"
#include "tuner/worker/wire_json.h"

#include <chrono>
#include <csignal>

#include <gtest/gtest.h>
#include <unistd.h>

namespace mlatune {
namespace {

using json = nlohmann::json;
using namespace wire;  // the JSON values of the wire format, white-box
using steady = std::chrono::steady_clock;

WorkerOptions test_options() {
  WorkerOptions options = worker_options();
  options.allow_test_faults = true;
  options.timeout_floor_s = 1.0;
  return options;
}

EvaluationResult sample_result() {
  EvaluationResult r;
  r.outcome = Outcome::wrong_result;
  r.reason = "input set 2: relative L2 error 3e-4 exceeds the tolerance 1e-5";
  r.registers = 40;
  r.local_bytes = 16;
  ValidationStats v;
  v.relative_l2 = 3.25e-4;
  v.max_abs = 1.5e-3;
  v.nonfinite = 2;
  v.elements = 16384;
  v.input_sets = 2;
  v.passed = false;
  r.validation = v;
  r.timing = summarize_times({5.0, 6.0, 7.0}, CacheMode::rotate, "events");
  r.timing->stable = true;
  return r;
}

/// A pipe whose ends close on destruction.
struct Pipe {
  int read_end = -1, write_end = -1;
  Pipe() {
    int ends[2];
    EXPECT_EQ(::pipe(ends), 0);
    read_end = ends[0];
    write_end = ends[1];
  }
  ~Pipe() {
    if (read_end >= 0) ::close(read_end);
    if (write_end >= 0) ::close(write_end);
  }
};

TEST(WorkerFraming, MessagesRoundTripIncludingBinary) {
  Pipe pipe;
  Candidate candidate;
  candidate.label = "MODE=correct";
  candidate.cubin = std::string("\x7f" "ELF\0\1\2\xff", 8);
  candidate.entry = "faults";
  candidate.geometry.grid[0] = 64;
  candidate.geometry.block[0] = 256;
  candidate.geometry.shared_bytes = 4096;
  write_message(pipe.write_end, json::to_cbor(encode(candidate)));
  write_message(pipe.write_end, json::to_cbor(json{{"type", "progress"}}));

  MessageReader reader(pipe.read_end);
  std::vector<std::uint8_t> message;
  ASSERT_EQ(reader.read(message, steady::now() + std::chrono::seconds(5)), MessageReader::Status::message);
  Candidate back = decode_candidate(json::from_cbor(message));
  EXPECT_EQ(back.cubin, candidate.cubin);
  EXPECT_EQ(back.entry, "faults");
  EXPECT_EQ(back.geometry.grid[0], 64);
  EXPECT_EQ(back.geometry.block[0], 256);
  EXPECT_EQ(back.geometry.shared_bytes, 4096);
  ASSERT_EQ(reader.read(message, steady::now() + std::chrono::seconds(5)), MessageReader::Status::message);
  EXPECT_EQ(json::from_cbor(message).at("type"), "progress");
}

TEST(WorkerFraming, PrologueAndWorkspaceSizesRoundTrip) {
  Candidate candidate;
  candidate.label = "EXPAND=true";
  candidate.cubin = std::string("\x7f" "ELF", 4);
  candidate.entry = "plus_one";
  candidate.geometry.grid[0] = 4;
  candidate.prologue = PrologueLaunch{"double_into", {}};
  candidate.prologue->geometry.grid[0] = 8;
  candidate.prologue->geometry.block[0] = 128;
  candidate.prologue->geometry.shared_bytes = 512;
  candidate.workspace_bytes = {4000, 0, std::int64_t{1} << 40};
  Candidate back = decode_candidate(json::from_cbor(json::to_cbor(encode(candidate))));
  ASSERT_TRUE(back.prologue.has_value());
  EXPECT_EQ(back.prologue->entry, "double_into");
  EXPECT_EQ(back.prologue->geometry.grid[0], 8);
  EXPECT_EQ(back.prologue->geometry.block[0], 128);
  EXPECT_EQ(back.prologue->geometry.shared_bytes, 512);
  EXPECT_EQ(back.workspace_bytes, candidate.workspace_bytes);
  EXPECT_EQ(back.geometry.grid[0], 4);

  // A candidate without a prologue travels as before, and comes back without one.
  Candidate plain = candidate;
  plain.prologue.reset();
  plain.workspace_bytes.clear();
  json message = encode(plain);
  EXPECT_FALSE(message.contains("prologue"));
  EXPECT_FALSE(message.contains("workspace_bytes"));
  Candidate plain_back = decode_candidate(json::from_cbor(json::to_cbor(message)));
  EXPECT_FALSE(plain_back.prologue.has_value());
  EXPECT_TRUE(plain_back.workspace_bytes.empty());
}

TEST(WorkerFraming, CutTimingAndCutoffRoundTrip) {
  TimingStats cut = summarize_times({4100, 4000, 4200, 4150, 4050}, CacheMode::cold,
                                    "events; cut after 5 launches: median 4.10x the best so far (cutoff 3x)");
  cut.cut = true;
  TimingStats back = decode_timing(json::from_cbor(json::to_cbor(encode(cut))));
  EXPECT_TRUE(back.cut);
  EXPECT_FALSE(back.stable);
  EXPECT_EQ(back.count, 5);
  EXPECT_DOUBLE_EQ(back.median_us, 4100.0);
  EXPECT_EQ(back.method, cut.method);
  EXPECT_FALSE(decode_timing(encode(summarize_times({1.0}, CacheMode::hot, ""))).cut);

  Cutoff cutoff = decode_cutoff(json::from_cbor(json::to_cbor(encode(Cutoff{1000.5, 3.0}))));
  EXPECT_DOUBLE_EQ(cutoff.best_us, 1000.5);
  EXPECT_DOUBLE_EQ(cutoff.factor, 3.0);
  // A missing key: the JSON layer throws, and decode_request/decode_reply
  // turn that into a MalformedMessage (worker_codec_test checks that).
  EXPECT_THROW(decode_cutoff(json{{"best_us", 1.0}}), json::exception);
}

TEST(WorkerFraming, TimeoutWhenNothingArrives) {
  Pipe pipe;
  MessageReader reader(pipe.read_end);
  std::vector<std::uint8_t> message;
  auto start = steady::now();
  EXPECT_EQ(reader.read(message, start + std::chrono::milliseconds(50)), MessageReader::Status::timeout);
  EXPECT_GE(steady::now() - start, std::chrono::milliseconds(50));
}

TEST(WorkerFraming, ClosedPipeAndTruncatedFrame) {
  {
    Pipe pipe;
    ::close(pipe.write_end);
    pipe.write_end = -1;
    MessageReader reader(pipe.read_end);
    std::vector<std::uint8_t> message;
    EXPECT_EQ(reader.read(message), MessageReader::Status::closed);
  }
  {
    Pipe pipe;
    const char partial[] = {10, 0, 0, 0, 1, 2};  // promises 10 bytes, sends 2
    ASSERT_EQ(::write(pipe.write_end, partial, sizeof partial), 6);
    ::close(pipe.write_end);
    pipe.write_end = -1;
    MessageReader reader(pipe.read_end);
    std::vector<std::uint8_t> message;
    EXPECT_THROW(reader.read(message), EnvironmentError);
  }
}

TEST(WorkerFraming, OversizedLengthIsRejected) {
  Pipe pipe;
  const unsigned char huge[] = {0xff, 0xff, 0xff, 0x7f};
  ASSERT_EQ(::write(pipe.write_end, huge, sizeof huge), 4);
  MessageReader reader(pipe.read_end);
  std::vector<std::uint8_t> message;
  EXPECT_THROW(reader.read(message, steady::now() + std::chrono::seconds(1)), EnvironmentError);
}

TEST(WorkerFraming, WritingToADeadPeerIsAnErrorNotSigpipe) {
  Pipe pipe;
  ::close(pipe.read_end);
  pipe.read_end = -1;
  EXPECT_THROW(write_message(pipe.write_end, encode_request(QuitRequest{})), EnvironmentError);
}

TEST(Worker, ResultsRoundTripThroughTheWorker) {
  Worker worker(test_options());
  EvaluationResult sent = sample_result();
  EvaluationResult back = worker.test_fault("echo", sent);
  EXPECT_EQ(back.outcome, Outcome::wrong_result);
  EXPECT_EQ(back.reason, sent.reason);
  EXPECT_EQ(back.registers, 40);
  EXPECT_EQ(back.local_bytes, 16);
  ASSERT_TRUE(back.validation);
  EXPECT_DOUBLE_EQ(back.validation->relative_l2, 3.25e-4);
  EXPECT_DOUBLE_EQ(back.validation->max_abs, 1.5e-3);
  EXPECT_EQ(back.validation->nonfinite, 2u);
  EXPECT_EQ(back.validation->elements, 16384u);
  EXPECT_FALSE(back.validation->passed);
  ASSERT_TRUE(back.timing);
  EXPECT_DOUBLE_EQ(back.timing->median_us, 6.0);
  EXPECT_EQ(back.timing->count, 3);
  EXPECT_EQ(back.timing->cache, CacheMode::rotate);
  EXPECT_TRUE(back.timing->stable);
  EXPECT_FALSE(back.timing->cut);
  EXPECT_EQ(worker.replacements(), 0);

  // A cut measurement is an ok result like any other, flagged as cut.
  sent.outcome = Outcome::ok;
  sent.reason.clear();
  sent.timing->stable = false;
  sent.timing->cut = true;
  back = worker.test_fault("echo", sent);
  EXPECT_EQ(back.outcome, Outcome::ok);
  ASSERT_TRUE(back.timing);
  EXPECT_TRUE(back.timing->cut);
  EXPECT_FALSE(back.timing->stable);
}

TEST(Worker, ProbeSaysWhyNotOrWhich) {
  Worker worker(test_options());
  DeviceReport report = worker.probe_device();
  if (report.usable) {
    EXPECT_FALSE(report.device.name.empty());
    EXPECT_GT(report.device.multiprocessors, 0);
  } else {
    EXPECT_FALSE(report.reason.empty());
  }
}

TEST(Worker, CrashBySignalIsRecordedAndTheWorkerReplaced) {
  Worker worker(test_options());
  EvaluationResult crashed = worker.test_fault("abort");
  EXPECT_EQ(crashed.outcome, Outcome::crashed);
  EXPECT_NE(crashed.reason.find("signal " + std::to_string(SIGABRT)), std::string::npos)
      << crashed.reason;
  EvaluationResult after = worker.test_fault("echo", sample_result());
  EXPECT_EQ(after.outcome, Outcome::wrong_result);
  EXPECT_EQ(worker.replacements(), 1);
}

TEST(Worker, HangIsATimeoutAndTheWorkerReplaced) {
  WorkerOptions options = test_options();
  options.timeout_floor_s = 0.3;
  Worker worker(options);
  EXPECT_NEAR(worker.step_timeout_s(), 0.3, 1e-9);
  auto start = steady::now();
  EvaluationResult hung = worker.test_fault("hang");
  double waited = std::chrono::duration<double>(steady::now() - start).count();
  EXPECT_EQ(hung.outcome, Outcome::timeout);
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 10.0);
  EXPECT_EQ(worker.test_fault("echo", sample_result()).outcome, Outcome::wrong_result);
  EXPECT_EQ(worker.replacements(), 1);
}

TEST(Worker, ExitWithoutReplyIsACrash) {
  Worker worker(test_options());
  EvaluationResult exited = worker.test_fault("exit");
  EXPECT_EQ(exited.outcome, Outcome::crashed);
  EXPECT_NE(exited.reason.find("status 3"), std::string::npos) << exited.reason;
  EXPECT_EQ(worker.test_fault("echo", sample_result()).outcome, Outcome::wrong_result);
  EXPECT_EQ(worker.replacements(), 1);
}

TEST(Worker, LostContextReplacesTheWorkerAfterItsReply) {
  Worker worker(test_options());
  EvaluationResult lost = worker.test_fault("lost", sample_result());
  EXPECT_EQ(lost.outcome, Outcome::crashed);
  EXPECT_TRUE(lost.context_lost);
  EXPECT_EQ(lost.reason, "simulated sticky CUDA error");
  EXPECT_EQ(worker.test_fault("echo", sample_result()).outcome, Outcome::wrong_result);
  EXPECT_EQ(worker.replacements(), 1);
  // Several failures in a row: each gets a fresh worker.
  EXPECT_EQ(worker.test_fault("abort").outcome, Outcome::crashed);
  EXPECT_EQ(worker.test_fault("exit").outcome, Outcome::crashed);
  EXPECT_EQ(worker.test_fault("echo", sample_result()).outcome, Outcome::wrong_result);
  EXPECT_EQ(worker.replacements(), 3);
}

TEST(Worker, TestFaultsNeedPermission) {
  WorkerOptions options = test_options();
  options.allow_test_faults = false;
  Worker worker(options);
  EXPECT_THROW(worker.test_fault("abort"), EnvironmentError);
  // The refusal was an error reply: the same worker still serves requests.
  worker.probe_device();
  EXPECT_EQ(worker.replacements(), 0);
}

TEST(Worker, MissingProgramIsAnEnvironmentError) {
  WorkerOptions options = test_options();
  options.executable = "/nonexistent/mlatune-worker";
  Worker worker(options);
  try {
    worker.probe_device();
    FAIL() << "expected an EnvironmentError";
  } catch (const EnvironmentError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/mlatune-worker"), std::string::npos);
  }
}

TEST(Worker, EvaluateNeedsAWorkload) {
  Worker worker(test_options());
  EXPECT_THROW(worker.evaluate(Candidate{}), EnvironmentError);
  EXPECT_THROW(worker.retime({}, 3), EnvironmentError);
}

TEST(Worker, WorkloadWithoutGpuSaysSo) {
  Worker worker(test_options());
  DeviceReport report = worker.probe_device();
  if (report.usable) GTEST_SKIP() << "a GPU is present: gpu_evaluator_test covers workloads";
  WorkloadRequest request;
  request.space_file = std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "faults" / "faults.yaml";
  request.shape = "N=4096";
  request.seed = 7;
  try {
    worker.set_workload(request);
    FAIL() << "expected an EnvironmentError";
  } catch (const EnvironmentError& error) {
    EXPECT_NE(std::string(error.what()).find("no GPU"), std::string::npos) << error.what();
  }
  EXPECT_EQ(worker.replacements(), 0);
}

TEST(Worker, BadShapeIsAnInputError) {
  Worker worker(test_options());
  WorkloadRequest request;
  request.space_file = std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "faults" / "faults.yaml";
  request.shape = "M=4096";
  EXPECT_THROW(worker.set_workload(request), InputError);
}

}  // namespace
}  // namespace mlatune
