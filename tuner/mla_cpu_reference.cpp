#include "tuner/mla_cpu_reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace mlatune {

std::size_t MlaShape::q_elements() const {
  return static_cast<std::size_t>(B * T * H * D);
}
std::size_t MlaShape::latent_elements() const { return static_cast<std::size_t>(B * T * R); }
std::size_t MlaShape::weight_elements() const { return static_cast<std::size_t>(R * H * D); }

namespace {

void check_shape(const MlaShape& s) {
  if (s.B <= 0 || s.T <= 0 || s.H <= 0 || s.D <= 0 || s.R <= 0) {
    throw InputError(fmt::format(
        "MLA shape B={},T={},H={},D={},R={}: every dimension must be positive", s.B, s.T, s.H,
        s.D, s.R));
  }
}

}  // namespace

void mla_attention_reference_cpu(const MlaShape& shape, const float* q, const float* kv_latent,
                                 const float* w_up_k, const float* w_up_v, double* out) {
  check_shape(shape);
  mla_attention_reference_cpu(shape, 1.0 / std::sqrt(static_cast<double>(shape.D)), q, kv_latent,
                              w_up_k, w_up_v, out);
}

void mla_attention_reference_cpu(const MlaShape& shape, double scale, const float* q,
                                 const float* kv_latent, const float* w_up_k,
                                 const float* w_up_v, double* out) {
  check_shape(shape);
  const auto [B, T, H, D, R] = shape;
  // Keys and values of one (b, h) for every position: T x D each.
  std::vector<double> keys(static_cast<std::size_t>(T * D));
  std::vector<double> values(keys.size());
  std::vector<double> weights(static_cast<std::size_t>(T));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t s = 0; s < T; ++s) {
        const float* latent = kv_latent + (b * T + s) * R;
        for (std::int64_t d = 0; d < D; ++d) {
          double k = 0.0, v = 0.0;
          for (std::int64_t r = 0; r < R; ++r) {
            k += static_cast<double>(latent[r]) * w_up_k[(r * H + h) * D + d];
            v += static_cast<double>(latent[r]) * w_up_v[(r * H + h) * D + d];
          }
          keys[s * D + d] = k;
          values[s * D + d] = v;
        }
      }
      for (std::int64_t t = 0; t < T; ++t) {
        const float* query = q + ((b * T + t) * H + h) * D;
        double max_logit = -INFINITY;
        for (std::int64_t s = 0; s <= t; ++s) {
          double logit = 0.0;
          for (std::int64_t d = 0; d < D; ++d) logit += static_cast<double>(query[d]) * keys[s * D + d];
          weights[s] = logit * scale;
          max_logit = std::max(max_logit, weights[s]);
        }
        double total = 0.0;
        for (std::int64_t s = 0; s <= t; ++s) {
          weights[s] = std::exp(weights[s] - max_logit);
          total += weights[s];
        }
        double* o = out + ((b * T + t) * H + h) * D;
        for (std::int64_t d = 0; d < D; ++d) {
          double sum = 0.0;
          for (std::int64_t s = 0; s <= t; ++s) sum += weights[s] * values[s * D + d];
          o[d] = sum / total;
        }
      }
    }
  }
}

}  // namespace mlatune
