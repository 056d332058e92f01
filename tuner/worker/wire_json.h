// Internal to the worker's codec (tuner/worker/codec.cpp): the JSON value of
// each type that travels between the tuner and the worker, before it becomes
// CBOR.  Only codec.cpp and the white-box tests of the wire format include
// this header; everything else speaks tuner/worker/codec.h, which keeps
// nlohmann/json out of the tuner's interfaces.
//
// The decoders throw nlohmann::json::exception for a missing field or a
// value of the wrong JSON type, and MalformedMessage for a number out of
// range or an unknown name; decode_request/decode_reply turn both into
// MalformedMessage.
#pragma once
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

}  // namespace mlatune::wire
