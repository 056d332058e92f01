// Validation input kinds (tuner/input_kinds.h): what each does to N(0, 1)
// data, and that each keeps fused MLA attention well-conditioned in float32
// (a plain float32 computation stays near the float64 CPU reference, as on
// normal inputs).  No GPU.
#include "tuner/input_kinds.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/space.h"
#include "tuner/evaluator.h"
#include "tuner/mla_cpu_reference.h"
#include "tests/mla_host_inputs.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

using test_support::mla_inputs;
using test_support::MlaInputs;
using test_support::normal_data;

std::vector<float> shaped(InputKind kind, std::string_view name, std::vector<std::int64_t> extents,
                          const std::vector<float>& original, std::uint64_t seed = 11) {
  std::vector<float> data = original;
  apply_input_kind(kind, HostInput{name, std::move(extents), data}, seed);
  return data;
}

TEST(InputKinds, ListsParseAndUnknownNamesAreNamed) {
  EXPECT_EQ(parse_input_kinds("normal,near_ties,normal"),
            (std::vector<InputKind>{InputKind::normal, InputKind::near_ties}));
  EXPECT_EQ(all_input_kinds().size(), 5u);
  try {
    parse_input_kinds("normal,huge");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown input kind 'huge'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("row_scaled"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_input_kinds(""), InputError);
}

TEST(InputKinds, TheFlagshipGetsEveryKindOtherSpacesNormal) {
  const fs::path source(MLATUNE_SOURCE_DIR);
  const SearchSpace flagship = SearchSpace::load(source / "search_spaces" / "fused_mla_attention.yaml");
  const SearchSpace rms = SearchSpace::load(source / "search_spaces" / "rms_norm.yaml");
  ::unsetenv("MLATUNE_INPUT_KINDS");
  EXPECT_TRUE(attention_shaped(flagship));
  EXPECT_EQ(input_kinds_for(flagship), all_input_kinds());
  EXPECT_EQ(input_kinds_for(rms), std::vector<InputKind>{InputKind::normal});
  ::setenv("MLATUNE_INPUT_KINDS", "row_scaled", 1);
  EXPECT_EQ(input_kinds_for(flagship), std::vector<InputKind>{InputKind::row_scaled});
  ::setenv("MLATUNE_INPUT_KINDS", "bogus", 1);
  EXPECT_THROW(input_kinds_for(flagship), InputError);
  ::unsetenv("MLATUNE_INPUT_KINDS");
}

TEST(InputKinds, TensorScaledScalesWholeTensorsByPowersOfTwo) {
  const std::vector<float> x = normal_data(256, 1);
  const std::vector<float> q = shaped(InputKind::tensor_scaled, "q", {4, 64}, x);
  const std::vector<float> kv = shaped(InputKind::tensor_scaled, "kv_latent", {4, 64}, x);
  const std::vector<float> wv = shaped(InputKind::tensor_scaled, "w_up_v", {4, 64}, x);
  EXPECT_EQ(shaped(InputKind::tensor_scaled, "w_up_k", {4, 64}, x), x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(q[i], std::ldexp(x[i], 20));
    EXPECT_EQ(kv[i], std::ldexp(x[i], -20));
    EXPECT_EQ(wv[i], std::ldexp(x[i], -20));
  }
}

TEST(InputKinds, RowScaledScalesEachRowDownByItsOwnPowerOfTwo) {
  const std::int64_t rows = 2000, length = 8;
  const std::vector<float> x = normal_data(rows * length, 2);
  const std::vector<float> q = shaped(InputKind::row_scaled, "q", {rows, length}, x);
  std::set<int> exponents;
  for (std::int64_t r = 0; r < rows; ++r) {
    const int e = static_cast<int>(std::lround(std::log2(q[r * length] / x[r * length])));
    exponents.insert(e);
    for (std::int64_t i = 0; i < length; ++i) EXPECT_EQ(q[r * length + i], std::ldexp(x[r * length + i], e));
  }
  EXPECT_EQ(*exponents.begin(), -20);
  EXPECT_EQ(*exponents.rbegin(), 0);
  EXPECT_EQ(exponents.size(), 21u);
  EXPECT_EQ(shaped(InputKind::row_scaled, "q", {rows, length}, x, 11), q);  // deterministic
  EXPECT_NE(shaped(InputKind::row_scaled, "q", {rows, length}, x, 12), q);
  EXPECT_EQ(shaped(InputKind::row_scaled, "w_up_k", {rows, length}, x), x);
}

TEST(InputKinds, OutlierRowsAreTheFirstOfEachSequenceAndAFewOthers) {
  const std::int64_t batches = 4, positions = 1024, length = 4;
  const std::vector<float> x = normal_data(batches * positions * length, 3);
  const std::vector<float> kv = shaped(InputKind::outlier_rows, "kv_latent", {batches, positions, length}, x);
  int others = 0;
  for (std::int64_t r = 0; r < batches * positions; ++r) {
    const bool large = kv[r * length] == std::ldexp(x[r * length], 3);
    if (r % positions == 0) {
      EXPECT_TRUE(large) << r;
    }
    if (r % positions != 0 && large) ++others;
    for (std::int64_t i = 1; i < length; ++i)
      EXPECT_EQ(kv[r * length + i], large ? std::ldexp(x[r * length + i], 3) : x[r * length + i]);
  }
  EXPECT_GT(others, 4096 / 64 / 2);
  EXPECT_LT(others, 4096 / 64 * 2);
  EXPECT_EQ(shaped(InputKind::outlier_rows, "q", {batches, positions, length}, x), x);
}

TEST(InputKinds, NearTiesPairKeyRowsWithinTwoToTheMinus20) {
  const std::int64_t rows = 64, length = 16;
  const std::vector<float> x = normal_data(rows * length, 4);
  const std::vector<float> kv = shaped(InputKind::near_ties, "kv_latent", {1, rows, length}, x);
  for (std::int64_t r = 0; r < rows; r += 2)
    for (std::int64_t i = 0; i < length; ++i) {
      EXPECT_EQ(kv[r * length + i], x[r * length + i]);
      const double ratio = static_cast<double>(kv[(r + 1) * length + i]) / kv[r * length + i];
      EXPECT_NEAR(std::abs(ratio - 1), std::ldexp(1.0, -20), std::ldexp(1.0, -23));
    }
}

// ---- conditioning: a plain float32 computation against the float64 reference ----

/// Keys or values of (b, h) expanded in float32: [T][D].
std::vector<float> expand(const MlaShape& s, const MlaInputs& in, const std::vector<float>& w, std::int64_t b,
                          std::int64_t h) {
  std::vector<float> out(static_cast<std::size_t>(s.T * s.D), 0.0f);
  for (std::int64_t t = 0; t < s.T; ++t)
    for (std::int64_t r = 0; r < s.R; ++r)
      for (std::int64_t d = 0; d < s.D; ++d)
        out[t * s.D + d] += in.kv[(b * s.T + t) * s.R + r] * w[(r * s.H + h) * s.D + d];
  return out;
}

/// One query's output in float32: logits, max-subtracted softmax, weighted values.
void attend(const MlaShape& s, const float* q, const std::vector<float>& k, const std::vector<float>& v,
            std::int64_t t, double* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  std::vector<float> logits(static_cast<std::size_t>(t + 1));
  float top = -INFINITY;
  for (std::int64_t j = 0; j <= t; ++j) {
    float dot = 0.0f;
    for (std::int64_t d = 0; d < s.D; ++d) dot += q[d] * k[j * s.D + d];
    logits[j] = dot * scale;
    top = std::max(top, logits[j]);
  }
  float sum = 0.0f;
  std::vector<float> acc(static_cast<std::size_t>(s.D), 0.0f);
  for (std::int64_t j = 0; j <= t; ++j) {
    const float p = std::exp(logits[j] - top);
    sum += p;
    for (std::int64_t d = 0; d < s.D; ++d) acc[d] += p * v[j * s.D + d];
  }
  for (std::int64_t d = 0; d < s.D; ++d) out[d] = acc[d] / sum;
}

std::vector<double> float32_mla(const MlaShape& s, const MlaInputs& in) {
  std::vector<double> out(s.q_elements());
  for (std::int64_t b = 0; b < s.B; ++b)
    for (std::int64_t h = 0; h < s.H; ++h) {
      const std::vector<float> k = expand(s, in, in.wk, b, h), v = expand(s, in, in.wv, b, h);
      for (std::int64_t t = 0; t < s.T; ++t) {
        const std::int64_t row = ((b * s.T + t) * s.H + h) * s.D;
        attend(s, &in.q[row], k, v, t, &out[row]);
      }
    }
  return out;
}

double relative_l2(const std::vector<double>& out, const std::vector<double>& ref) {
  double error = 0, norm = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    error += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(error / norm);
}

TEST(InputKinds, EveryKindStaysWellConditionedInFloat32) {
  const MlaShape shape{2, 96, 2, 32, 256};
  double normal_error = 0;
  for (InputKind kind : all_input_kinds()) {
    const MlaInputs in = mla_inputs(shape, kind);
    std::vector<double> reference(shape.q_elements());
    mla_attention_reference_cpu(shape, in.q.data(), in.kv.data(), in.wk.data(), in.wv.data(), reference.data());
    double norm = 0;
    for (double x : reference) {
      ASSERT_TRUE(std::isfinite(x)) << to_string(kind);
      norm += x * x;
    }
    ASSERT_GT(norm, 0.0) << to_string(kind);
    const double error = relative_l2(float32_mla(shape, in), reference);
    std::printf("%-14s plain float32 vs float64 reference: relative L2 %.3g\n", std::string(to_string(kind)).c_str(),
                error);
    if (kind == InputKind::normal) normal_error = error;
    EXPECT_LT(error, 1e-5) << to_string(kind);
    EXPECT_LT(error, 8 * normal_error) << to_string(kind);
  }
}

TEST(InputKinds, TheWorstErrorIsKeptPerKindInFirstSeenOrder) {
  std::vector<KindErrors> per_kind;
  auto stats = [](double rel, double abs) {
    ValidationStats s;
    s.relative_l2 = rel;
    s.max_abs = abs;
    return s;
  };
  merge_kind_errors(per_kind, InputKind::row_scaled, stats(2e-6, 1e-5));
  merge_kind_errors(per_kind, InputKind::normal, stats(1e-6, 3e-6));
  merge_kind_errors(per_kind, InputKind::row_scaled, stats(1e-6, 4e-5));
  merge_kind_errors(per_kind, InputKind::normal, stats(5e-7, 1e-6));
  ASSERT_EQ(per_kind.size(), 2u);
  EXPECT_EQ(per_kind[0].kind, InputKind::row_scaled);
  EXPECT_EQ(per_kind[0].relative_l2, 2e-6);
  EXPECT_EQ(per_kind[0].max_abs, 4e-5);
  EXPECT_EQ(per_kind[1].kind, InputKind::normal);
  EXPECT_EQ(per_kind[1].relative_l2, 1e-6);
  EXPECT_EQ(per_kind[1].max_abs, 3e-6);
}

}  // namespace
}  // namespace mlatune
