/* Typed C entry points for fused MLA attention, on top of the generic C ABI
 * of cache/c_api.h (open, close, errors, statuses and the family-generic
 * launch come from there).  They fail with MLATUNE_INVALID_ARGUMENT on a
 * dispatcher opened on another family's space. */
#ifndef MLATUNE_MLA_C_API_H
#define MLATUNE_MLA_C_API_H

#include "cache/c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fused MLA attention on float32 device pointers, launched asynchronously on
 * `stream` (a cudaStream_t; NULL = the default stream):
 * q [B,T,H,D], kv_latent [B,T,R], w_up_k and w_up_v [R,H,D], out [B,T,H,D]. */
int mlatune_fused_mla_attention(mlatune_dispatcher* dispatcher, const float* q, const float* kv_latent,
                                const float* w_up_k, const float* w_up_v, float* out, int B, int T,
                                int H, int D, int R, void* stream);

/* mlatune_choice_for at the fused MLA shape (B, T, H, D, R). */
int mlatune_choice(mlatune_dispatcher* dispatcher, int B, int T, int H, int D, int R, char* buffer,
                   size_t size);

#ifdef __cplusplus
}
#endif

#endif /* MLATUNE_MLA_C_API_H */
