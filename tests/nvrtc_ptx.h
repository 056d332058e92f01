// PTX of a compile request straight from NVRTC, one entry's part of it, and
// counting text in it: for the template tests that check which instructions
// a config compiles to.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nvrtc.h>

#include "core/compiler.h"

namespace mlatune {

/// The PTX of `request`, compiled as the Compiler would (its options); empty
/// (and a test failure) when NVRTC fails.
inline std::string ptx_of(const CompileRequest& request) {
  nvrtcProgram program = nullptr;
  EXPECT_EQ(nvrtcCreateProgram(&program, request.source.c_str(), request.source_name.c_str(), 0, nullptr, nullptr),
            NVRTC_SUCCESS);
  std::vector<std::string> options = Compiler().options(request);
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  std::string ptx;
  if (nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data()) == NVRTC_SUCCESS) {
    std::size_t size = 0;
    EXPECT_EQ(nvrtcGetPTXSize(program, &size), NVRTC_SUCCESS);
    ptx.resize(size);
    EXPECT_EQ(nvrtcGetPTX(program, ptx.data()), NVRTC_SUCCESS);
  } else {
    ADD_FAILURE() << "NVRTC failed on " << request.source_name;
  }
  EXPECT_EQ(nvrtcDestroyProgram(&program), NVRTC_SUCCESS);
  return ptx;
}

/// The body of entry `name` in a PTX module: from its .entry to the next one
/// (empty when the module has no such entry).
inline std::string entry_body(const std::string& ptx, const std::string& name) {
  const std::size_t at = ptx.find(".entry " + name + "(");
  if (at == std::string::npos) return {};
  const std::size_t next = ptx.find(".entry ", at + 1);
  return ptx.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

/// Occurrences of `what` in `text`.
inline std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace mlatune
