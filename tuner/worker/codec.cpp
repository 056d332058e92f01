#include "tuner/worker/codec.h"

#include <limits>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "tuner/worker/wire_json.h"

namespace mlatune {
namespace wire {
namespace {

// ---- requests ------------------------------------------------------------------

json message(const ProbeRequest&) { return {{"type", "probe"}}; }
json message(const QuitRequest&) { return {{"type", "quit"}}; }

json message(const SetWorkloadRequest& r) {
  return {{"type", "set_workload"},
          {"space", r.space_file},
          {"shape", r.shape},
          {"seed", r.seed},
          {"cache", to_string(r.timing.cache)},
          {"budget_ms", r.timing.budget_ms},
          {"max_repetitions", r.timing.max_repetitions},
          {"min_repetitions", r.timing.min_repetitions},
          {"stability", r.timing.stability},
          {"cut_min_samples", r.timing.cut_min_samples},
          {"validate_first", r.timing.validate_first},
          {"first_launch_cut", r.timing.first_launch_cut}};
}

json message(const CompileJobRequest& r) { return {{"type", "compile"}, {"request", encode(r.request)}}; }

json message(const EvaluateRequest& r) {
  json j = {{"type", "evaluate"}, {"candidate", encode(r.candidate)}};
  if (r.cutoff) j["cutoff"] = encode(*r.cutoff);
  return j;
}

json message(const RetimeRequest& r) {
  json list = json::array();
  for (const Candidate& c : r.candidates) list.push_back(encode(c));
  return {{"type", "retime"}, {"candidates", std::move(list)}, {"rounds", r.rounds}};
}

json message(const TestFaultRequest& r) {
  return {{"type", "test_fault"}, {"action", r.action}, {"result", encode(r.result)}};
}

SetWorkloadRequest decode_set_workload(const json& j) {
  SetWorkloadRequest r;
  r.space_file = text(j, "space");
  r.shape = text(j, "shape");
  r.seed = integer<std::uint64_t>(j, "seed");
  r.timing.cache = cache_mode(j, "cache");
  r.timing.budget_ms = number(j, "budget_ms");
  r.timing.max_repetitions = integer<int>(j, "max_repetitions");
  r.timing.min_repetitions = integer<int>(j, "min_repetitions");
  r.timing.stability = number(j, "stability");
  r.timing.cut_min_samples = integer<int>(j, "cut_min_samples");
  r.timing.validate_first = flag(j, "validate_first");
  r.timing.first_launch_cut = number(j, "first_launch_cut");
  return r;
}

Request request_from(const json& j) {
  const std::string type = text(j, "type");
  if (type == "probe") return ProbeRequest{};
  if (type == "quit") return QuitRequest{};
  if (type == "set_workload") return decode_set_workload(j);
  if (type == "evaluate") {
    EvaluateRequest r{decode_candidate(j.at("candidate")), std::nullopt};
    if (j.contains("cutoff")) r.cutoff = decode_cutoff(j.at("cutoff"));
    return r;
  }
  if (type == "retime") {
    RetimeRequest r;
    for (const json& c : array(j, "candidates")) r.candidates.push_back(decode_candidate(c));
    r.rounds = integer<int>(j, "rounds");
    return r;
  }
  if (type == "test_fault") return TestFaultRequest{text(j, "action"), decode_result(j.at("result"))};
  if (type == "compile") return CompileJobRequest{decode_compile_request(j.at("request"))};
  malformed(fmt::format("unknown request '{}'", type));
}

// ---- replies -------------------------------------------------------------------

json message(const ProgressReply&) { return {{"type", "progress"}}; }
json message(const ByeReply&) { return {{"type", "bye"}}; }
json message(const ResultReply& r) { return {{"type", "result"}, {"result", encode(r.result)}}; }
json message(const CompiledReply& r) { return {{"type", "compiled"}, {"result", encode(r.result)}}; }

json message(const DeviceReport& r) {
  json j = {{"type", "probe"}, {"usable", r.usable}, {"reason", r.reason}, {"device_count", r.device_count}};
  if (r.usable) j["device"] = encode(r.device);
  return j;
}

json message(const WorkloadInfo& w) {
  return {{"type", "workload"},          {"device", encode(w.device)},
          {"seed", w.seed},              {"reference_us", w.reference_us},
          {"floor", encode(w.floor)},    {"input_sets", w.input_sets},
          {"device_bytes", w.device_bytes}};
}

json message(const TimingsReply& r) {
  json list = json::array();
  for (const auto& t : r.timings) list.push_back(t ? encode(*t) : json(nullptr));
  return {{"type", "timings"}, {"timings", std::move(list)}};
}

json message(const ErrorReply& e) {
  const char* kind = e.kind == ErrorReply::Kind::input      ? "input"
                     : e.kind == ErrorReply::Kind::internal ? "internal"
                                                            : "environment";
  json j = {{"type", "error"}, {"kind", kind}, {"message", e.message}};
  if (e.exiting) j["exiting"] = true;
  return j;
}

WorkloadInfo decode_workload(const json& j) {
  WorkloadInfo w;
  w.device = decode_device(j.at("device"));
  w.seed = integer<std::uint64_t>(j, "seed");
  w.reference_us = number(j, "reference_us");
  w.floor = decode_timing(j.at("floor"));
  w.input_sets = integer<int>(j, "input_sets");
  w.device_bytes = integer<std::int64_t>(j, "device_bytes");
  return w;
}

DeviceReport decode_probe(const json& j) {
  DeviceReport r;
  r.usable = flag(j, "usable");
  r.reason = text(j, "reason");
  r.device_count = integer<int>(j, "device_count");
  if (r.usable) r.device = decode_device(j.at("device"));
  return r;
}

ErrorReply decode_error(const json& j) {
  ErrorReply e;
  const std::string kind = text(j, "kind");
  if (kind == "input")
    e.kind = ErrorReply::Kind::input;
  else if (kind == "internal")
    e.kind = ErrorReply::Kind::internal;
  else if (kind == "environment")
    e.kind = ErrorReply::Kind::environment;
  else
    malformed("unknown error kind");
  e.message = text(j, "message");
  if (j.contains("exiting")) e.exiting = flag(j, "exiting");
  return e;
}

Reply reply_from(const json& j) {
  const std::string type = text(j, "type");
  if (type == "progress") return ProgressReply{};
  if (type == "bye") return ByeReply{};
  if (type == "probe") return decode_probe(j);
  if (type == "workload") return decode_workload(j);
  if (type == "result") return ResultReply{decode_result(j.at("result"))};
  if (type == "timings") {
    TimingsReply r;
    for (const json& t : array(j, "timings"))
      r.timings.push_back(t.is_null() ? std::nullopt : std::optional<TimingStats>(decode_timing(t)));
    return r;
  }
  if (type == "error") return decode_error(j);
  if (type == "compiled") return CompiledReply{decode_compile_result(j.at("result"))};
  malformed(fmt::format("unknown reply '{}'", type));
}

// ---- CBOR ----------------------------------------------------------------------

/// Builds the JSON value of a CBOR text through nlohmann's SAX interface,
/// refusing nesting deeper than any message has: the library's own DOM
/// parser recurses once per level, so a few MB of nested arrays would
/// overflow the stack.
class BoundedBuilder {
 public:
  static constexpr std::size_t max_depth = 16;
  explicit BoundedBuilder(json& root) : root_(root) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool value) { return put(json(value)); }
  bool number_integer(json::number_integer_t value) { return put(json(value)); }
  bool number_unsigned(json::number_unsigned_t value) { return put(json(value)); }
  bool number_float(json::number_float_t value, const json::string_t&) { return put(json(value)); }
  bool string(json::string_t& value) { return put(json(std::move(value))); }
  bool binary(json::binary_t& value) {
    return put(json::binary(std::move(static_cast<json::binary_t::container_type&>(value))));
  }
  bool start_object(std::size_t) { return open(json::object()); }
  bool key(json::string_t& name) {
    key_ = std::move(name);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const json::exception& error) {
    error_ = error.what();
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  json* place(json value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(value);
    return &slot;
  }
  bool put(json value) {
    place(std::move(value));
    return true;
  }
  bool open(json container) {
    if (open_.size() >= max_depth) {
      error_ = fmt::format("nested deeper than {} levels", max_depth);
      return false;
    }
    // Pointers into open containers stay valid: only the innermost one grows.
    open_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  json& root_;
  std::vector<json*> open_;
  std::string key_;
  std::string error_;
};

json parse_cbor(std::span<const std::uint8_t> bytes) {
  json value;
  BoundedBuilder builder(value);
  bool ok = false;
  try {
    ok = json::sax_parse(bytes.data(), bytes.data() + bytes.size(), &builder, json::input_format_t::cbor);
  } catch (const json::exception& error) {
    malformed(error.what());
  }
  if (!ok) malformed(builder.error().empty() ? std::string("not CBOR") : builder.error());
  if (!value.is_object()) malformed("not an object");
  return value;
}

template <class Message>
std::vector<std::uint8_t> to_bytes(const Message& m) {
  return std::visit([](const auto& alternative) { return json::to_cbor(message(alternative)); }, m);
}

/// Runs a decoder, turning the library's errors into MalformedMessage.
template <class Decode>
auto checked(Decode decode) -> decltype(decode()) {
  try {
    return decode();
  } catch (const json::exception& error) {
    malformed(error.what());
  }
}

}  // namespace
}  // namespace wire

std::vector<std::uint8_t> encode_request(const Request& request) { return wire::to_bytes(request); }
std::vector<std::uint8_t> encode_reply(const Reply& reply) { return wire::to_bytes(reply); }

Request decode_request(std::span<const std::uint8_t> bytes) {
  return wire::checked([&] { return wire::request_from(wire::parse_cbor(bytes)); });
}

Reply decode_reply(std::span<const std::uint8_t> bytes) {
  return wire::checked([&] { return wire::reply_from(wire::parse_cbor(bytes)); });
}

}  // namespace mlatune
