// Parameters of shape-parameterized tests: a shape's name (the test's
// suffix) and its text, and the flagship's target shapes S0-S4
// (../shared/TARGETS.md), so that every suite that runs them names and
// spells them alike.
#pragma once
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mlatune {

struct NamedShape {
  const char* name;
  const char* text;
};

/// The test-name suffix of a NamedShape parameter (INSTANTIATE_TEST_SUITE_P's
/// last argument).
inline std::string shape_name(const ::testing::TestParamInfo<NamedShape>& info) { return info.param.name; }

inline const std::filesystem::path flagship_space_file =
    std::filesystem::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";

/// S0-S4, then `more` (for ::testing::ValuesIn).
inline std::vector<NamedShape> target_shapes_and(std::initializer_list<NamedShape> more = {}) {
  std::vector<NamedShape> shapes{{"S0", "B=2,T=32,H=4,D=16,R=24"},
                                 {"S1", "B=4,T=256,H=8,D=32,R=64"},
                                 {"S2", "B=4,T=1024,H=16,D=64,R=128"},
                                 {"S3", "B=2,T=2048,H=32,D=64,R=256"},
                                 {"S4", "B=1,T=4096,H=16,D=128,R=512"}};
  shapes.insert(shapes.end(), more.begin(), more.end());
  return shapes;
}

}  // namespace mlatune
