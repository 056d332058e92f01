// CallSignature: what a caller of the generic C ABI passes for a family (the
// fused MLA space, with scalars and a workspace it must not see), and the
// checks of shapes and buffer sizes that the C ABI reports to its callers.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cache/call_signature.h"
#include "core/error.h"
#include "core/space.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
const fs::path mla_space_file = fs::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";

std::string input_error_of(const auto& call) {
  try {
    call();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no InputError";
}

class CallSignatureTest : public ::testing::Test {
 protected:
  SearchSpace space_ = SearchSpace::load(mla_space_file);
  CallSignature signature_{space_};
};

TEST_F(CallSignatureTest, BuffersAreTheInputsAndOutputsInLaunchOrder) {
  EXPECT_EQ(signature_.shape_variables(), (std::vector<std::string>{"B", "T", "H", "D", "R"}));
  EXPECT_EQ(signature_.shape_variable_count(), 5u);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < signature_.buffer_count(); ++i) names.push_back(signature_.buffer(i).name);
  // kv_ws (a workspace) and B, T, scale (scalars) are the dispatcher's.
  EXPECT_EQ(names, (std::vector<std::string>{"q", "kv_latent", "w_up_k", "w_up_v", "out"}));
  EXPECT_EQ(signature_.buffer(4).role, ArgumentRole::output);
  EXPECT_THROW(signature_.buffer(5), std::out_of_range);
}

TEST_F(CallSignatureTest, ShapesNeedOnePositiveValuePerVariable) {
  const std::int64_t s0[5] = {2, 32, 4, 16, 24};
  EXPECT_EQ(signature_.shape(s0), (Shape{{2, 32, 4, 16, 24}}));
  EXPECT_EQ(input_error_of([&] { signature_.shape(std::span(s0, 4)); }),
            "fused_mla_attention takes 5 shape values (B, T, H, D, R); 4 given");
  const std::int64_t zero_t[5] = {2, 0, 4, 16, 24};
  EXPECT_EQ(input_error_of([&] { signature_.shape(zero_t); }),
            "fused_mla_attention: shape variable T is 0; it must be positive");
  const std::int64_t negative_r[5] = {2, 3, 4, 16, -1};
  EXPECT_NE(input_error_of([&] { signature_.shape(negative_r); }).find("R is -1"), std::string::npos);
}

TEST_F(CallSignatureTest, BytesAndElementsFollowTheArgumentShapes) {
  const Shape s{{2, 33, 4, 16, 24}};
  const std::int64_t q = 2 * 33 * 4 * 16, latent = 2 * 33 * 24, w = 24 * 4 * 16;
  EXPECT_EQ(signature_.buffer_bytes(s), (std::vector<std::int64_t>{4 * q, 4 * latent, 4 * w, 4 * w, 4 * q}));
  EXPECT_EQ(signature_.buffer_elements(1, s), latent);
  EXPECT_EQ(signature_.buffer_elements(4, s), q);
}

TEST_F(CallSignatureTest, AShortBufferIsNamedWithBothSizes) {
  const std::int64_t values[5] = {2, 33, 4, 16, 24};
  const std::vector<std::int64_t> needed = signature_.buffer_bytes(signature_.shape(values));
  std::vector<std::size_t> given(needed.begin(), needed.end());
  EXPECT_NO_THROW(signature_.check_bytes(values, needed, given));
  given[0] += 1000;  // larger than needed is fine
  EXPECT_NO_THROW(signature_.check_bytes(values, needed, given));
  given[2] -= 1;
  EXPECT_EQ(input_error_of([&] { signature_.check_bytes(values, needed, given); }),
            "fused_mla_attention: buffer w_up_k (float32 input) holds 6143 bytes; 6144 needed at "
            "B=2,T=33,H=4,D=16,R=24");
  given.pop_back();
  EXPECT_EQ(input_error_of([&] { signature_.check_bytes(values, needed, given); }),
            "fused_mla_attention takes 5 buffers; 4 given");
}

}  // namespace
}  // namespace mlatune
