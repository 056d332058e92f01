// Shared by the libFuzzer targets in this folder.
//
// A target feeds arbitrary bytes to one parser.  Rejecting them with a clear
// error is the expected outcome: InputError (bad input) and EnvironmentError
// (what the worker protocol throws for a malformed message) are caught here.
// Anything else escapes LLVMFuzzerTestOneInput and ends the process, which
// libFuzzer reports as a crash, next to ASan/UBSan reports, timeouts and
// running out of memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"

namespace mlatune::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Runs `body`; a clean rejection of the input ends it quietly.
template <typename Body>
void rejecting_cleanly(Body&& body) {
  try {
    body();
  } catch (const InputError&) {
  } catch (const EnvironmentError&) {
  }
}

/// A finding that is not a crash: a broken promise of the API under test.
[[noreturn]] inline void violated(const std::string& what) {
  std::fprintf(stderr, "fuzz: property violated: %s\n", what.c_str());
  std::abort();
}

}  // namespace mlatune::fuzz
