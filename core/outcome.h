// What happened to one candidate (config at a shape).  Shared by the
// evaluator (tuner/) and the store (cache/); stored as its name.
#pragma once
#include <optional>
#include <string_view>

namespace mlatune {

enum class Outcome {
  ok,                     // validated and timed
  compile_error,          // NVRTC rejected it (log kept)
  launch_error,           // the GPU refused the launch (too many threads, smem, registers)
  wrong_result,           // ran, but failed validation against float64
  crashed,                // illegal address, trap, sticky error, worker died
  timeout,                // ran past its time limit
  skipped_by_constraint,  // not valid for this shape
};

std::string_view to_string(Outcome);
std::optional<Outcome> parse_outcome(std::string_view);

}  // namespace mlatune
