// The flagship space with its prologue compiled apart: the shipped file with
// tests/data/flagship_prologue_apart.yaml inserted at the end of its
// prologue: section.  For prologue_apart_test and bench_compile.
#pragma once
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/space.h"

namespace mlatune::test_support {

inline std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw EnvironmentError("cannot read " + path.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline SearchSpace flagship_with_prologue_apart() {
  const std::filesystem::path tests = MLATUNE_TEST_DATA_DIR;
  const std::filesystem::path spaces = tests.parent_path() / "search_spaces";
  std::string text = file_text(spaces / "fused_mla_attention.yaml");
  const std::size_t at = text.find("\ntolerance:");
  if (at == std::string::npos || text.find("\nprologue:") > at)
    throw InternalError("fused_mla_attention.yaml: no prologue: section before tolerance:");
  text.insert(at, "\n" + file_text(tests / "data" / "flagship_prologue_apart.yaml"));
  return SearchSpace::parse(text, "fused_mla_attention.yaml + flagship_prologue_apart.yaml", spaces);
}

}  // namespace mlatune::test_support
