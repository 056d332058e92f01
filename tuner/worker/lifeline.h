// How the worker process makes sure it never outlives the tuner that started
// it, so that a killed tuner never leaves a process holding the GPU.  Three
// ties, because each misses a case the others catch:
//   die_with_parent   asks the kernel for SIGKILL when the parent dies
//                     (PR_SET_PDEATHSIG), and exits if the parent died
//                     before that request took effect;
//   exit_when_closed  a thread that ends the process when the tuner's end
//                     of the request pipe closes, even while the main thread
//                     is busy on the GPU (a tuner that dropped the worker
//                     without dying, or a parent-death signal that was lost).
#pragma once
#include <optional>
#include <string_view>

#include <sys/types.h>

namespace mlatune {

/// The worker's command-line option that names the pid of the tuner that
/// started it ("--parent-pid 1234").
inline constexpr std::string_view parent_pid_option = "--parent-pid";

/// The pid after --parent-pid in `argv`, if any; InputError when the value
/// is not a positive integer.
std::optional<pid_t> parent_pid_argument(int argc, char** argv);

/// First thing in the worker: the process gets SIGKILL when the thread that
/// spawned it exits (Linux ties the signal to that thread; the tuner spawns
/// its workers from the thread that runs the sweep), and exits at once,
/// status 1, when its parent is no longer `expected_parent`.  Throws
/// EnvironmentError when prctl fails.
void die_with_parent(pid_t expected_parent);

/// Starts a detached thread that ends the process (_exit(0)) as soon as
/// `request_fd` reports a hang-up: every writer of the request pipe is gone.
/// Throws EnvironmentError when the thread cannot start.
void exit_when_closed(int request_fd);

}  // namespace mlatune
