#include "tuner/worker/framing.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune {
namespace {

using steady = std::chrono::steady_clock;

std::string errno_text(int error) { return fmt::format("{} ({})", std::strerror(error), error); }

/// Writes all of `data`, with SIGPIPE blocked for this thread so that a dead
/// peer is an EPIPE error instead of the end of this process.
void write_all(int fd, const char* data, std::size_t size) {
  sigset_t pipe_only, previous;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigset_t pending_before;
  sigemptyset(&pending_before);
  if (sigpending(&pending_before) != 0)
    throw EnvironmentError("sigpending failed: " + errno_text(errno));
  bool was_pending = sigismember(&pending_before, SIGPIPE) == 1;
  if (int error = pthread_sigmask(SIG_BLOCK, &pipe_only, &previous); error != 0)
    throw EnvironmentError("pthread_sigmask failed: " + errno_text(error));
  int error = 0;
  while (size > 0) {
    ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      error = errno;
      break;
    }
    data += written;
    size -= static_cast<std::size_t>(written);
  }
  if (error == EPIPE && !was_pending) {
    // Consume the SIGPIPE this write raised before unblocking it.
    timespec zero{0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  if (int restore = pthread_sigmask(SIG_SETMASK, &previous, nullptr); restore != 0)
    throw EnvironmentError("pthread_sigmask failed: " + errno_text(restore));
  if (error == EPIPE) throw EnvironmentError("the worker's pipe is closed (the worker exited)");
  if (error != 0) throw EnvironmentError("write to the worker pipe failed: " + errno_text(error));
}

std::uint32_t frame_length(const std::string& buffer) {
  std::uint32_t size = 0;
  for (std::size_t i = 0; i < 4; ++i)
    size |= static_cast<std::uint32_t>(static_cast<unsigned char>(buffer[i])) << (8 * i);
  return size;
}

}  // namespace

void write_message(int fd, std::span<const std::uint8_t> body) {
  if (body.size() > max_message_bytes)
    throw EnvironmentError(fmt::format("message of {} bytes exceeds the limit of {}", body.size(),
                                       max_message_bytes));
  auto size = static_cast<std::uint32_t>(body.size());
  std::string frame(4, '\0');
  for (std::size_t i = 0; i < 4; ++i) frame[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  frame.append(reinterpret_cast<const char*>(body.data()), body.size());
  write_all(fd, frame.data(), frame.size());
}

MessageReader::Status MessageReader::read(std::vector<std::uint8_t>& body,
                                          std::optional<steady::time_point> deadline) {
  while (true) {
    if (buffer_.size() >= 4) {
      const std::uint32_t size = frame_length(buffer_);
      if (size > max_message_bytes)
        throw EnvironmentError(fmt::format("malformed message: length {} exceeds the limit of {}",
                                           size, max_message_bytes));
      const std::size_t end = 4 + static_cast<std::size_t>(size);
      if (buffer_.size() >= end) {
        body.assign(buffer_.begin() + 4, buffer_.begin() + static_cast<std::ptrdiff_t>(end));
        buffer_.erase(0, end);
        return Status::message;
      }
    }
    int wait_ms = -1;
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - steady::now());
      if (left.count() <= 0) return Status::timeout;
      wait_ms = static_cast<int>(std::min<long long>(left.count() + 1, 1 << 30));
    }
    pollfd descriptor{fd_, POLLIN, 0};
    int ready = ::poll(&descriptor, 1, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw EnvironmentError("poll on the worker pipe failed: " + errno_text(errno));
    }
    if (ready == 0) continue;  // the deadline check above decides
    char chunk[65536];
    ssize_t got = ::read(fd_, chunk, sizeof chunk);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw EnvironmentError("read from the worker pipe failed: " + errno_text(errno));
    }
    if (got == 0) {
      if (!buffer_.empty())
        throw EnvironmentError(fmt::format("the pipe closed in the middle of a message ({} bytes)",
                                           buffer_.size()));
      return Status::closed;
    }
    buffer_.append(chunk, static_cast<std::size_t>(got));
  }
}

}  // namespace mlatune
