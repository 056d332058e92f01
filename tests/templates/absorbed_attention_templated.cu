// tests/templates/absorbed_attention.cu with its two tunable parameters as
// template arguments instead of -D definitions, so that one NVRTC program can
// hold several configs (nvrtcAddNameExpression per instantiation).
// bench_compile compares it with one program per config: what the front end
// costs per program, and whether sharing it pays.  Shape constants SHAPE_H,
// SHAPE_D, SHAPE_R stay -D definitions (one program per shape).
constexpr int H = SHAPE_H;
constexpr int D = SHAPE_D;
constexpr int R = SHAPE_R;

template <int TPQ>
__device__ __forceinline__ float group_sum(float value) {
#pragma unroll
  for (int offset = TPQ / 2; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset, TPQ);
  return value;
}

template <int TPQ, int QPB>
__global__ void __launch_bounds__(TPQ * QPB)
absorbed_attention(const float* __restrict__ q, const float* __restrict__ kv_latent,
                   const float* __restrict__ w_up_k, const float* __restrict__ w_up_v,
                   float* __restrict__ out, int B, int T, float scale) {
  constexpr int kPerThread = (R + TPQ - 1) / TPQ;
  const int lane = threadIdx.x % TPQ;
  const int t = blockIdx.x * QPB + threadIdx.x / TPQ;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  if (t >= T || b >= B) return;

  const float* qrow = q + ((static_cast<long>(b) * T + t) * H + h) * D;
  float qa[kPerThread];
  float acc[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
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
    for (int k = 0; k < kPerThread; ++k) {
      const int r = lane + k * TPQ;
      if (r < R) partial += latent[s * R + r] * qa[k];
    }
    const float logit = group_sum<TPQ>(partial);
    const float new_max = fmaxf(running_max, logit);
    const float correction = expf(running_max - new_max);
    const float p = expf(logit - new_max);
    running_sum = running_sum * correction + p;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int r = lane + k * TPQ;
      acc[k] = acc[k] * correction + (r < R ? p * latent[s * R + r] : 0.f);
    }
    running_max = new_max;
  }

  float* orow = out + ((static_cast<long>(b) * T + t) * H + h) * D;
  for (int d = 0; d < D; ++d) {
    float partial = 0.f;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int r = lane + k * TPQ;
      if (r < R) partial += acc[k] * w_up_v[(r * H + h) * D + d];
    }
    const float total = group_sum<TPQ>(partial);
    if (lane == 0) orow[d] = total / running_sum;
  }
}
