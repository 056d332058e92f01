// The flagship space with its prologue compiled apart: the shipped file with
// tests/data/flagship_prologue_apart.yaml inserted at the end of its
// prologue: section.  For prologue_apart_test and bench_compile.
#pragma once
#include <filesystem>
#include <string>

#include "core/embedded.h"
#include "core/error.h"
#include "core/space.h"

namespace mlatune::test_support {

inline SearchSpace flagship_with_prologue_apart() {
  const std::filesystem::path tests = MLATUNE_TEST_DATA_DIR;
  const std::filesystem::path spaces = tests.parent_path() / "search_spaces";
  std::string text = load_text_file(spaces / "fused_mla_attention.yaml").text;
  const std::size_t at = text.find("\ntolerance:");
  if (at == std::string::npos || text.find("\nprologue:") > at)
    throw InternalError("fused_mla_attention.yaml: no prologue: section before tolerance:");
  text.insert(at, "\n" + load_text_file(tests / "data" / "flagship_prologue_apart.yaml").text);
  return SearchSpace::parse(text, "fused_mla_attention.yaml + flagship_prologue_apart.yaml", spaces);
}

}  // namespace mlatune::test_support
