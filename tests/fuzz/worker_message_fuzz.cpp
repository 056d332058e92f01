// Fuzzes what the tuner and the worker read from each other's pipe: the
// input is the byte stream, framed as on the wire (4-byte little-endian
// length, then CBOR).  MessageReader (tuner/worker/framing.h) reads it from a
// real pipe; each message body goes to both decoders of tuner/worker/codec.h,
// decode_request (what the worker reads) and decode_reply (what the tuner
// reads).
//
// A malformed stream or message must be an EnvironmentError (a
// MalformedMessage for the body), never another exception type or a crash.
// A message that decodes must encode and decode again.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tests/fuzz/fuzz_common.h"
#include "tuner/worker/codec.h"
#include "tuner/worker/framing.h"

namespace {

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

template <typename Decode, typename Encode>
void decode_twice(const std::vector<std::uint8_t>& body, Decode decode, Encode encode) {
  mlatune::fuzz::rejecting_cleanly([&] {
    auto value = decode(body);
    try {
      (void)decode(encode(value));
    } catch (...) {
      mlatune::fuzz::violated("a decoded message does not survive encode and decode");
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 60000) return 0;  // must fit a pipe's buffer: we write before we read
  FilledPipe pipe(mlatune::fuzz::as_text(data, size));
  mlatune::MessageReader reader(pipe.fds[0]);
  mlatune::fuzz::rejecting_cleanly([&] {
    std::vector<std::uint8_t> body;
    while (reader.read(body) == mlatune::MessageReader::Status::message) {
      decode_twice(body, mlatune::decode_request, mlatune::encode_request);
      decode_twice(body, mlatune::decode_reply, mlatune::encode_reply);
    }
  });
  return 0;
}
