// The worker program's side of tuner/worker/client.h: owns the CUDA context,
// the workload and the evaluator, and answers one request at a time.
#pragma once

namespace mlatune {

/// The worker program's loop: serves requests from `in_fd`, replies on
/// `out_fd`, until a QuitRequest or the end of input.  Returns the exit
/// status (3 after a reply that said the CUDA context is lost).
int run_worker_server(int in_fd, int out_fd);

}  // namespace mlatune
