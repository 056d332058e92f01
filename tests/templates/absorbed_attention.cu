// A realistic kernel for compile-throughput measurements: causal attention in
// the absorbed form (multi-query attention over the latent, head size R), with
// THREADS_PER_QUERY threads cooperating on each query and QUERIES_PER_BLOCK
// queries per block.  Shape constants SHAPE_H, SHAPE_D, SHAPE_R are compiled in.
// Layouts: q[B,T,H,D], kv_latent[B,T,R], w_up_k[R,H,D], w_up_v[R,H,D], out[B,T,H,D].
#ifndef THREADS_PER_QUERY
#error "THREADS_PER_QUERY must be defined"
#endif

constexpr int H = SHAPE_H;
constexpr int D = SHAPE_D;
constexpr int R = SHAPE_R;
constexpr int TPQ = THREADS_PER_QUERY;
constexpr int QPB = QUERIES_PER_BLOCK;
constexpr int R_PER_THREAD = (R + TPQ - 1) / TPQ;

__device__ __forceinline__ float group_sum(float value) {
#pragma unroll
  for (int offset = TPQ / 2; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset, TPQ);
  return value;
}

extern "C" __global__ void __launch_bounds__(TPQ * QPB)
absorbed_attention(const float* __restrict__ q, const float* __restrict__ kv_latent,
                   const float* __restrict__ w_up_k, const float* __restrict__ w_up_v,
                   float* __restrict__ out, int B, int T, float scale) {
  const int lane = threadIdx.x % TPQ;
  const int t = blockIdx.x * QPB + threadIdx.x / TPQ;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  if (t >= T || b >= B) return;

  // qa[r] = sum_d w_up_k[r,h,d] q[b,t,h,d], each thread owning r = lane + k*TPQ.
  const float* qrow = q + ((static_cast<long>(b) * T + t) * H + h) * D;
  float qa[R_PER_THREAD];
  float acc[R_PER_THREAD];
#pragma unroll
  for (int k = 0; k < R_PER_THREAD; ++k) {
    const int r = lane + k * TPQ;
    float sum = 0.f;
    if (r < R)
      for (int d = 0; d < D; ++d) sum += w_up_k[(r * H + h) * D + d] * qrow[d];
    qa[k] = sum * scale;
    acc[k] = 0.f;
  }

  float running_max = -__int_as_float(0x7f800000);  // -infinity
  float running_sum = 0.f;
  const float* latent = kv_latent + static_cast<long>(b) * T * R;
  for (int s = 0; s <= t; ++s) {
    float partial = 0.f;
#pragma unroll
    for (int k = 0; k < R_PER_THREAD; ++k) {
      const int r = lane + k * TPQ;
      if (r < R) partial += latent[s * R + r] * qa[k];
    }
    const float logit = group_sum(partial);
    const float new_max = fmaxf(running_max, logit);
    const float correction = expf(running_max - new_max);
    const float p = expf(logit - new_max);
    running_sum = running_sum * correction + p;
#pragma unroll
    for (int k = 0; k < R_PER_THREAD; ++k) {
      const int r = lane + k * TPQ;
      acc[k] = acc[k] * correction + (r < R ? p * latent[s * R + r] : 0.f);
    }
    running_max = new_max;
  }

  // out[d] = sum_r acc[r] w_up_v[r,h,d] / running_sum, reduced over the group.
  float* orow = out + ((static_cast<long>(b) * T + t) * H + h) * D;
  for (int d = 0; d < D; ++d) {
    float partial = 0.f;
#pragma unroll
    for (int k = 0; k < R_PER_THREAD; ++k) {
      const int r = lane + k * TPQ;
      if (r < R) partial += acc[k] * w_up_v[(r * H + h) * D + d];
    }
    const float total = group_sum(partial);
    if (lane == 0) orow[d] = total / running_sum;
  }
}
