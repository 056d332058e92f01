// The worker's messages as bytes (tuner/worker/codec.h): every request and
// reply survives the round trip, and bytes that are not a message (truncated,
// mutated, random, absurdly nested, numbers of the wrong kind or range) are a
// MalformedMessage, never a crash or another exception.
#include "tuner/worker/codec.h"

#include <gtest/gtest.h>

#include <random>
#include <variant>

#include "tuner/worker/wire_json.h"

namespace mlatune {
namespace {

using json = nlohmann::json;

Candidate sample_candidate() {
  Candidate c;
  c.label = "MODE=correct,THREADS=256";
  c.cubin = std::string("\x7f" "ELF\0\1\2\xff", 8);
  c.entry = "faults";
  c.geometry.grid[0] = 256;
  c.geometry.block[0] = 256;
  c.geometry.shared_bytes = 1024;
  c.prologue = PrologueLaunch{"expand", {}};
  c.prologue->geometry.grid[1] = 3;
  c.workspace_bytes = {4096, std::int64_t{1} << 40};
  return c;
}

EvaluationResult sample_result() {
  EvaluationResult r;
  r.outcome = Outcome::wrong_result;
  r.reason = "input set 2: relative L2 error too large";
  r.registers = 40;
  r.local_bytes = 16;
  r.validation = ValidationStats{3.25e-4, 1.5e-3, 2, 16384, 2, false};
  r.validation->per_kind = {{InputKind::normal, 2.5e-7, 1e-5}, {InputKind::row_scaled, 3.25e-4, 1.5e-3}};
  r.timing = summarize_times({5.0, 6.0, 7.0}, CacheMode::rotate, "events");
  return r;
}

template <class T>
T round_trip_request(const T& request) {
  Request back = decode_request(encode_request(request));
  EXPECT_TRUE(std::holds_alternative<T>(back));
  return std::get<T>(back);
}

template <class T>
T round_trip_reply(const T& reply) {
  Reply back = decode_reply(encode_reply(reply));
  EXPECT_TRUE(std::holds_alternative<T>(back));
  return std::get<T>(back);
}

TEST(WorkerCodec, EveryRequestRoundTrips) {
  round_trip_request(ProbeRequest{});
  round_trip_request(QuitRequest{});

  SetWorkloadRequest workload{"/spaces/faults.yaml", "N=4096", 0xfedcba9876543210ull, {}};
  workload.timing.cache = CacheMode::hot;
  workload.timing.budget_ms = 12.5;
  workload.timing.cut_min_samples = 7;
  workload.timing.validate_first = true;
  workload.timing.first_launch_cut = 2.5;
  SetWorkloadRequest w = round_trip_request(workload);
  EXPECT_EQ(w.space_file, workload.space_file);
  EXPECT_EQ(w.shape, "N=4096");
  EXPECT_EQ(w.seed, 0xfedcba9876543210ull);
  EXPECT_EQ(w.timing.cache, CacheMode::hot);
  EXPECT_DOUBLE_EQ(w.timing.budget_ms, 12.5);
  EXPECT_EQ(w.timing.cut_min_samples, 7);
  EXPECT_TRUE(w.timing.validate_first);
  EXPECT_DOUBLE_EQ(w.timing.first_launch_cut, 2.5);

  EvaluateRequest evaluate = round_trip_request(EvaluateRequest{sample_candidate(), Cutoff{10.5, 3.0}});
  EXPECT_EQ(evaluate.candidate.cubin, sample_candidate().cubin);
  ASSERT_TRUE(evaluate.candidate.prologue);
  EXPECT_EQ(evaluate.candidate.prologue->geometry.grid[1], 3);
  EXPECT_EQ(evaluate.candidate.workspace_bytes, sample_candidate().workspace_bytes);
  ASSERT_TRUE(evaluate.cutoff);
  EXPECT_DOUBLE_EQ(evaluate.cutoff->factor, 3.0);
  EXPECT_FALSE(round_trip_request(EvaluateRequest{sample_candidate(), std::nullopt}).cutoff);

  RetimeRequest retime = round_trip_request(RetimeRequest{{sample_candidate(), sample_candidate()}, 3});
  EXPECT_EQ(retime.candidates.size(), 2u);
  EXPECT_EQ(retime.rounds, 3);

  TestFaultRequest fault = round_trip_request(TestFaultRequest{"echo", sample_result()});
  EXPECT_EQ(fault.action, "echo");
  EXPECT_EQ(fault.result.reason, sample_result().reason);

  CompileRequest compile;
  compile.source = "extern \"C\" __global__ void k() {}\n";
  compile.source_name = "k.cu";
  compile.entry = "k";
  compile.arch = "sm_90a";
  compile.definitions = {{"A", "1"}, {"B", "x y"}};
  compile.extra_options = {"--include-path=/x"};
  compile.config = "A=1,B=x y";
  compile.require_resource_report = false;
  compile.keep_ptx = true;
  CompileRequest c = round_trip_request(CompileJobRequest{compile}).request;
  EXPECT_EQ(c.source, compile.source);
  EXPECT_EQ(c.source_name, "k.cu");
  EXPECT_EQ(c.entry, "k");
  EXPECT_EQ(c.arch, "sm_90a");
  EXPECT_EQ(c.definitions, compile.definitions);
  EXPECT_EQ(c.extra_options, compile.extra_options);
  EXPECT_EQ(c.config, compile.config);
  EXPECT_FALSE(c.require_resource_report);
  EXPECT_TRUE(c.keep_ptx);
  EXPECT_FALSE(c.prologue_part);
  // A request whose prologue is compiled apart keeps its part on the wire.
  compile.prologue_part = CompileRequest::ProloguePart{"p", {{"A", "0"}, {"C", "2"}}};
  CompileRequest apart = round_trip_request(CompileJobRequest{compile}).request;
  ASSERT_TRUE(apart.prologue_part);
  EXPECT_EQ(apart.prologue_part, compile.prologue_part);
}

TEST(WorkerCodec, EveryReplyRoundTrips) {
  round_trip_reply(ProgressReply{});
  round_trip_reply(ByeReply{});

  DeviceReport none = round_trip_reply(DeviceReport{false, "no CUDA driver", {}});
  EXPECT_FALSE(none.usable);
  EXPECT_EQ(none.reason, "no CUDA driver");
  DeviceReport gpu{true, "", {}};
  gpu.device.name = "NVIDIA H200";
  gpu.device.cc_major = 9;
  gpu.device.max_grid[0] = 2147483647;
  gpu.device_count = 8;
  DeviceReport back = round_trip_reply(gpu);
  EXPECT_EQ(back.device_count, 8);
  EXPECT_EQ(back.device.name, "NVIDIA H200");
  EXPECT_EQ(back.device.cc_major, 9);
  EXPECT_EQ(back.device.max_grid[0], 2147483647);

  WorkloadInfo info;
  info.seed = 99;
  info.reference_us = 1234.5;
  info.floor = summarize_times({2.0, 2.5}, CacheMode::cold, "events");
  info.device_bytes = std::int64_t{3} << 33;
  WorkloadInfo info_back = round_trip_reply(info);
  EXPECT_EQ(info_back.seed, 99u);
  EXPECT_DOUBLE_EQ(info_back.floor.median_us, info.floor.median_us);
  EXPECT_EQ(info_back.device_bytes, info.device_bytes);

  ResultReply result = round_trip_reply(ResultReply{sample_result()});
  ASSERT_TRUE(result.result.validation);
  EXPECT_EQ(result.result.validation->elements, 16384u);
  const std::vector<KindErrors>& kinds = result.result.validation->per_kind;
  ASSERT_EQ(kinds.size(), 2u);
  EXPECT_EQ(kinds[1].kind, InputKind::row_scaled);
  EXPECT_EQ(kinds[1].relative_l2, 3.25e-4);
  EXPECT_EQ(kinds[0].max_abs, 1e-5);
  ResultReply no_kinds{sample_result()};
  no_kinds.result.validation->per_kind.clear();
  EXPECT_TRUE(round_trip_reply(no_kinds).result.validation->per_kind.empty());

  CompiledBinary binary;
  binary.key = BinaryKey{"0123456789abcdef0123456789abcdef"};
  binary.cubin = std::string("\x7f" "ELF\0\xff\x01", 7);  // bytes, zeros included
  binary.usage.registers = 168;
  binary.usage.spill_load_bytes = 8;
  binary.usage.shared_bytes = 49152;
  binary.options = {"--gpu-architecture=sm_90", "-DA=1"};
  binary.log = "ptxas info : Used 168 registers";
  binary.compile_seconds = 1.5;
  binary.cpu_seconds = 1.25;
  binary.ptxas_seconds = 0.75;
  binary.arch = "sm_90";
  binary.entry = "k";
  binary.ptx = ".version 9.0\n.target sm_90\n";
  binary.prologue_ptx = ".version 9.0\n.target sm_90a\n";
  const CompileResult ok = round_trip_reply(CompiledReply{CompileResult(binary)}).result;
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.binary().key, binary.key);
  EXPECT_EQ(ok.binary().cubin, binary.cubin);
  EXPECT_EQ(ok.binary().usage, binary.usage);
  EXPECT_EQ(ok.binary().options, binary.options);
  EXPECT_EQ(ok.binary().log, binary.log);
  EXPECT_DOUBLE_EQ(ok.binary().compile_seconds, 1.5);
  EXPECT_DOUBLE_EQ(ok.binary().cpu_seconds, 1.25);
  EXPECT_DOUBLE_EQ(ok.binary().ptxas_seconds, 0.75);
  EXPECT_EQ(ok.binary().arch, "sm_90");
  EXPECT_EQ(ok.binary().entry, "k");
  EXPECT_EQ(ok.binary().ptx, binary.ptx);
  EXPECT_EQ(ok.binary().prologue_ptx, binary.prologue_ptx);
  CompileFailure failure;
  failure.key = binary.key;
  failure.log = "k.cu(1): error: x";
  failure.options = binary.options;
  failure.message = "compiling k.cu failed";
  failure.compile_seconds = 0.5;
  failure.cpu_seconds = 0.25;
  const CompileResult failed = round_trip_reply(CompiledReply{CompileResult(failure)}).result;
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.failure().message, failure.message);
  EXPECT_EQ(failed.log(), failure.log);
  EXPECT_EQ(failed.options(), failure.options);
  EXPECT_DOUBLE_EQ(failed.cpu_seconds(), 0.25);

  TimingsReply timings = round_trip_reply(TimingsReply{{sample_result().timing, std::nullopt}});
  ASSERT_EQ(timings.timings.size(), 2u);
  EXPECT_TRUE(timings.timings[0]);
  EXPECT_FALSE(timings.timings[1]);

  ErrorReply error = round_trip_reply(ErrorReply{ErrorReply::Kind::input, "unknown shape variable M", true});
  EXPECT_EQ(error.kind, ErrorReply::Kind::input);
  EXPECT_EQ(error.message, "unknown shape variable M");
  EXPECT_TRUE(error.exiting);
}

/// Decodes `bytes` both ways: only a value or a MalformedMessage may come back.
void expect_value_or_malformed(const std::vector<std::uint8_t>& bytes) {
  try {
    decode_request(bytes);
  } catch (const MalformedMessage&) {
  }
  try {
    decode_reply(bytes);
  } catch (const MalformedMessage&) {
  }
}

TEST(WorkerCodec, TruncatedMessagesAreMalformed) {
  std::vector<std::uint8_t> whole = encode_request(EvaluateRequest{sample_candidate(), Cutoff{1, 3}});
  for (std::size_t n = 0; n < whole.size(); ++n) {
    std::vector<std::uint8_t> prefix(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(decode_request(prefix), MalformedMessage) << n << " of " << whole.size() << " bytes";
  }
}

TEST(WorkerCodec, MutatedAndRandomBytesNeverCrash) {
  std::vector<std::uint8_t> whole = encode_reply(ResultReply{sample_result()});
  for (std::size_t i = 0; i < whole.size(); ++i) {
    for (std::uint8_t value : {std::uint8_t{0x00}, std::uint8_t{0x1b}, std::uint8_t{0x7f}, std::uint8_t{0x9f},
                               std::uint8_t{0xbf}, std::uint8_t{0xfb}, std::uint8_t{0xff}}) {
      std::vector<std::uint8_t> mutated = whole;
      mutated[i] = value;
      EXPECT_NO_FATAL_FAILURE(expect_value_or_malformed(mutated));
    }
  }
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::uint8_t> bytes(rng() % 64);
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
    EXPECT_NO_FATAL_FAILURE(expect_value_or_malformed(bytes));
  }
}

TEST(WorkerCodec, DeepNestingIsRefusedNotRecursedInto) {
  // A million nested one-element arrays: the library's own parser would
  // recurse a million times.
  std::vector<std::uint8_t> nested(1'000'000, 0x81);
  nested.push_back(0x00);
  EXPECT_THROW(decode_request(nested), MalformedMessage);
  std::vector<std::uint8_t> maps;
  for (int i = 0; i < 100000; ++i) maps.insert(maps.end(), {0xa1, 0x61, 'k'});
  maps.push_back(0x00);
  EXPECT_THROW(decode_reply(maps), MalformedMessage);
}

std::vector<std::uint8_t> cbor(const json& j) { return json::to_cbor(j); }

json set_workload_json() {
  return {{"type", "set_workload"}, {"space", "/s.yaml"},     {"shape", "N=1"},         {"seed", 1},
          {"cache", "cold"},        {"budget_ms", 100.0},      {"max_repetitions", 2000}, {"min_repetitions", 10},
          {"stability", 0.01},      {"cut_min_samples", 5},    {"validate_first", false},
          {"first_launch_cut", 2.0}};
}

TEST(WorkerCodec, FieldsOfTheWrongKindOrRangeAreMalformed) {
  EXPECT_NO_THROW(decode_request(cbor(set_workload_json())));
  auto with = [](const char* key, json value) {
    json j = set_workload_json();
    j[key] = std::move(value);
    return cbor(j);
  };
  EXPECT_THROW(decode_request(with("seed", 1.5)), MalformedMessage);            // float for an integer
  EXPECT_THROW(decode_request(with("seed", -1)), MalformedMessage);             // negative for unsigned
  EXPECT_THROW(decode_request(with("max_repetitions", 1e300)), MalformedMessage);
  EXPECT_THROW(decode_request(with("max_repetitions", std::int64_t{1} << 40)), MalformedMessage);
  EXPECT_THROW(decode_request(with("budget_ms", "100")), MalformedMessage);
  EXPECT_THROW(decode_request(with("cache", "lukewarm")), MalformedMessage);
  EXPECT_THROW(decode_request(with("validate_first", 1)), MalformedMessage);  // a number for a flag
  EXPECT_THROW(decode_request(with("first_launch_cut", true)), MalformedMessage);
  json missing = set_workload_json();
  missing.erase("shape");
  EXPECT_THROW(decode_request(cbor(missing)), MalformedMessage);
  EXPECT_THROW(decode_request(cbor(json{{"type", "format_disk"}})), MalformedMessage);
  EXPECT_THROW(decode_request(cbor(json{{"type", 3}})), MalformedMessage);
  EXPECT_THROW(decode_request(cbor(json(42))), MalformedMessage);
  EXPECT_THROW(decode_request(cbor(json::array({"probe"}))), MalformedMessage);
  // A reply is not a request, and the other way round.
  EXPECT_THROW(decode_request(encode_reply(ByeReply{})), MalformedMessage);
  EXPECT_THROW(decode_reply(encode_request(QuitRequest{})), MalformedMessage);
  // The cubin must be a byte string; grids must be integers.
  json candidate = wire::encode(sample_candidate());
  candidate["cubin"] = "ELF";
  EXPECT_THROW(decode_request(cbor(json{{"type", "evaluate"}, {"candidate", candidate}})), MalformedMessage);
  candidate = wire::encode(sample_candidate());
  candidate["grid"] = {1.0, 1, 1};
  EXPECT_THROW(decode_request(cbor(json{{"type", "evaluate"}, {"candidate", candidate}})), MalformedMessage);
  candidate["grid"] = {1};
  EXPECT_THROW(decode_request(cbor(json{{"type", "evaluate"}, {"candidate", candidate}})), MalformedMessage);
  // A validation's per-kind errors name a known kind, with numbers.
  json result = json::from_cbor(encode_reply(ResultReply{sample_result()}));
  EXPECT_NO_THROW(decode_reply(cbor(result)));
  json& kinds = result.at("result").at("validation").at("per_kind");
  kinds[0]["kind"] = "lukewarm";
  EXPECT_THROW(decode_reply(cbor(result)), MalformedMessage);
  kinds[0]["kind"] = "normal";
  kinds[1]["relative_l2"] = "small";
  EXPECT_THROW(decode_reply(cbor(result)), MalformedMessage);
  kinds[1] = 7;
  EXPECT_THROW(decode_reply(cbor(result)), MalformedMessage);
}

TEST(WorkerCodec, MalformedMessageIsAnEnvironmentError) {
  try {
    decode_reply({});
    FAIL() << "an empty message decoded";
  } catch (const EnvironmentError& error) {
    EXPECT_NE(std::string(error.what()).find("malformed message"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace mlatune
