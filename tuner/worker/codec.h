// The worker's messages (tuner/worker/messages.h) as bytes: CBOR, so that
// cubins travel as byte strings.  Decoding accepts any bytes: whatever is not
// a well-formed message of the expected kind is a MalformedMessage, never a
// crash (the decoders are fuzzed), whatever its nesting or numbers.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "tuner/worker/messages.h"

namespace mlatune {

/// Bytes that are not a valid message: bad CBOR, nesting past what a message
/// needs, an unknown type, a missing field, a number of the wrong kind or
/// out of range.
class MalformedMessage : public EnvironmentError {
 public:
  using EnvironmentError::EnvironmentError;
};

std::vector<std::uint8_t> encode_request(const Request& request);
std::vector<std::uint8_t> encode_reply(const Reply& reply);

/// Throws MalformedMessage for anything but an encoded Request.
Request decode_request(std::span<const std::uint8_t> bytes);
/// Throws MalformedMessage for anything but an encoded Reply.
Reply decode_reply(std::span<const std::uint8_t> bytes);

}  // namespace mlatune
