#include "tuner/worker/lifeline.h"

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>

#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune {

std::optional<pid_t> parent_pid_argument(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] != parent_pid_option) continue;
    const std::string_view text = argv[i + 1];
    pid_t pid = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), pid);
    if (error != std::errc() || end != text.data() + text.size() || pid <= 0)
      throw InputError(fmt::format("{} {}: not a process id", parent_pid_option, text));
    return pid;
  }
  return std::nullopt;
}

void die_with_parent(pid_t expected_parent) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
    throw EnvironmentError(fmt::format("prctl(PR_SET_PDEATHSIG) failed: {}", std::strerror(errno)));
  // The parent may have died between spawning us and the prctl above: then
  // no signal will come, and we have been re-parented (to init or a subreaper).
  if (::getppid() != expected_parent) {
    std::fprintf(stderr, "mlatune-worker: the tuner that started it (pid %d) is gone; exiting\n",
                 static_cast<int>(expected_parent));
    ::_exit(1);
  }
}

void exit_when_closed(int request_fd) {
  auto watch = [request_fd] {
    while (true) {
      // No events asked for: poll still reports POLLHUP (no writer left) and
      // POLLERR/POLLNVAL, and never consumes what the main thread reads.
      pollfd descriptor{request_fd, 0, 0};
      int ready = ::poll(&descriptor, 1, -1);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0 || (descriptor.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) ::_exit(0);
    }
  };
  try {
    std::thread(watch).detach();
  } catch (const std::system_error& error) {
    throw EnvironmentError(fmt::format("cannot start the worker's pipe watchdog: {}", error.what()));
  }
}

}  // namespace mlatune
