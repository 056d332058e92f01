// CPU float64 reference of fused MLA attention, for tests and small shapes.
//
// Inputs are float32, contiguous: q[B,T,H,D], kv_latent[B,T,R],
// w_up_k[R,H,D], w_up_v[R,H,D]; the output out[B,T,H,D] is float64.  For
// every (b, t, h), over the causal keys s <= t:
//   k_s = kv_latent[b,s] . w_up_k[:,h,:],  v_s = kv_latent[b,s] . w_up_v[:,h,:]
//   out[b,t,h] = sum_s softmax_s(q[b,t,h] . k_s * scale) v_s
// It follows this definition literally (keys and values expanded in double,
// two-pass max-subtracted softmax), so it shares no algebra with the kernels.
// Cost O(B*H*T*(R*D + T*D)): meant for shapes up to a few thousand queries.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlatune {

/// The problem shape of fused MLA attention (every dimension positive).
struct MlaShape {
  std::int64_t B = 0;  ///< batch
  std::int64_t T = 0;  ///< sequence length (queries and keys)
  std::int64_t H = 0;  ///< heads
  std::int64_t D = 0;  ///< head dimension
  std::int64_t R = 0;  ///< latent rank

  std::size_t q_elements() const;        ///< B*T*H*D, also the output's size
  std::size_t latent_elements() const;   ///< B*T*R
  std::size_t weight_elements() const;   ///< R*H*D, each of w_up_k and w_up_v
};

/// The reference output with scale = 1 / sqrt(D) (computed in double).
/// Throws InputError when a dimension of `shape` is not positive.
void mla_attention_reference_cpu(const MlaShape& shape, const float* q, const float* kv_latent,
                                 const float* w_up_k, const float* w_up_v, double* out);

/// The reference output with an explicit logit scale, e.g. the float32 value
/// a kernel was given, so both sides use the same scale.
void mla_attention_reference_cpu(const MlaShape& shape, double scale, const float* q,
                                 const float* kv_latent, const float* w_up_k,
                                 const float* w_up_v, double* out);

}  // namespace mlatune
