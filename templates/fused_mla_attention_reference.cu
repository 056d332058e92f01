// Float64 reference for fused MLA attention, used by validation at every
// shape.  Same arguments as the tuned kernel except that `out` is double (and
// the workspace `kv_ws`, which the reference neither needs nor reads).
//
// It computes the absorbed rewrite in double, which is exact algebra:
//   qa  = w_up_k[:,h,:] q                          (R doubles, shared memory)
//   p_s = softmax_{s<=t}(kv_latent[b,s] . qa * scale)   (online, in double)
//   out = (sum_s p_s kv_latent[b,s]) . w_up_v[:,h,:]
// One block of kThreads threads per (b,t,h) query at a time; the grid
// strides over all B*T*H queries, so any grid size works.  Keys are taken in
// chunks of kThreads: each warp computes whole logits (lanes split R,
// coalesced), then the block turns the chunk into weights and every thread
// accumulates its own latent columns.  `scale` is the kernel's float argument
// widened to double, so both sides use the same scale.
//
// Compiled in: SHAPE_H, SHAPE_D (<= 256 by design, any value works), SHAPE_R.
// Launch: block [256, 1, 1] (anything else traps), no dynamic shared memory.

#if !defined(SHAPE_H) || !defined(SHAPE_D) || !defined(SHAPE_R)
#error "fused_mla_attention_reference needs SHAPE_H, SHAPE_D and SHAPE_R"
#endif

namespace mla_ref {

constexpr int kH = SHAPE_H;
constexpr int kD = SHAPE_D;
constexpr int kR = SHAPE_R;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = kThreads;                         // keys per chunk
constexpr int kRPerThread = (kR + kThreads - 1) / kThreads;  // latent columns per thread

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace mla_ref

extern "C" __global__ void __launch_bounds__(256, 1)
fused_mla_attention_reference(const float* __restrict__ q, const float* __restrict__ kv_latent,
                              const float* __restrict__ w_up_k, const float* __restrict__ w_up_v,
                              double* __restrict__ out, const float* __restrict__ kv_ws, int B,
                              int T, float scale) {
  using namespace mla_ref;
  __shared__ double q_s[kD];
  __shared__ double vec_s[kR];       // qa, later the normalized accumulator
  __shared__ double weight_s[kChunk];  // logits, then weights, of one chunk

  if (blockDim.x != kThreads || blockDim.y != 1 || blockDim.z != 1) __trap();
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const double dscale = static_cast<double>(scale);
  const double neg_inf = __longlong_as_double(0xfff0000000000000ll);

  const long long queries = static_cast<long long>(B) * T * kH;
  for (long long query = blockIdx.x; query < queries; query += gridDim.x) {
    const int h = static_cast<int>(query % kH);
    const long long bt = query / kH;  // b * T + t
    const int t = static_cast<int>(bt % T);
    const int b = static_cast<int>(bt / T);
    const float* lat_b = kv_latent + static_cast<long long>(b) * T * kR;

    __syncthreads();  // the previous query is done with the shared arrays
    for (int d = tid; d < kD; d += kThreads) q_s[d] = q[query * kD + d];
    __syncthreads();
    for (int r = tid; r < kR; r += kThreads) {
      const float* wk = w_up_k + (static_cast<long long>(r) * kH + h) * kD;
      double sum = 0.0;
      for (int d = 0; d < kD; ++d) sum += static_cast<double>(wk[d]) * q_s[d];
      vec_s[r] = sum;
    }
    __syncthreads();

    double m = neg_inf;  // identical in every thread
    double l = 0.0;
    double acc[kRPerThread];
#pragma unroll
    for (int i = 0; i < kRPerThread; ++i) acc[i] = 0.0;

    for (int s0 = 0; s0 <= t; s0 += kChunk) {
      const int n = min(kChunk, t + 1 - s0);
      for (int j = warp; j < n; j += kWarps) {
        const float* row = lat_b + static_cast<long long>(s0 + j) * kR;
        double part = 0.0;
        for (int r = lane; r < kR; r += 32) part += static_cast<double>(row[r]) * vec_s[r];
        part = warp_sum(part);
        if (lane == 0) weight_s[j] = part * dscale;
      }
      __syncthreads();
      double m_new = m;
      for (int j = 0; j < n; ++j) m_new = fmax(m_new, weight_s[j]);
      __syncthreads();  // every thread has read the logits
      if (tid < n) weight_s[tid] = exp(weight_s[tid] - m_new);
      __syncthreads();
      const double corr = exp(m - m_new);  // m == -inf gives 0
      double chunk_sum = 0.0;
      for (int j = 0; j < n; ++j) chunk_sum += weight_s[j];
      l = l * corr + chunk_sum;
      m = m_new;
#pragma unroll
      for (int i = 0; i < kRPerThread; ++i) {
        const int r = tid + i * kThreads;
        if (r < kR) {
          double a = acc[i] * corr;
          for (int j = 0; j < n; ++j)
            a += weight_s[j] * static_cast<double>(lat_b[static_cast<long long>(s0 + j) * kR + r]);
          acc[i] = a;
        }
      }
      __syncthreads();  // weight_s is rewritten by the next chunk
    }

#pragma unroll
    for (int i = 0; i < kRPerThread; ++i) {
      const int r = tid + i * kThreads;
      if (r < kR) vec_s[r] = acc[i] / l;  // qa is no longer needed
    }
    __syncthreads();
    for (int d = tid; d < kD; d += kThreads) {
      double sum = 0.0;
      for (int r = 0; r < kR; ++r)
        sum += vec_s[r] * static_cast<double>(w_up_v[(static_cast<long long>(r) * kH + h) * kD + d]);
      out[query * kD + d] = sum;
    }
  }
}
