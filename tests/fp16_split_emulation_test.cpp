// Issue 15's FP16 split, its numerics emulated on the CPU before a kernel is
// written: does a 3-term FP16 split with power-of-two scaling hold the
// flagship's bound (relative L2 <= 1e-5 against float64) on every validation
// input kind (tuner/input_kinds.h) at S0-S4 and the odd shape?  No GPU.
//
// The scheme (after Ootomo & Yokota 2022, arXiv 2203.03341), per product:
//   x' = x * 2^e (e a power of two chosen below), hi = fp16(x'),
//   lo = fp16((x' - hi) * 2^11);
//   a . b ~ (sum hi_a hi_b + 2^-11 sum (hi_a lo_b + lo_a hi_b)) * 2^-(e_a + e_b)
// with the two sums in float32 (the tensor core's accumulator; modelled as
// float32 rounded to nearest, one product at a time) and lo . lo dropped.
// The scales are all local to what one block of a flash-attention kernel
// holds, so a kernel can compute them without a pass over the tensor:
//   - Q K^T: one exponent per query row and one per key row (the row's
//     largest magnitude lands in [2^13, 2^14));
//   - P V: P unscaled (0 <= p <= 1 after the max is subtracted); V one
//     exponent per column of each key tile of kKeyTile keys, the tile's
//     product scaled back in float32 before it is added to the output.
// K and V enter as float32 (a strict-fp32 expansion, as tf32x3's gives), the
// softmax is float32 with its row sum formed per key tile and then over
// tiles, as a flash-attention kernel forms it.  (One sequential float32 sum
// over the row instead put S4's row_scaled error at 1.8e-5: near-uniform
// weights over 4096 keys; the split was not the cause.)  Without the scales
// (every exponent 0) the same emulation must fail on tensor_scaled (q x 2^20
// overflows fp16): the test can tell a scheme that does not hold.
//
// The kernel built from it, f16x3_wgmma_ws (templates/mla_wgmma_f16.cuh),
// differs in two choices the tensor core made cheaper: one accumulator
// ((hi_a 2^11) hi_b + hi_a lo_b + lo_a hi_b, largest magnitudes in [8, 16)
// so that hi 2^11 stays in fp16), and V one exponent per key tile, the
// running minimum over tiles (folded into the softmax's correction of O).
// Its errors per input kind are measured on the GPU (gpu_input_kinds_test;
// docs/performance.md: worst 4.1e-6 at S0-S4 on an H100).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tuner/input_kinds.h"
#include "tuner/mla_cpu_reference.h"
#include "tests/mla_host_inputs.h"

namespace mlatune {
namespace {

constexpr int kKeyTile = 64;

struct Split {
  float hi = 0, lo = 0;  // both fp16 values
};

Split split_fp16(float x) {
  const float hi = static_cast<float>(static_cast<_Float16>(x));
  return {hi, static_cast<float>(static_cast<_Float16>((x - hi) * 2048.0f))};
}

// The exponent that puts `largest` in [2^13, 2^14) (0 for 0: nothing to scale).
int exponent_for(float largest) {
  if (!(largest > 0)) return 0;
  int e = 0;
  std::frexp(largest, &e);  // largest in [2^(e-1), 2^e)
  return 14 - e;
}

// One product chain as the tensor core would see it: float32 sums of fp16
// products, the lo terms in their own accumulator.
struct Chain {
  float big = 0, small = 0;
  void add(const Split& a, const Split& b) {
    big += a.hi * b.hi;
    small += a.hi * b.lo + a.lo * b.hi;
  }
  float value() const { return big + small * (1.0f / 2048.0f); }
};

using Inputs = test_support::MlaInputs;

// Keys or values of head (b, h) in double: [T][D].
std::vector<double> expand(const MlaShape& s, const Inputs& in, const std::vector<float>& w, std::int64_t b,
                           std::int64_t h) {
  std::vector<double> out(static_cast<std::size_t>(s.T * s.D), 0.0);
  for (std::int64_t t = 0; t < s.T; ++t)
    for (std::int64_t r = 0; r < s.R; ++r) {
      const double x = in.kv[(b * s.T + t) * s.R + r];
      for (std::int64_t d = 0; d < s.D; ++d) out[t * s.D + d] += x * w[(r * s.H + h) * s.D + d];
    }
  return out;
}

struct Errors {
  double squared_error = 0, squared_reference = 0;
  bool finite = true;
  double relative_l2() const { return finite ? std::sqrt(squared_error / squared_reference) : INFINITY; }
};

// The queries [first_row, T) of head (b, h): the emulated split against
// float64, added to `errors`.
void emulate_head(const MlaShape& s, const Inputs& in, std::int64_t b, std::int64_t h, std::int64_t first_row,
                  bool scaled, Errors& errors) {
  const std::int64_t T = s.T, D = s.D;
  const std::vector<double> k = expand(s, in, in.wk, b, h), v = expand(s, in, in.wv, b, h);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  // Keys: one exponent per row.  Values: one per column of each key tile.
  std::vector<Split> ks(static_cast<std::size_t>(T * D)), vs(static_cast<std::size_t>(T * D));
  std::vector<int> k_exp(static_cast<std::size_t>(T), 0);
  const std::int64_t tiles = (T + kKeyTile - 1) / kKeyTile;
  std::vector<int> v_exp(static_cast<std::size_t>(tiles * D), 0);
  for (std::int64_t j = 0; j < T; ++j) {
    float largest = 0;
    for (std::int64_t d = 0; d < D; ++d) largest = std::max(largest, std::abs(static_cast<float>(k[j * D + d])));
    if (scaled) k_exp[j] = exponent_for(largest);
    for (std::int64_t d = 0; d < D; ++d)
      ks[j * D + d] = split_fp16(std::ldexp(static_cast<float>(k[j * D + d]), k_exp[j]));
  }
  for (std::int64_t tile = 0; tile < tiles; ++tile)
    for (std::int64_t d = 0; d < D; ++d) {
      const std::int64_t end = std::min(T, (tile + 1) * kKeyTile);
      float largest = 0;
      for (std::int64_t j = tile * kKeyTile; j < end; ++j)
        largest = std::max(largest, std::abs(static_cast<float>(v[j * D + d])));
      const int e = scaled ? exponent_for(largest) : 0;
      v_exp[tile * D + d] = e;
      for (std::int64_t j = tile * kKeyTile; j < end; ++j)
        vs[j * D + d] = split_fp16(std::ldexp(static_cast<float>(v[j * D + d]), e));
    }

  std::vector<float> logits(static_cast<std::size_t>(T));
  std::vector<double> exact(static_cast<std::size_t>(T));
  std::vector<Split> qs(static_cast<std::size_t>(D)), ps(static_cast<std::size_t>(T));
  std::vector<float> out(static_cast<std::size_t>(D));
  std::vector<Chain> chains(static_cast<std::size_t>(D));
  for (std::int64_t t = first_row; t < T; ++t) {
    const float* q = &in.q[((b * T + t) * s.H + h) * D];
    float largest = 0;
    for (std::int64_t d = 0; d < D; ++d) largest = std::max(largest, std::abs(q[d]));
    const int q_exp = scaled ? exponent_for(largest) : 0;
    for (std::int64_t d = 0; d < D; ++d) qs[d] = split_fp16(std::ldexp(q[d], q_exp));

    // Emulated: logits, float32 softmax, P split, P V per key tile.
    float top = -INFINITY;
    for (std::int64_t j = 0; j <= t; ++j) {
      Chain c;
      for (std::int64_t d = 0; d < D; ++d) c.add(qs[d], ks[j * D + d]);
      logits[j] = std::ldexp(c.value(), -(q_exp + k_exp[j])) * scale;
      top = std::max(top, logits[j]);
    }
    // The row sum as a flash-attention kernel forms it: per key tile, then
    // over tiles (float32 throughout).
    float sum = 0, tile_sum = 0;
    for (std::int64_t j = 0; j <= t; ++j) {
      const float p = std::exp(logits[j] - top);
      tile_sum += p;
      if (j % kKeyTile == kKeyTile - 1 || j == t) {
        sum += tile_sum;
        tile_sum = 0;
      }
      ps[j] = split_fp16(p);
    }
    std::fill(out.begin(), out.end(), 0.0f);
    for (std::int64_t tile = 0; tile * kKeyTile <= t; ++tile) {
      std::fill(chains.begin(), chains.end(), Chain{});
      for (std::int64_t j = tile * kKeyTile; j <= std::min(t, (tile + 1) * kKeyTile - 1); ++j)
        for (std::int64_t d = 0; d < D; ++d) chains[d].add(ps[j], vs[j * D + d]);
      for (std::int64_t d = 0; d < D; ++d) out[d] += std::ldexp(chains[d].value(), -v_exp[tile * D + d]);
    }

    // Float64: the same definition as tuner/mla_cpu_reference.h, the scale
    // the float32 value both sides use.
    double exact_top = -INFINITY;
    for (std::int64_t j = 0; j <= t; ++j) {
      double dot = 0;
      for (std::int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[j * D + d];
      exact[j] = dot * static_cast<double>(scale);
      exact_top = std::max(exact_top, exact[j]);
    }
    double exact_sum = 0;
    for (std::int64_t j = 0; j <= t; ++j) exact_sum += (exact[j] = std::exp(exact[j] - exact_top));
    for (std::int64_t d = 0; d < D; ++d) {
      double ref = 0;
      for (std::int64_t j = 0; j <= t; ++j) ref += exact[j] * v[j * D + d];
      ref /= exact_sum;
      const double got = static_cast<double>(out[d] / sum);
      if (!std::isfinite(got)) errors.finite = false;
      errors.squared_error += (got - ref) * (got - ref);
      errors.squared_reference += ref * ref;
    }
  }
}

struct Case {
  const char* name;
  MlaShape shape;
  int heads;      // (b, h) pairs emulated, from (0, 0) in order; 0: all
  int last_rows;  // query rows emulated per head, the last ones; 0: all
};

// S0, S1 and the odd shape whole; S2-S4 on heads (0, 0) and (0, 1), their
// last 256 query rows (the longest key chains).
const Case kCases[] = {
    {"S0", {2, 32, 4, 16, 24}, 0, 0},       {"S1", {4, 256, 8, 32, 64}, 0, 0},
    {"odd", {2, 333, 8, 64, 100}, 0, 0},    {"S2", {4, 1024, 16, 64, 128}, 2, 256},
    {"S3", {2, 2048, 32, 64, 256}, 2, 256}, {"S4", {1, 4096, 16, 128, 512}, 2, 256},
};

double emulated_relative_l2(const Case& c, InputKind kind, bool scaled) {
  const MlaShape& s = c.shape;
  const Inputs in = test_support::mla_inputs(s, kind);
  Errors errors;
  const std::int64_t heads = c.heads ? c.heads : s.B * s.H;
  for (std::int64_t bh = 0; bh < heads; ++bh)
    emulate_head(s, in, bh / s.H, bh % s.H, c.last_rows ? s.T - c.last_rows : 0, scaled, errors);
  return errors.relative_l2();
}

TEST(Fp16Split, HiPlusLoKeepsAbout22BitsOverTheScaledRange) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  double worst = 0;
  for (int e = -14; e < 14; ++e)
    for (int i = 0; i < 200; ++i) {
      const float x = std::ldexp(mantissa(rng), e);
      const Split p = split_fp16(x);
      const double back = static_cast<double>(p.hi) + static_cast<double>(p.lo) / 2048.0;
      worst = std::max(worst, std::abs(back - x) / x);
    }
  EXPECT_LT(worst, std::ldexp(1.0, -21));
  EXPECT_GT(worst, std::ldexp(1.0, -26));  // it is a split, not float32
  // Outside fp16's range the unscaled split breaks: what the scales prevent.
  EXPECT_TRUE(std::isinf(split_fp16(std::ldexp(1.0f, 20)).hi));
  EXPECT_EQ(split_fp16(std::ldexp(1.0f, -30)).hi, 0.0f);
  EXPECT_EQ(exponent_for(std::ldexp(1.0f, 20)), -7);  // 2^20 -> 2^13
  EXPECT_EQ(exponent_for(std::ldexp(1.5f, -20)), 33);
  EXPECT_EQ(exponent_for(0.0f), 0);
}

TEST(Fp16Split, ScaledHoldsTheBoundOnEveryInputKindAtEveryTargetShape) {
  std::printf("%-6s", "shape");
  for (InputKind kind : all_input_kinds()) std::printf(" %14s", std::string(to_string(kind)).c_str());
  std::printf("\n");
  for (const Case& c : kCases) {
    std::printf("%-6s", c.name);
    for (InputKind kind : all_input_kinds()) {
      const double error = emulated_relative_l2(c, kind, true);
      std::printf(" %14.3g", error);
      EXPECT_LE(error, 1e-5) << c.name << " " << to_string(kind);
    }
    std::printf("\n");
  }
}

TEST(Fp16Split, UnscaledFailsWhereTensorsLeaveFp16sRange) {
  const Case& s0 = kCases[0];
  EXPECT_LE(emulated_relative_l2(s0, InputKind::normal, false), 1e-5);  // N(0, 1) fits fp16
  EXPECT_GT(emulated_relative_l2(s0, InputKind::tensor_scaled, false), 1e-5);
}

}  // namespace
}  // namespace mlatune
