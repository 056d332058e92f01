// Internal to the worker's codec (tuner/worker/codec.cpp): the JSON value of
// each type that travels between the tuner and the worker, before it becomes
// CBOR.  Only codec.cpp and the white-box tests of the wire format include
// this header; everything else speaks tuner/worker/codec.h, which keeps
// nlohmann/json out of the tuner's interfaces.
//
// The decoders throw nlohmann::json::exception for a missing field, and
// MalformedMessage for a value of the wrong JSON type, a number out of range
// or an unknown name; decode_request/decode_reply turn both into
// MalformedMessage.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tuner/worker/messages.h"

namespace mlatune::wire {

using json = nlohmann::json;

json encode(const EvaluationResult&);
json encode(const TimingStats&);
json encode(const Candidate&);
json encode(const DeviceProperties&);
json encode(const Cutoff&);
EvaluationResult decode_result(const json&);
TimingStats decode_timing(const json&);
Candidate decode_candidate(const json&);
DeviceProperties decode_device(const json&);
Cutoff decode_cutoff(const json&);
json encode(const CompileRequest&);
json encode(const CompileResult&);
CompileRequest decode_compile_request(const json&);
CompileResult decode_compile_result(const json&);

// ---- field readers: the wrong JSON type or range is MalformedMessage ----------

[[noreturn]] void malformed(std::string_view what);

// Checked conversions: a number that does not fit the field is an error,
// never a narrowing cast (a float-to-int cast out of range is undefined).
template <class T>
T to_integer(const json& value, std::string_view what) {
  if (!value.is_number_integer()) malformed(fmt::format("{} is not an integer", what));
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (!std::in_range<T>(u)) malformed(fmt::format("{} = {} is out of range", what, u));
    return static_cast<T>(u);
  }
  const auto s = value.get<std::int64_t>();
  if (!std::in_range<T>(s)) malformed(fmt::format("{} = {} is out of range", what, s));
  return static_cast<T>(s);
}

template <class T>
T integer(const json& object, const char* key) {
  return to_integer<T>(object.at(key), key);
}

double number(const json& object, const char* key);
std::string text(const json& object, const char* key);
bool flag(const json& object, const char* key);
const json& array(const json& object, const char* key);
CacheMode cache_mode(const json& object, const char* key);

}  // namespace mlatune::wire
