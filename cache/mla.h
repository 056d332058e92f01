// The flagship's typed entry point: fused MLA attention through a Dispatcher
// opened on the fused_mla_attention space, with float32 device pointers.
//
//   q         [B, T, H, D]    kv_latent [B, T, R]
//   w_up_k    [R, H, D]       w_up_v    [R, H, D]     out [B, T, H, D]
#pragma once
#include "cache/dispatcher.h"

namespace mlatune {

/// A Dispatcher checked once to be the fused MLA family: shape variables
/// B, T, H, D, R and buffers q, kv_latent, w_up_k, w_up_v, out in that order.
class MlaAttention {
 public:
  /// Throws InputError naming what differs when the space is another family.
  explicit MlaAttention(Dispatcher& dispatcher);

  /// The shape for the five sizes; InputError unless all are positive.
  Shape shape(int B, int T, int H, int D, int R) const;

  /// Launches on `stream` (a cudaStream_t; null = default stream).  Errors as
  /// Dispatcher::launch; asynchronous.
  void operator()(const float* q, const float* kv_latent, const float* w_up_k, const float* w_up_v,
                  float* out, int B, int T, int H, int D, int R, void* stream) const;

  Dispatcher& dispatcher() const { return *dispatcher_; }

 private:
  Dispatcher* dispatcher_;
};

/// One-off form of MlaAttention (checks the space on every call).
void fused_mla_attention(Dispatcher& dispatcher, const float* q, const float* kv_latent,
                         const float* w_up_k, const float* w_up_v, float* out, int B, int T, int H,
                         int D, int R, void* stream);

}  // namespace mlatune
