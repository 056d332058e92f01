// Test kernels for templates/mla_wgmma.cuh (tests/gpu_wgmma_tile_test.cpp):
// one product of each kind the attention issues, through the attention's own
// layout (wg_offset, wg_key_slot), descriptor (wg_desc) and fragment code,
// so that a wrong descriptor field or fragment mapping shows up on one tile.
//   wg_test_ss   D (64 x TILE_N) = A (64 x 8) . B^T, B given as TILE_N x 8
//                (the S = Q K^T product: both operands in shared memory)
//   wg_test_rs   O (64 x kDp) = P (64 x 8 keys) . V (8 keys x kDp), P taken
//                from an accumulator-layout register array as the attention
//                does, V stored transposed with permuted keys; kDp = 120 runs
//                the chunks of 64, 32, 16 and 8 columns
// Both use the three-product split (exact for integer inputs).  Block: 128
// threads (one warpgroup); no dynamic shared memory.  sm_90a only.
#ifndef TILE_N
#error "wgmma_tile.cu needs -DTILE_N (16, 32 or 64)"
#endif

namespace mla {
// What mla_wgmma.cuh takes from fused_mla_attention.cu, for one warpgroup,
// V^T of 8 keys (one MMA step) and 120 columns.
constexpr bool kWgmma = false;
constexpr int kTpq = 2, kQpb = 64, kHpb = 1, kThreads = 128, kKeyTile = 8, kDp = 120;
constexpr unsigned kSmemBytes = 0;
struct Dims {
  int h, d, r, dp, rp, ws_row;
};
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
  const float rest = x - __uint_as_float(hi);
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(rest));
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
}  // namespace mla

#include "../../templates/mla_wgmma.cuh"

namespace {
using namespace mla;

// Writes accumulator element 4 j + e of this thread to its (row, column) of a
// row-major 64 x n matrix.
template <int kN>
__device__ void store_accumulators(const float* acc, float* d) {
  const int tid = threadIdx.x;
  const int row = (tid / 32) * 16 + (tid % 32) / 4;
  const int c = tid % 4;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) d[(row + 8 * (e >> 1)) * kN + 8 * j + 2 * c + (e & 1)] = acc[4 * j + e];
}

__device__ void store_split(float* hi, float* lo, int at, float x) {
  unsigned h, l;
  split_tf32(x, h, l);
  hi[at] = __uint_as_float(h);
  lo[at] = __uint_as_float(l);
}
}  // namespace

extern "C" __global__ void __launch_bounds__(128, 1) wg_test_ss(const float* a, const float* b, float* d) {
  __shared__ __align__(128) float a_hi[64 * 8], a_lo[64 * 8], b_hi[TILE_N * 8], b_lo[TILE_N * 8];
  for (int i = threadIdx.x; i < 64 * 8; i += 128) store_split(a_hi, a_lo, wg_offset(i / 8, i % 8, 8), a[i]);
  for (int i = threadIdx.x; i < TILE_N * 8; i += 128) store_split(b_hi, b_lo, wg_offset(i / 8, i % 8, 8), b[i]);
  wg_proxy_fence();
  __syncthreads();
  float acc[TILE_N / 2];
#pragma unroll
  for (int i = 0; i < TILE_N / 2; ++i) acc[i] = 0.0f;
  wg_pin<TILE_N / 2>(acc);
  wg_fence();
  wg_mma3_ss<TILE_N>(acc, a_hi, a_lo, 8, b_hi, b_lo, 8);
  wg_commit();
  wg_wait_all();
  wg_pin<TILE_N / 2>(acc);
  store_accumulators<TILE_N>(acc, d);
}

extern "C" __global__ void __launch_bounds__(128, 1) wg_test_rs(const float* p, const float* v, float* o) {
  __shared__ __align__(128) float vt_hi[kDp * 8], vt_lo[kDp * 8];
  for (int i = threadIdx.x; i < 8 * kDp; i += 128) {
    const int key = i / kDp, col = i % kDp;
    store_split(vt_hi, vt_lo, wg_offset(col, wg_key_slot(key), 8), v[i]);
  }
  wg_proxy_fence();
  __syncthreads();
  // P as the attention holds it: the S accumulators of 8 keys.
  const int tid = threadIdx.x;
  const int row = (tid / 32) * 16 + (tid % 32) / 4;
  const int c = tid % 4;
  float s[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) s[e] = p[(row + 8 * (e >> 1)) * 8 + 2 * c + (e & 1)];
  unsigned ph[4], pl[4];
  split_tf32(s[0], ph[0], pl[0]);
  split_tf32(s[2], ph[1], pl[1]);
  split_tf32(s[1], ph[2], pl[2]);
  split_tf32(s[3], ph[3], pl[3]);
  float acc[kDp / 2];
#pragma unroll
  for (int i = 0; i < kDp / 2; ++i) acc[i] = 0.0f;
  wg_pin<kDp / 2>(acc);
  wg_fence();
  wg_pv<0>(acc, ph, pl, vt_hi, vt_lo, 0, kDp);
  wg_commit();
  wg_wait_all();
  wg_pin<kDp / 2>(acc);
  store_accumulators<kDp>(acc, o);
}
