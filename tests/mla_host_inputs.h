// Host data for CPU tests of the flagship's numerics: N(0, 1) floats, and
// the four float32 inputs of fused MLA attention (q, kv_latent, w_up_k,
// w_up_v; layouts as tuner/mla_cpu_reference.h says) shaped by a
// validation input kind (tuner/input_kinds.h), each from its own fixed seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "tuner/input_kinds.h"
#include "tuner/mla_cpu_reference.h"

namespace mlatune::test_support {

inline std::vector<float> normal_data(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> data(n);
  for (float& x : data) x = normal(rng);
  return data;
}

struct MlaInputs {
  std::vector<float> q, kv, wk, wv;
};

inline MlaInputs mla_inputs(const MlaShape& s, InputKind kind) {
  MlaInputs in{normal_data(s.q_elements(), 5), normal_data(s.latent_elements(), 6),
               normal_data(s.weight_elements(), 7), normal_data(s.weight_elements(), 8)};
  apply_input_kind(kind, HostInput{"q", {s.B, s.T, s.H, s.D}, in.q}, 21);
  apply_input_kind(kind, HostInput{"kv_latent", {s.B, s.T, s.R}, in.kv}, 22);
  apply_input_kind(kind, HostInput{"w_up_k", {s.R, s.H, s.D}, in.wk}, 23);
  apply_input_kind(kind, HostInput{"w_up_v", {s.R, s.H, s.D}, in.wv}, 24);
  return in;
}

}  // namespace mlatune::test_support
