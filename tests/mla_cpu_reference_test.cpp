#include "tuner/mla_cpu_reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <vector>

#include "core/error.h"

namespace mlatune {

// Readable test names and failure messages for parameterized shapes.
void PrintTo(const MlaShape& s, std::ostream* os) {
  *os << "B=" << s.B << ",T=" << s.T << ",H=" << s.H << ",D=" << s.D << ",R=" << s.R;
}

namespace {

struct Inputs {
  std::vector<float> q, kv_latent, w_up_k, w_up_v;
};

// Fresh standard-normal inputs; a zero draw is redrawn so no input is zero.
Inputs random_inputs(const MlaShape& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) {
      do x = normal(rng);
      while (x == 0.0f);
    }
    return v;
  };
  Inputs in;
  in.q = fill(shape.q_elements());
  in.kv_latent = fill(shape.latent_elements());
  in.w_up_k = fill(shape.weight_elements());
  in.w_up_v = fill(shape.weight_elements());
  return in;
}

// A literal transliteration of the seed's PyTorch loop, in double:
//   for b, h, t: for s in range(t + 1): latent = kv_latent[b, s];
//     k = latent @ w_up_k[:, h]; v = latent @ w_up_v[:, h]
//     logits.append((q[b, t, h] * k).sum() * scale); values.append(v)
//   attn = softmax(stack(logits)); out[b, t, h] = (attn[:, None] * stack(values)).sum(0)
// with softmax as torch computes it: exp(x - max) / sum(exp(x - max)).
std::vector<double> seed_loop(const MlaShape& sh, const Inputs& in) {
  const std::int64_t B = sh.B, T = sh.T, H = sh.H, D = sh.D, R = sh.R;
  auto Q = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) {
    return static_cast<double>(in.q[((b * T + t) * H + h) * D + d]);
  };
  auto LAT = [&](std::int64_t b, std::int64_t s, std::int64_t r) {
    return static_cast<double>(in.kv_latent[(b * T + s) * R + r]);
  };
  auto WK = [&](std::int64_t r, std::int64_t h, std::int64_t d) {
    return static_cast<double>(in.w_up_k[(r * H + h) * D + d]);
  };
  auto WV = [&](std::int64_t r, std::int64_t h, std::int64_t d) {
    return static_cast<double>(in.w_up_v[(r * H + h) * D + d]);
  };
  std::vector<double> out(sh.q_elements(), 0.0);  // torch.zeros_like(q)
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t t = 0; t < T; ++t) {
        std::vector<double> logits;
        std::vector<std::vector<double>> values;
        for (std::int64_t s = 0; s < t + 1; ++s) {
          std::vector<double> latent(R);
          for (std::int64_t r = 0; r < R; ++r) latent[r] = LAT(b, s, r);
          std::vector<double> k(D, 0.0), v(D, 0.0);  // torch.matmul(latent, w[:, h])
          for (std::int64_t d = 0; d < D; ++d) {
            for (std::int64_t r = 0; r < R; ++r) {
              k[d] += latent[r] * WK(r, h, d);
              v[d] += latent[r] * WV(r, h, d);
            }
          }
          double dot = 0.0;  // (q[b, t, h] * k).sum()
          for (std::int64_t d = 0; d < D; ++d) dot += Q(b, t, h, d) * k[d];
          logits.push_back(dot * scale);
          values.push_back(v);
        }
        // torch.softmax(torch.stack(logits), dim=0)
        const double max_logit = *std::max_element(logits.begin(), logits.end());
        std::vector<double> attn(logits.size());
        double total = 0.0;
        for (std::size_t s = 0; s < logits.size(); ++s) {
          attn[s] = std::exp(logits[s] - max_logit);
          total += attn[s];
        }
        for (double& a : attn) a /= total;
        // (attn.unsqueeze(-1) * value_stack).sum(dim=0)
        for (std::int64_t d = 0; d < D; ++d) {
          double sum = 0.0;
          for (std::size_t s = 0; s < values.size(); ++s) sum += attn[s] * values[s][d];
          out[((b * T + t) * H + h) * D + d] = sum;
        }
      }
    }
  }
  return out;
}

std::vector<double> reference(const MlaShape& shape, const Inputs& in) {
  std::vector<double> out(shape.q_elements(), NAN);
  mla_attention_reference_cpu(shape, in.q.data(), in.kv_latent.data(), in.w_up_k.data(),
                              in.w_up_v.data(), out.data());
  return out;
}

class MlaCpuReferenceVsSeedLoop : public ::testing::TestWithParam<MlaShape> {};

TEST_P(MlaCpuReferenceVsSeedLoop, AgreesToOneInATrillion) {
  const MlaShape shape = GetParam();
  const Inputs in = random_inputs(shape, 0x5eed0000u + static_cast<std::uint64_t>(shape.T * 131 + shape.R));
  const std::vector<double> expected = seed_loop(shape, in);
  const std::vector<double> actual = reference(shape, in);
  ASSERT_EQ(actual.size(), expected.size());
  double max_diff = 0.0, max_abs = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ASSERT_TRUE(std::isfinite(actual[i])) << "element " << i;
    max_diff = std::max(max_diff, std::abs(actual[i] - expected[i]));
    max_abs = std::max(max_abs, std::abs(expected[i]));
  }
  EXPECT_LE(max_diff, 1e-12);
  EXPECT_GT(max_abs, 0.1);  // the comparison is not between near-zero outputs
}

// T = 1; R not a multiple of 4 (3, 5, 7, 6, 10); D not a multiple of 4; S0.
INSTANTIATE_TEST_SUITE_P(SmallShapes, MlaCpuReferenceVsSeedLoop,
                         ::testing::Values(MlaShape{1, 1, 1, 1, 1}, MlaShape{2, 1, 3, 8, 5},
                                           MlaShape{2, 5, 3, 4, 6}, MlaShape{1, 7, 2, 3, 7},
                                           MlaShape{3, 4, 1, 16, 10}, MlaShape{1, 9, 4, 5, 3},
                                           MlaShape{2, 32, 4, 16, 24}));

TEST(MlaCpuReference, FirstPositionIsItsOwnValue) {
  // At t = 0 the only key is s = 0, so out[b,0,h] = kv_latent[b,0] . w_up_v[:,h,:].
  const MlaShape shape{2, 6, 3, 5, 7};
  const Inputs in = random_inputs(shape, 7);
  const std::vector<double> out = reference(shape, in);
  for (std::int64_t b = 0; b < shape.B; ++b) {
    for (std::int64_t h = 0; h < shape.H; ++h) {
      for (std::int64_t d = 0; d < shape.D; ++d) {
        double v = 0.0;
        for (std::int64_t r = 0; r < shape.R; ++r)
          v += static_cast<double>(in.kv_latent[(b * shape.T) * shape.R + r]) *
               in.w_up_v[(r * shape.H + h) * shape.D + d];
        EXPECT_NEAR(out[((b * shape.T) * shape.H + h) * shape.D + d], v, 1e-12);
      }
    }
  }
}

TEST(MlaCpuReference, IsCausal) {
  // Changing the latent at position 4 changes nothing before it, and
  // changes the output from position 4 on.
  const MlaShape shape{1, 8, 2, 4, 6};
  Inputs in = random_inputs(shape, 11);
  const std::vector<double> before = reference(shape, in);
  for (std::int64_t r = 0; r < shape.R; ++r) in.kv_latent[4 * shape.R + r] += 1.5f;
  const std::vector<double> after = reference(shape, in);
  const std::size_t per_position = static_cast<std::size_t>(shape.H * shape.D);
  for (std::size_t i = 0; i < 4 * per_position; ++i) EXPECT_EQ(before[i], after[i]) << i;
  bool changed = false;
  for (std::size_t i = 4 * per_position; i < 5 * per_position; ++i) changed |= before[i] != after[i];
  EXPECT_TRUE(changed);
}

TEST(MlaCpuReference, ExplicitScaleIsUsed) {
  const MlaShape shape{1, 5, 2, 4, 3};
  const Inputs in = random_inputs(shape, 13);
  std::vector<double> half(shape.q_elements()), doubled(shape.q_elements());
  mla_attention_reference_cpu(shape, 0.5, in.q.data(), in.kv_latent.data(), in.w_up_k.data(),
                              in.w_up_v.data(), half.data());
  // Scaling q by 2 and the scale by 1/2 gives the same logits.
  Inputs scaled = in;
  for (float& x : scaled.q) x *= 2.0f;
  mla_attention_reference_cpu(shape, 0.25, scaled.q.data(), scaled.kv_latent.data(),
                              scaled.w_up_k.data(), scaled.w_up_v.data(), doubled.data());
  for (std::size_t i = 0; i < half.size(); ++i) EXPECT_NEAR(half[i], doubled[i], 1e-12) << i;
  // And the default scale, 1/sqrt(4) = 0.5, is the one used without a scale.
  EXPECT_EQ(reference(shape, in), half);
}

TEST(MlaCpuReference, RejectsNonPositiveDimensions) {
  const Inputs in = random_inputs(MlaShape{1, 1, 1, 1, 1}, 1);
  std::vector<double> out(1);
  for (const MlaShape& bad : {MlaShape{0, 1, 1, 1, 1}, MlaShape{1, 1, 1, 1, -2}, MlaShape{1, 0, 1, 1, 1}}) {
    EXPECT_THROW(mla_attention_reference_cpu(bad, in.q.data(), in.kv_latent.data(),
                                             in.w_up_k.data(), in.w_up_v.data(), out.data()),
                 InputError);
  }
}

}  // namespace
}  // namespace mlatune
