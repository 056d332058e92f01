// The K/V expansion GEMM of tf32x3_kvgemm and tf32x3_wgmma on Hopper's
// warpgroup MMA (EXPAND_GEMM wgmma_m64 and wgmma_m128; sm_90a only),
// included by fused_mla_attention.cu after mla_wgmma.cuh (wg_desc,
// wg_offset, wg_mma_ss, wg_store_split, the fences).
//
//   [K | V] rows of kv_ws = kv_latent [B*T, R] . [w_up_k | w_up_v] [R, H*dp]
//
// The columns are *virtual*: column v is (head v / dp, d = v % dp) with dp =
// D padded to 8, and the weights of d >= D are read as zeros, so that the
// GEMM writes every workspace row whole, its padding columns as zeros (the
// attention kernels rely on that).  When D % 8 == 0 the virtual columns are
// the weights' own [R, H*D] columns.
//
// A block owns kGRows latent rows (a warpgroup per 64) and kGCols virtual
// columns of K and the same of V: one wgmma m64n(2 kGCols)k8 per warpgroup
// and k step, B = [K columns | V columns].  R is walked in stages of kGK = 32
// (the accuracy chunk of the mma.sync code: each stage's products are summed
// in fresh accumulators, then added in fp32, because the tensor cores do not
// round their accumulation to nearest and the error grows with the chain).
//
// Per stage, in a pipeline:
//   raw   cp.async of the latent tile (kGRows x kGK, rows of kGAs floats) and
//         of both weight tiles (kGK x kGN) into one of two raw buffers, two
//         stages ahead; zeros past B*T, R, H and D;
//   split every element once, by the whole block, into TF32 hi and lo parts
//         in wgmma's canonical no-swizzle K-major layout (A as it is, B
//         transposed: TF32 wgmma reads B K-major only), into one of two split
//         buffers, while the tensor cores work on the previous stage;
//   mma   3 x 4 wgmma per warpgroup (lo.hi, hi.lo, hi.hi per k step of 8),
//         both operands from shared memory, asynchronous.
// So each element is split once per block, not once per warp that reads it
// (the mma.sync prologue's cost: ncu showed its ALU pipe, not the tensor
// pipe, as the busiest), and the splitting overlaps the MMAs.
//
// Compiled for anything but sm_90a the kernel traps at once (the space marks
// these configs as needing sm_90a).

namespace mla {

static_assert(!kWgExpand || (kGRows == 64 || kGRows == 128) && kGN <= 256 && kGN % 32 == 0,
              "the wgmma prologue's tile is 64 or 128 rows by at most 256 columns");

// Element offsets of a block's buffers (floats).
__device__ __forceinline__ float* wgx_raw(float* smem, int buf) { return smem + buf * kGRawFloats; }
__device__ __forceinline__ float* wgx_split(float* smem, int buf) {
  return smem + 2 * kGRawFloats + buf * kGSplitFloats;  // A hi, A lo, B hi, B lo
}

// cp.async of 16 or 4 bytes, zero-filled when !valid (src is then not read).
__device__ __forceinline__ void wgx_copy16(float* dst, const float* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void wgx_copy4(float* dst, const float* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}

// Where a block's tile lies and which copies may be 16 bytes wide (R, D and
// the pointers permitting: a caller's tensor need not be 16-byte aligned).
struct WgxTile {
  int m0, n0;     // first latent row (of B*T) and first virtual column
  int rows;       // B*T
  bool vec_a, vec_b;
};

// A thread's share of every stage's copies, fixed for the tile: kGK / width
// pieces of each latent row and width columns of each weight row, at the
// same (row, column) offsets in every stage, so that a stage costs each
// copy an add and a compare (the virtual columns' divisions by dp are made
// once per tile).  Latent: rows a_row + j * kGThreads / (kGK / width) of the
// tile, column a_col; weights: rows b_row + j * kGThreads / (kGN / width) of
// the stage, tile column b_col (K's columns, then V's).
struct WgxCopies {
  const float* a_src;  // latent (m0 + a_row, a_col) of stage 0
  const float* b_src;  // weight row b_row, column b_col, of stage 0
  unsigned a_rows_ok;  // bit j: latent row j of this thread is below B*T
  int a_col, b_row;
  int a_dst, b_dst;    // offsets in a raw buffer
  bool b_col_ok;       // the virtual column is a real one (h < H, d < D)
};

template <int kWidth>
__device__ __forceinline__ WgxCopies wgx_copies(const float* kv_latent, const float* w_up_k,
                                                const float* w_up_v, const WgxTile& t, const Dims& dims,
                                                int tid) {
  constexpr int kAPer = kGK / kWidth, kBPer = kGN / kWidth;  // pieces per row
  constexpr int kAStep = kGThreads / kAPer;                  // rows between a thread's pieces
  WgxCopies c;
  const int a_row = tid / kAPer;
  c.a_col = (tid % kAPer) * kWidth;
  c.a_src = kv_latent + static_cast<long long>(t.m0 + a_row) * dims.r + c.a_col;
  c.a_dst = a_row * kGAs + c.a_col;
  c.a_rows_ok = 0;
#pragma unroll
  for (int j = 0; j < kGRows / kAStep; ++j)
    if (t.m0 + a_row + j * kAStep < t.rows) c.a_rows_ok |= 1u << j;
  c.b_row = tid / kBPer;
  const int n = (tid % kBPer) * kWidth;
  const int v = t.n0 + n % kGCols;  // virtual column
  const int h = v / dims.dp, d = v - h * dims.dp;
  // With kWidth 4 (D % 4 == 0) the 4 columns from d (d % 4 == 0) lie all
  // below D or all in the padding.
  c.b_col_ok = h < dims.h && d < dims.d;
  c.b_src = (n < kGCols ? w_up_k : w_up_v) +
            (c.b_col_ok ? static_cast<long long>(c.b_row) * dims.h * dims.d + h * dims.d + d : 0);
  c.b_dst = c.b_row * kGN + n;
  return c;
}

// Starts copying stage k0 into raw buffer `raw`: the latent tile's columns
// [k0, k0 + kGK), then weight rows [k0, k0 + kGK) of the tile's virtual
// columns of w_up_k and w_up_v ([k][K cols | V cols]); zeros past B*T, R, H
// and D.
template <int kWidth>
__device__ __forceinline__ void wgx_stage_async(float* raw, const WgxCopies& c, int k0, const Dims& dims) {
  constexpr int kAPer = kGK / kWidth, kBPer = kGN / kWidth;
  constexpr int kAStep = kGThreads / kAPer, kBStep = kGThreads / kBPer;
  const bool a_col_ok = k0 + c.a_col < dims.r;
#pragma unroll
  for (int j = 0; j < kGRows / kAStep; ++j) {
    const bool ok = a_col_ok && ((c.a_rows_ok >> j) & 1u);
    const float* src = c.a_src + static_cast<long long>(j * kAStep) * dims.r + k0;
    if constexpr (kWidth == 4)
      wgx_copy16(raw + c.a_dst + j * kAStep * kGAs, ok ? src : c.a_src, ok);
    else
      wgx_copy4(raw + c.a_dst + j * kAStep * kGAs, ok ? src : c.a_src, ok);
  }
  const long long ld = static_cast<long long>(dims.h) * dims.d;
  float* rb = raw + kGRows * kGAs;
#pragma unroll
  for (int j = 0; j < kGK / kBStep; ++j) {
    const bool ok = c.b_col_ok && k0 + c.b_row + j * kBStep < dims.r;
    const float* src = c.b_src + (k0 + j * kBStep) * ld;
    if constexpr (kWidth == 4)
      wgx_copy16(rb + c.b_dst + j * kBStep * kGN, ok ? src : c.b_src, ok);
    else
      wgx_copy4(rb + c.b_dst + j * kBStep * kGN, ok ? src : c.b_src, ok);
  }
}

// Splits raw buffer `raw` into split buffer `sp`: A [m][k] and B^T [n][k],
// each as hi then lo, in the canonical K-major layout (kGK columns).  An item
// is 4 consecutive k of one row; 8 consecutive threads fill one core matrix
// (one 128-byte run: conflict-free 16-byte stores).  A's reads are 16 bytes
// from rows kGAs = 4 mod 32 floats apart (conflict-free per 8 threads); B's
// are words of 32 consecutive columns per warp.  Items of A: rows 8 (tid /
// 64 + j kGThreads / 64) + tid % 8, k group (tid / 8) % 8; of B: columns 32
// (s j / 8) + tid % 32, k group tid / 32 + (s j) % 8, where s = kGThreads /
// 32 (4 or 8, so that the sums never carry).
__device__ __forceinline__ void wgx_split_stage(const float* raw, float* sp, int tid) {
  static_assert(kGK == 32 && kGThreads % 64 == 0 && kGN % 32 == 0, "the item map below");
  float* a_hi = sp;
  float* a_lo = a_hi + kGRows * kGK;
  float* b_hi = a_lo + kGRows * kGK;
  float* b_lo = b_hi + kGN * kGK;
  {
    const int m = (tid / 64) * 8 + (tid & 7), kq = (tid >> 3) & 7;
    const float* src = raw + m * kGAs + 4 * kq;
    const int dst = wg_offset(m, 4 * kq, kGK);
#pragma unroll
    for (int j = 0; j < kGRows * 8 / kGThreads; ++j)
      wg_store_split(a_hi, a_lo, dst + j * (kGThreads / 64) * 8 * kGK,
                     *reinterpret_cast<const float4*>(src + j * (kGThreads / 64) * 8 * kGAs));
  }
  {
    constexpr int kS = kGThreads / 32;
    const float* rb = raw + kGRows * kGAs;
#pragma unroll
    for (int j = 0; j < kGN * 8 / kGThreads; ++j) {
      const int n = 32 * ((kS * j) / 8) + (tid & 31);
      const int kq = tid / 32 + (kS * j) % 8;
      const float* col = rb + 4 * kq * kGN + n;
      wg_store_split(b_hi, b_lo, wg_offset(n, 4 * kq, kGK),
                     make_float4(col[0], col[kGN], col[2 * kGN], col[3 * kGN]));
    }
  }
}

// part (this warpgroup's 64 rows x kGN) = the stage's A . B to fp32
// accuracy: per k step of 8, lo.hi, hi.lo, then hi.hi; the first product
// overwrites part (scale-d 0), the others accumulate.
__device__ __forceinline__ void wgx_mma_stage(float* part, const float* sp, int wg_row) {
  const float* a_hi = sp + wg_offset(wg_row, 0, kGK);
  const float* a_lo = a_hi + kGRows * kGK;
  const float* b_hi = sp + 2 * kGRows * kGK;
  const float* b_lo = b_hi + kGN * kGK;
#pragma unroll
  for (int kk = 0; kk < kGK; kk += 8) {
    const int at = kk * 8;  // wg_offset(0, kk, .)
    const unsigned long long ah = wg_desc(a_hi + at, kGK), bh = wg_desc(b_hi + at, kGK);
    wg_mma_ss<kGN>(part, wg_desc(a_lo + at, kGK), bh, kk == 0 ? 0 : 1);
    wg_mma_ss<kGN>(part, ah, wg_desc(b_lo + at, kGK));
    wg_mma_ss<kGN>(part, ah, bh);
  }
}

// The thread's accumulators into kv_ws: element 4 j + e is row wg_row + 16
// warp + g + 8 (e / 2), column 8 j + 2 c + e % 2 of the tile (K's columns,
// then V's); pairs never straddle a head (dp and the pair's column are even).
__device__ __forceinline__ void wgx_store(float* kv_ws, const float (&acc)[kGN / 2], const WgxTile& t,
                                          int T, int wg_row, int tid, const Dims& dims) {
  const int g = (tid % 32) / 4, c = tid % 4;
  const int row0 = t.m0 + wg_row + ((tid / 32) % 4) * 16 + g;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int n = row0 + 8 * half;
    if (n >= t.rows) continue;
    const int b = n / T;
    float* ws_bt = kv_ws + (static_cast<long long>(b) * dims.h * T + (n - b * T)) * dims.ws_row;
#pragma unroll
    for (int j = 0; j < kGN / 8; ++j) {
      const int col = 8 * j + 2 * c;
      const int x = col < kGCols ? 0 : 1;
      const int v = t.n0 + col - x * kGCols;
      const int h = v / dims.dp;
      if (h >= dims.h) continue;
      *reinterpret_cast<float2*>(ws_bt + static_cast<long long>(h) * T * dims.ws_row + x * dims.dp +
                                 (v - h * dims.dp)) =
          make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
    }
  }
}

// One block tile (see the top of this file), its copies kWidth floats wide.
// Every barrier is reached by all threads; every wgmma condition is uniform
// over the block.
template <int kWidth>
__device__ __forceinline__ void wgx_tile_w(const WgxCopies& c, float* __restrict__ kv_ws, const WgxTile& t,
                                           int T, const Dims& dims, float* smem, int tid) {
  const int wg_row = (tid / 128) * 64;
  const int stages = (dims.rp + kGK - 1) / kGK;
  float acc[kGN / 2], part[kGN / 2];
#pragma unroll
  for (int i = 0; i < kGN / 2; ++i) acc[i] = part[i] = 0.0f;

  wgx_stage_async<kWidth>(wgx_raw(smem, 0), c, 0, dims);
  cp_async_commit();
  if (stages > 1) wgx_stage_async<kWidth>(wgx_raw(smem, 1), c, kGK, dims);
  cp_async_commit();
  cp_async_wait_all_but_one();  // stage 0 landed (this thread's copies)
  __syncthreads();              // ... and everyone's
  wgx_split_stage(wgx_raw(smem, 0), wgx_split(smem, 0), tid);
  wg_proxy_fence();  // the tensor cores read what these stores wrote
  __syncthreads();   // stage 0 split; raw buffer 0 read by everyone
  if (stages > 2) wgx_stage_async<kWidth>(wgx_raw(smem, 0), c, 2 * kGK, dims);
  cp_async_commit();

#pragma unroll 1
  for (int s = 0; s < stages; ++s) {
    wg_pin<kGN / 2>(part);
    wg_fence();
    wgx_mma_stage(part, wgx_split(smem, s & 1), wg_row);
    wg_commit();
    if (s + 1 < stages) {  // split stage s + 1 while the tensor cores work on s
      cp_async_wait_all_but_one();  // stage s + 1 landed; s + 2 may still be in flight
      __syncthreads();
      wgx_split_stage(wgx_raw(smem, (s + 1) & 1), wgx_split(smem, (s + 1) & 1), tid);
      wg_proxy_fence();
    }
    wg_wait_all();
    wg_pin<kGN / 2>(part);
#pragma unroll
    for (int i = 0; i < kGN / 2; ++i) acc[i] += part[i];
    __syncthreads();  // split buffer (s + 1) & 1 complete; raw buffer (s + 1) & 1 read by everyone
    if (s + 3 < stages) wgx_stage_async<kWidth>(wgx_raw(smem, (s + 1) & 1), c, (s + 3) * kGK, dims);
    cp_async_commit();  // possibly empty: each iteration's wait leaves exactly the newest group
  }
  wgx_store(kv_ws, acc, t, T, wg_row, tid, dims);
}

__device__ __forceinline__ void wgx_tile(const float* __restrict__ kv_latent, const float* __restrict__ w_up_k,
                                         const float* __restrict__ w_up_v, float* __restrict__ kv_ws,
                                         const WgxTile& t, int T, const Dims& dims, float* smem, int tid) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma needs sm_90a
#endif
  // Both operands' copies share one width, so that a tile compiles to two
  // pipelines, not four: 16 bytes where R, D and the pointers all allow.
  if (t.vec_a && t.vec_b)
    wgx_tile_w<4>(wgx_copies<4>(kv_latent, w_up_k, w_up_v, t, dims, tid), kv_ws, t, T, dims, smem, tid);
  else
    wgx_tile_w<1>(wgx_copies<1>(kv_latent, w_up_k, w_up_v, t, dims, tid), kv_ws, t, T, dims, smem, tid);
}

}  // namespace mla
