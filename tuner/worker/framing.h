// How the tuner and its worker process (tuner/worker/client.h) pass messages:
// over a pipe, each message is a 4-byte little-endian length followed by that
// many bytes.  What the bytes mean is tuner/worker/codec.h's business; this
// file only cuts the stream into messages and honours deadlines.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mlatune {

/// The largest message either side accepts (a cubin is a few MiB at most).
inline constexpr std::uint32_t max_message_bytes = 256u << 20;

/// Writes one framed message; throws EnvironmentError when the pipe is
/// closed (the peer died), the write fails or the message is too large.
/// Never raises SIGPIPE.
void write_message(int fd, std::span<const std::uint8_t> body);

/// Reads framed messages from a file descriptor, with a deadline.
class MessageReader {
 public:
  enum class Status { message, timeout, closed };
  explicit MessageReader(int fd) : fd_(fd) {}
  /// Waits for one message until `deadline` (forever when nullopt) and puts
  /// its bytes in `body`.  `closed`: the peer closed the pipe between
  /// messages.  Throws EnvironmentError for an oversized length, a pipe
  /// closed in the middle of a message, or a failing read.
  Status read(std::vector<std::uint8_t>& body,
              std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

 private:
  int fd_;
  std::string buffer_;
};

}  // namespace mlatune
