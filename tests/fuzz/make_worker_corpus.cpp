// Writes seed inputs for worker_message_fuzz: real messages of the worker
// protocol, built with the library's own encoders and framed as on the wire
// (so the seeds follow the protocol when it changes).  Usage:
//   make_worker_corpus <output folder>
// One file per message kind, plus one stream of several framed messages.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tuner/worker/codec.h"
#include "tuner/worker/messages.h"

namespace {

std::string framed(const std::vector<std::uint8_t>& body) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((body.size() >> (8 * i)) & 0xff);
  out.append(body.begin(), body.end());
  return out;
}

mlatune::TimingStats timing() {
  mlatune::TimingStats t;
  t.median_us = 12.5;
  t.min_us = 11.0;
  t.p90_us = 14.0;
  t.spread = 0.02;
  t.count = 40;
  t.stable = true;
  t.method = "events";
  return t;
}

mlatune::Candidate candidate(bool with_prologue) {
  mlatune::Candidate c;
  c.label = "ALGORITHM=tf32x3_2k,THREADS_PER_QUERY=2";
  c.cubin = std::string("\x7f" "ELF\x02\x01\x01", 7);
  c.entry = "fused_mla_attention";
  c.geometry.grid[0] = 64;
  c.geometry.block[0] = 128;
  c.geometry.shared_bytes = 49152;
  if (with_prologue) {
    c.prologue = mlatune::PrologueLaunch{"expand_kv", c.geometry};
    c.workspace_bytes = {0, 0, 0, 0, 0, 65536};
  }
  return c;
}

mlatune::EvaluationResult result() {
  mlatune::EvaluationResult r;
  r.reason = "";
  r.registers = 96;
  r.local_bytes = 0;
  r.validation = mlatune::ValidationStats{1e-7, 2e-6, 0, 4096, 2, true};
  r.timing = timing();
  return r;
}

mlatune::DeviceProperties device() {
  mlatune::DeviceProperties d;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.multiprocessors = 132;
  d.driver_version = "13.0";
  return d;
}

mlatune::CompileRequest compile_request() {
  mlatune::CompileRequest r;
  r.source = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] *= SCALE; }\n";
  r.source_name = "k.cu";
  r.entry = "k";
  r.arch = "sm_90";
  r.definitions = {{"SCALE", "2"}, {"SHAPE_N", "4096"}};
  r.extra_options = {"--include-path=/x"};
  r.config = "SCALE=2";
  return r;
}

mlatune::CompiledBinary binary() {
  mlatune::CompiledBinary b;
  b.key = mlatune::BinaryKey{"0123456789abcdef0123456789abcdef"};
  b.cubin = std::string("\x7f" "ELF\x02\x01\x01", 7);
  b.usage.registers = 40;
  b.usage.shared_bytes = 1024;
  b.options = {"--gpu-architecture=sm_90", "-DSCALE=2"};
  b.log = "ptxas info    : Used 40 registers";
  b.compile_seconds = 0.2;
  b.cpu_seconds = 0.19;
  b.arch = "sm_90";
  b.entry = "k";
  return b;
}

mlatune::CompileFailure failure() {
  mlatune::CompileFailure f;
  f.key = mlatune::BinaryKey{"fedcba9876543210fedcba9876543210"};
  f.log = "k.cu(1): error: identifier \"SCALE\" is undefined";
  f.options = {"--gpu-architecture=sm_90"};
  f.message = "compiling k.cu failed";
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_worker_corpus <output folder>\n");
    return 2;
  }
  const std::string dir = argv[1];
  using mlatune::encode_reply;
  using mlatune::encode_request;
  mlatune::WorkloadInfo workload{device(), 7, 900.0, timing(), 2, 1 << 20};
  mlatune::SetWorkloadRequest set_workload;
  set_workload.space_file = "/work/search_spaces/fused_mla_attention.yaml";
  set_workload.shape = "B=2,T=32,H=4,D=16,R=24";
  set_workload.seed = 7;
  const std::vector<std::pair<std::string, std::vector<std::uint8_t>>> messages = {
      {"progress", encode_reply(mlatune::ProgressReply{})},
      {"probe", encode_reply(mlatune::DeviceReport{true, "", device()})},
      {"probe_request", encode_request(mlatune::ProbeRequest{})},
      {"set_workload", encode_request(set_workload)},
      {"evaluate", encode_request(mlatune::EvaluateRequest{candidate(false), mlatune::Cutoff{20.0, 3.0}})},
      {"evaluate_prologue", encode_request(mlatune::EvaluateRequest{candidate(true), std::nullopt})},
      {"result", encode_reply(mlatune::ResultReply{result()})},
      {"workload", encode_reply(workload)},
      {"retime", encode_request(mlatune::RetimeRequest{{candidate(false)}, 3})},
      {"timings", encode_reply(mlatune::TimingsReply{{timing(), std::nullopt}})},
      {"error", encode_reply(mlatune::ErrorReply{mlatune::ErrorReply::Kind::input, "bad shape", false})},
      {"compile", encode_request(mlatune::CompileJobRequest{compile_request()})},
      {"compiled", encode_reply(mlatune::CompiledReply{mlatune::CompileResult(binary())})},
      {"compile_failed", encode_reply(mlatune::CompiledReply{mlatune::CompileResult(failure())})},
  };
  std::string stream;
  for (const auto& [name, message] : messages) {
    std::ofstream(dir + "/" + name, std::ios::binary) << framed(message);
    stream += framed(message);
  }
  std::ofstream(dir + "/stream", std::ios::binary) << stream;
  return 0;
}
