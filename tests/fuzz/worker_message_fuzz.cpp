// Fuzzes what the tuner and the worker read from each other's pipe
// (tuner/worker.cpp): the input is the byte stream, framed as on the wire
// (4-byte little-endian length, then CBOR).  MessageReader reads it from a
// real pipe; each message is handed to the decoders of the wire types
// (decode_result, decode_candidate, decode_device, decode_timing,
// decode_cutoff), both whole and member by member under its wire name.
//
// A malformed stream or message must be an EnvironmentError ("malformed
// message"), never another exception type: the tuner maps only mlatune's
// errors to clear messages.  A value that decodes must encode and decode again.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_common.h"
#include "tuner/worker.h"

namespace {

using json = nlohmann::json;

// A pipe holding `bytes`, closed for writing: the reader sees them, then EOF.
struct FilledPipe {
  int fds[2] = {-1, -1};
  explicit FilledPipe(std::string_view bytes) {
    if (::pipe(fds) != 0) std::abort();
    std::size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fds[1], bytes.data() + done, bytes.size() - done);
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
    ::close(fds[1]);
  }
  ~FilledPipe() { ::close(fds[0]); }
};

template <typename Decode>
void decode_twice(const json& j, Decode decode) {
  mlatune::fuzz::rejecting_cleanly([&] {
    auto value = decode(j);
    try {
      (void)decode(mlatune::encode(value));
    } catch (...) {
      mlatune::fuzz::violated("a decoded value does not survive encode and decode");
    }
  });
}

void decode_all(const json& j) {
  decode_twice(j, mlatune::decode_result);
  decode_twice(j, mlatune::decode_candidate);
  decode_twice(j, mlatune::decode_device);
  decode_twice(j, mlatune::decode_timing);
  decode_twice(j, mlatune::decode_cutoff);
}

void decode_members(const json& message) {
  if (!message.is_object()) return;
  auto member = [&](const char* key, auto decode) {
    if (auto it = message.find(key); it != message.end()) decode_twice(*it, decode);
  };
  member("result", mlatune::decode_result);
  member("candidate", mlatune::decode_candidate);
  member("device", mlatune::decode_device);
  member("floor", mlatune::decode_timing);
  member("timing", mlatune::decode_timing);
  member("cutoff", mlatune::decode_cutoff);
  for (const char* list : {"timings", "candidates"})
    if (auto it = message.find(list); it != message.end() && it->is_array())
      for (const json& item : *it) decode_all(item);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 60000) return 0;  // must fit a pipe's buffer: we write before we read
  FilledPipe pipe(mlatune::fuzz::as_text(data, size));
  mlatune::MessageReader reader(pipe.fds[0]);
  mlatune::fuzz::rejecting_cleanly([&] {
    json message;
    while (reader.read(message) == mlatune::MessageReader::Status::message) {
      decode_all(message);
      decode_members(message);
    }
  });
  return 0;
}
