// tf32x3_wgmma: the attention of tf32x3_2k on Hopper's warpgroup MMA
// (wgmma.mma_async, sm_90a only), included by fused_mla_attention.cu after
// its tf32x3 helpers (split_tf32, ex2, neg_inf, Dims).  K and V come from
// the workspace kv_ws that the prologue fused_mla_expand_kv writes
// ([B][H][T][K | V], rows of 2 dp floats).
//
// Work map: a warpgroup (4 consecutive warps, 128 threads) owns 64 query
// rows of one head; a block holds QUERIES_PER_BLOCK / 64 warpgroups per head
// and HEADS_PER_BLOCK heads (THREADS_PER_QUERY is 2: 128 threads per 64
// rows).  Per key tile of KEY_TILE keys:
//   S = Q K^T   wgmma m64nKEY_TILEk8, both operands from shared memory
//   online softmax on the accumulators, in registers
//   O += P V    wgmma m64nNk8 with P from registers, V^T from shared memory
//               (N: D padded to 8, issued as chunks of 64, 32, 16 and 8)
// Every fp32 product is three TF32 products (lo.hi + hi.lo + hi.hi, as in
// tf32x3), so the operands are split once: Q when it is staged, K and V^T
// per tile as they are staged; P in registers.
//
// Shared-memory operands use wgmma's canonical K-major layout without
// swizzle: "core matrices" of 8 rows x 4 TF32 (16 bytes), each 128
// contiguous bytes; the core matrices of one 8-row group follow each other
// along K (leading byte offset 128), and 8-row groups are one row of core
// matrices apart (stride byte offset 8 rows x K x 4 bytes).  TF32 wgmma
// reads B only K-major, so V is stored transposed: V^T[d][key].
//
// P.V takes P straight from the S accumulators.  The accumulator fragment of
// warp w is that of mma.m16n8 per 8 columns: element 4j + e of a thread
// (g = lane / 4, c = lane % 4) is row 16 w + g + 8 (e / 2), column
// 8 j + 2 c + e % 2; the A register fragment of m64nNk8 TF32 is a0 (g, c),
// a1 (g + 8, c), a2 (g, c + 4), a3 (g + 8, c + 4).  As in tf32x3, the MMA's
// k index maps to keys as k = c <-> key 2c, k = c + 4 <-> key 2c + 1 (a
// permutation the sum over keys does not see): a = (s0, s2, s1, s3), and
// V^T stores the key 2i of each group of 8 at k = i, key 2i + 1 at k = 4 + i.
//
// The tensor cores read shared memory through the async proxy: every thread
// that wrote an operand with ordinary stores issues fence.proxy.async
// before the barrier that publishes it.
//
// Compiled for anything but sm_90a (wgmma does not exist there) the kernel
// traps at once: such a config cannot run, and the space marks it as
// needing sm_90a (see search_spaces/fused_mla_attention.yaml).

namespace mla {

constexpr int kWgRows = 64;                 // query rows per warpgroup
constexpr int kWgPerHead = kQpb / kWgRows;  // warpgroups per head (wgmma configs)
static_assert(!kWgmma || (kQpb % kWgRows == 0 && kTpq == 2 && kDp % 8 == 0 &&
                          (kKeyTile == 16 || kKeyTile == 32 || kKeyTile == 64)),
              "tf32x3_wgmma needs QUERIES_PER_BLOCK a multiple of 64, THREADS_PER_QUERY 2 and "
              "KEY_TILE 16, 32 or 64");

// Shared memory (floats): per head, Q hi and lo (kQpb x kDp), K hi and lo
// (kKeyTile x kDp), V^T hi and lo (kDp x kKeyTile); kSmemBytes is 4x this.
constexpr int kWgQFloats = kQpb * kDp;
constexpr int kWgKFloats = kKeyTile * kDp;
constexpr int kWgHeadFloats = 2 * kWgQFloats + 4 * kWgKFloats;
static_assert(!kWgmma || kSmemBytes == 4u * kHpb * kWgHeadFloats,
              "kSmemBytes must be tf32x3_wgmma's layout");

// Offset (floats) of element (row, k) of a K-major operand with `kcols`
// columns in the canonical no-swizzle layout described above.
__device__ __forceinline__ int wg_offset(int row, int k, int kcols) {
  return (row >> 3) * (8 * kcols) + (k >> 2) * 32 + (row & 7) * 4 + (k & 3);
}

// Position (k index) of key j of a tile in V^T: keys 2i and 2i + 1 of each
// group of 8 go to k = i and k = 4 + i (see the permutation above).
__device__ __forceinline__ int wg_key_slot(int j) {
  const int w = j & 7;
  return (j & ~7) + ((w & 1) ? 4 + (w >> 1) : (w >> 1));
}

// Shared-memory matrix descriptor: start address, leading byte offset
// (between core matrices along K: 128), stride byte offset (between 8-row
// groups: 32 kcols bytes), no swizzle (mode 0), base offset 0.  Addresses
// and offsets are stored >> 4, in 14 bits each.
__device__ __forceinline__ unsigned long long wg_desc(const float* p, int kcols) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
  const unsigned long long start = (addr & 0x3ffffu) >> 4;
  const unsigned long long lbo = 128u >> 4;
  const unsigned long long sbo = static_cast<unsigned>(32 * kcols) >> 4;
  return start | (lbo << 16) | (sbo << 32);
}

// The wgmma synchronization (sm_90a only; elsewhere the kernel traps
// before reaching any of these, see wgmma_attention).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
#else
__device__ __forceinline__ void wg_fence() {}
__device__ __forceinline__ void wg_commit() {}
__device__ __forceinline__ void wg_wait_all() {}
#endif
__device__ __forceinline__ void wg_proxy_fence() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Keeps the compiler from moving accesses of accumulator registers across
// the asynchronous MMAs (issued before, read after wg_wait_all).
template <int kN>
__device__ __forceinline__ void wg_pin(float* d) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Accumulator operand lists: kN / 2 "+f" registers for m64nNk8.
#define MLA_WG_R4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define MLA_WG_R8(d, i) MLA_WG_R4(d, i), MLA_WG_R4(d, i + 4)
#define MLA_WG_R16(d, i) MLA_WG_R8(d, i), MLA_WG_R8(d, i + 8)
#define MLA_WG_R32(d, i) MLA_WG_R16(d, i), MLA_WG_R16(d, i + 16)
#define MLA_WG_R64(d, i) MLA_WG_R32(d, i), MLA_WG_R32(d, i + 32)
#define MLA_WG_V4 "{%0, %1, %2, %3}"
#define MLA_WG_V8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define MLA_WG_V16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define MLA_WG_V32                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define MLA_WG_V64                                                                               \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "   \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "   \
  "%56, %57, %58, %59, %60, %61, %62, %63}"

// d (64 x kN accumulators) += A (64 x 8, shared memory) . B (8 x kN,
// K-major in shared memory).  sm_90a only.
// accumulate 0: d = A . B (d's old value is ignored: scale-d 0).
template <int kN>
__device__ __forceinline__ void wg_mma_ss(float* d, unsigned long long a, unsigned long long b,
                                          int accumulate = 1);
// d += A (64 x 8, registers: a0..a3 as above) . B (K-major in shared memory).
template <int kN>
__device__ __forceinline__ void wg_mma_rs(float* d, const unsigned (&a)[4], unsigned long long b);

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// V: the accumulator list; R: its operands; A, B, P: the operand numbers of
// the A descriptor (or first A register), the B descriptor and scale-d
// (wg_mma_ss: its accumulate argument; wg_mma_rs: always 1, callers zero d
// themselves).
#define MLA_WG_SS(N, V, R, A, B, P)                                                         \
  template <>                                                                               \
  __device__ __forceinline__ void wg_mma_ss<N>(float* d, unsigned long long a,              \
                                               unsigned long long b, int accumulate) {      \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                           \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 " V ", %" #A      \
                 ", %" #B ", p, 1, 1;\n}"                                                   \
                 : R(d, 0)                                                                  \
                 : "l"(a), "l"(b), "r"(accumulate)                                          \
                 : "memory");                                                               \
  }
#define MLA_WG_RS(N, V, R, A0, A1, A2, A3, B, P)                                            \
  template <>                                                                               \
  __device__ __forceinline__ void wg_mma_rs<N>(float* d, const unsigned (&a)[4],            \
                                               unsigned long long b) {                      \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                           \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 " V ", {%" #A0    \
                 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #B ", p, 1, 1;\n}"                    \
                 : R(d, 0)                                                                  \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1)               \
                 : "memory");                                                               \
  }
#else
#define MLA_WG_SS(N, V, R, A, B, P)                                                         \
  template <>                                                                               \
  __device__ __forceinline__ void wg_mma_ss<N>(float*, unsigned long long, unsigned long long, \
                                               int) {                                       \
    __trap();                                                                               \
  }
#define MLA_WG_RS(N, V, R, A0, A1, A2, A3, B, P)                                            \
  template <>                                                                               \
  __device__ __forceinline__ void wg_mma_rs<N>(float*, const unsigned (&)[4],               \
                                               unsigned long long) {                        \
    __trap();                                                                               \
  }
#endif
MLA_WG_SS(8, MLA_WG_V4, MLA_WG_R4, 4, 5, 6)
MLA_WG_SS(16, MLA_WG_V8, MLA_WG_R8, 8, 9, 10)
MLA_WG_SS(32, MLA_WG_V16, MLA_WG_R16, 16, 17, 18)
MLA_WG_SS(64, MLA_WG_V32, MLA_WG_R32, 32, 33, 34)
MLA_WG_SS(128, MLA_WG_V64, MLA_WG_R64, 64, 65, 66)
MLA_WG_RS(8, MLA_WG_V4, MLA_WG_R4, 4, 5, 6, 7, 8, 9)
MLA_WG_RS(16, MLA_WG_V8, MLA_WG_R8, 8, 9, 10, 11, 12, 13)
MLA_WG_RS(32, MLA_WG_V16, MLA_WG_R16, 16, 17, 18, 19, 20, 21)
MLA_WG_RS(64, MLA_WG_V32, MLA_WG_R32, 32, 33, 34, 35, 36, 37)
#undef MLA_WG_SS
#undef MLA_WG_RS

// d (64 x kN) += A . B to fp32 accuracy: A (64 x 8) and B (kN x 8) given by
// their hi and lo parts in shared memory, the small cross terms first.
template <int kN>
__device__ __forceinline__ void wg_mma3_ss(float* d, const float* a_hi, const float* a_lo,
                                           int a_kcols, const float* b_hi, const float* b_lo,
                                           int b_kcols) {
  const unsigned long long ah = wg_desc(a_hi, a_kcols), bh = wg_desc(b_hi, b_kcols);
  wg_mma_ss<kN>(d, wg_desc(a_lo, a_kcols), bh);
  wg_mma_ss<kN>(d, ah, wg_desc(b_lo, b_kcols));
  wg_mma_ss<kN>(d, ah, bh);
}

// O (64 x kDp) += P (64 x 8 keys, hi and lo in registers) . V (8 keys x
// kDp), V^T hi and lo in shared memory from column kD0 on: kDp in chunks of
// 64, then at most one each of 32, 16 and 8 columns; `keys` is the float
// offset of the 8 keys in V^T (wg_offset(0, 8 n, kKeyTile)).  Bucketed: the
// chunks past the run-time D padded to 8 are skipped (their columns are zero).
template <int kD0>
__device__ __forceinline__ void wg_pv(float* o, const unsigned (&ph)[4], const unsigned (&pl)[4],
                                      const float* vt_hi, const float* vt_lo, int keys, int dp) {
  if constexpr (kD0 < kDp) {
    constexpr int kRest = kDp - kD0;
    constexpr int kN = kRest >= 64 ? 64 : kRest >= 32 ? 32 : kRest >= 16 ? 16 : 8;
    if (kD0 < dp) {  // warpgroup-uniform
      const int off = kD0 * kKeyTile + keys;  // wg_offset(kD0, 0, kKeyTile) + keys, kD0 % 8 == 0
      const unsigned long long bh = wg_desc(vt_hi + off, kKeyTile);
      wg_mma_rs<kN>(o + kD0 / 2, pl, bh);
      wg_mma_rs<kN>(o + kD0 / 2, ph, wg_desc(vt_lo + off, kKeyTile));
      wg_mma_rs<kN>(o + kD0 / 2, ph, bh);
    }
    wg_pv<kD0 + kN>(o, ph, pl, vt_hi, vt_lo, keys, dp);
  }
}

__device__ __forceinline__ void wg_store_split(float* hi, float* lo, int at, float4 x) {
  unsigned h[4], l[4];
  split_tf32(x.x, h[0], l[0]);
  split_tf32(x.y, h[1], l[1]);
  split_tf32(x.z, h[2], l[2]);
  split_tf32(x.w, h[3], l[3]);
  *reinterpret_cast<float4*>(hi + at) =
      make_float4(__uint_as_float(h[0]), __uint_as_float(h[1]), __uint_as_float(h[2]), __uint_as_float(h[3]));
  *reinterpret_cast<float4*>(lo + at) =
      make_float4(__uint_as_float(l[0]), __uint_as_float(l[1]), __uint_as_float(l[2]), __uint_as_float(l[3]));
}

// The 16-byte pieces of a rows x kDp K-major operand, numbered so that 8
// consecutive threads fill one core matrix (128 contiguous bytes: no bank
// conflicts): piece i is row (i / (8 kDp/4)) * 8 + i % 8, columns 4 kc.
struct WgPiece {
  int row, col;
};
__device__ __forceinline__ WgPiece wg_piece(int i) {
  constexpr int kChunks = kDp / 4;
  return WgPiece{(i / (8 * kChunks)) * 8 + (i & 7), ((i >> 3) % kChunks) * 4};
}

// Q rows [t0, t0 + kQpb) of the block's heads, split, into each head's Q hi
// and lo (K-major, kDp columns); rows at or beyond T and columns at or
// beyond D are zero.  Once per block: plain loads (D need not be a
// multiple of 4).
__device__ __forceinline__ void wg_stage_q(float* smem, const float* q, int b, int t0, int h0, int T,
                                           const Dims& dims, int tid) {
  for (int i = tid; i < kHpb * kQpb * (kDp / 4); i += kThreads) {
    const int hl = i / (kQpb * (kDp / 4));
    const WgPiece p = wg_piece(i - hl * kQpb * (kDp / 4));
    const int t = t0 + p.row;
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (t < T) {
      const float* src = q + ((static_cast<long long>(b) * T + t) * dims.h + h0 + hl) * dims.d;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (p.col + e < dims.d) x[e] = __ldg(src + p.col + e);
    }
    float* head = smem + hl * kWgHeadFloats;
    wg_store_split(head, head + kWgQFloats, wg_offset(p.row, p.col, kDp), make_float4(x[0], x[1], x[2], x[3]));
  }
}

// K rows [s0, s0 + kKeyTile) of the block's heads from the workspace into K
// hi and lo (K-major, kDp columns) and V^T hi and lo (K-major over keys,
// keys permuted by wg_key_slot); rows at or beyond s_end are zero (the
// workspace's padding columns are zero already).
__device__ __forceinline__ void wg_stage_kv(float* smem, const float* kv_ws, int b, int h0, int T,
                                            int s0, int s_end, const Dims& dims, int tid) {
  for (int i = tid; i < kHpb * kKeyTile * (kDp / 4); i += kThreads) {
    const int hl = i / (kKeyTile * (kDp / 4));
    const WgPiece p = wg_piece(i - hl * kKeyTile * (kDp / 4));
    float4 k = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v = k;
    if (s0 + p.row < s_end && p.col < dims.dp) {
      const float* src =
          kv_ws + ((static_cast<long long>(b) * dims.h + h0 + hl) * T + s0 + p.row) * dims.ws_row + p.col;
      k = __ldg(reinterpret_cast<const float4*>(src));
      v = __ldg(reinterpret_cast<const float4*>(src + dims.dp));
    }
    float* khi = smem + hl * kWgHeadFloats + 2 * kWgQFloats;
    float* klo = khi + kWgKFloats;
    float* vhi = klo + kWgKFloats;
    float* vlo = vhi + kWgKFloats;
    wg_store_split(khi, klo, wg_offset(p.row, p.col, kDp), k);
    const int slot = wg_key_slot(p.row);
    const float vx[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      unsigned h, l;
      split_tf32(vx[e], h, l);
      const int at = wg_offset(p.col + e, slot, kKeyTile);
      vhi[at] = __uint_as_float(h);
      vlo[at] = __uint_as_float(l);
    }
  }
}

// Online softmax of one key tile on the S accumulators (log2 units): scale,
// causal mask, new row maxima and sums; s becomes P.  Returns the factor of
// each of the thread's two rows for the old O.
__device__ __forceinline__ void wg_softmax(float (&s)[kKeyTile / 2], int s0, int row, float lscale,
                                           float (&m_run)[2], float (&l_run)[2], float (&corr)[2]) {
  const bool diagonal = s0 + kKeyTile - 1 > row;  // some key of the tile follows the row
#pragma unroll
  for (int n = 0; n < kKeyTile / 8; ++n) {
    const int key = s0 + n * 8 + 2 * (threadIdx.x % 4);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float& x = s[4 * n + e];
      x *= lscale;
      if (diagonal && key + (e & 1) > row + 8 * (e >> 1)) x = neg_inf();
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = neg_inf();
#pragma unroll
    for (int n = 0; n < kKeyTile / 8; ++n) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run[r], mx);  // finite: the first tile holds key 0 <= every row
    corr[r] = ex2(m_run[r] - m_new);          // m_run == -inf gives 0
    m_run[r] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < kKeyTile / 8; ++n) {
      s[4 * n + 2 * r] = ex2(s[4 * n + 2 * r] - m_new);
      s[4 * n + 2 * r + 1] = ex2(s[4 * n + 2 * r + 1] - m_new);
      sum += s[4 * n + 2 * r] + s[4 * n + 2 * r + 1];
    }
    l_run[r] = l_run[r] * corr[r] + sum;
  }
}

// out rows of this thread (row, row + 8) = O / l, skipping t >= T and d >= D.
__device__ __forceinline__ void wg_store_out(float* out, const float (&o)[kDp / 2], const float (&l_run)[2],
                                             int b, int row, int h, int T, const Dims& dims) {
  const int c = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int t = row + 8 * r;
    if (t >= T) continue;
    const float inv_l = 1.0f / l;
    float* dst = out + ((static_cast<long long>(b) * T + t) * dims.h + h) * dims.d;
#pragma unroll
    for (int j = 0; j < kDp / 8; ++j) {
      const int d = j * 8 + 2 * c;
      if (d < dims.d) dst[d] = o[4 * j + 2 * r] * inv_l;
      if (d + 1 < dims.d) dst[d + 1] = o[4 * j + 2 * r + 1] * inv_l;
    }
  }
}

// The attention of one block (see the top of this file).  Every barrier is
// reached by all threads; every wgmma condition is uniform over its
// warpgroup.
__device__ __forceinline__ void wgmma_attention(const float* __restrict__ q, float* __restrict__ out,
                                                const float* __restrict__ kv_ws, int T, float scale,
                                                int b, int t0, int h0, int s_end, int tid,
                                                float* smem, const Dims& dims) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma needs sm_90a
#endif
  const int wg = tid / 128;
  const int hl = wg / kWgPerHead;
  const int wg_row = (wg % kWgPerHead) * kWgRows;  // first row of the warpgroup in the block's tile
  const int wrow0 = t0 + wg_row;                    // its first query
  const int row = wrow0 + ((tid / 32) % 4) * 16 + (tid % 32) / 4;  // this thread's rows: row, row + 8
  const float* head = smem + hl * kWgHeadFloats;
  const float* qhi = head + wg_offset(wg_row, 0, kDp);
  const float* qlo = qhi + kWgQFloats;
  const float* khi = head + 2 * kWgQFloats;
  const float* klo = khi + kWgKFloats;
  const float* vhi = klo + kWgKFloats;
  const float* vlo = vhi + kWgKFloats;
  const float lscale = scale * 1.4426950408889634f;  // logits in log2 units (softmax by ex2)

  wg_stage_q(smem, q, b, t0, h0, T, dims, tid);
  float o[kDp / 2];
#pragma unroll
  for (int i = 0; i < kDp / 2; ++i) o[i] = 0.0f;
  float m_run[2] = {neg_inf(), neg_inf()};
  float l_run[2] = {0.0f, 0.0f};

  for (int s0 = 0; s0 < s_end; s0 += kKeyTile) {
    __syncthreads();  // every warpgroup is done with the previous tile
    wg_stage_kv(smem, kv_ws, b, h0, T, s0, s_end, dims, tid);
    wg_proxy_fence();  // the tensor cores read what these stores wrote
    __syncthreads();
    if (s0 > wrow0 + kWgRows - 1 || wrow0 >= T) continue;  // no key of the tile for any row

    float s[kKeyTile / 2];
#pragma unroll
    for (int i = 0; i < kKeyTile / 2; ++i) s[i] = 0.0f;
    wg_pin<kKeyTile / 2>(s);
    wg_fence();
#pragma unroll
    for (int k0 = 0; k0 < kDp; k0 += 8) {
      if (k0 >= dims.dp) break;  // bucketed: past the actual D
      const int at = k0 * 8;     // wg_offset(0, k0, .)
      wg_mma3_ss<kKeyTile>(s, qhi + at, qlo + at, kDp, khi + at, klo + at, kDp);
    }
    wg_commit();
    wg_wait_all();
    wg_pin<kKeyTile / 2>(s);

    float corr[2];
    wg_softmax(s, s0, row, lscale, m_run, l_run, corr);
#pragma unroll
    for (int j = 0; j < kDp / 8; ++j) {
      o[4 * j] *= corr[0];
      o[4 * j + 1] *= corr[0];
      o[4 * j + 2] *= corr[1];
      o[4 * j + 3] *= corr[1];
    }

    unsigned ph[kKeyTile / 8][4], pl[kKeyTile / 8][4];
#pragma unroll
    for (int n = 0; n < kKeyTile / 8; ++n) {
      split_tf32(s[4 * n], ph[n][0], pl[n][0]);
      split_tf32(s[4 * n + 2], ph[n][1], pl[n][1]);
      split_tf32(s[4 * n + 1], ph[n][2], pl[n][2]);
      split_tf32(s[4 * n + 3], ph[n][3], pl[n][3]);
    }
    // Every group of 8 keys, masked ones too (P = 0 there, and staged rows
    // past s_end are zero): a branch here is one ptxas cannot prove uniform
    // over the warpgroup, and it then serializes every wgmma (C7520).
    wg_pin<kDp / 2>(o);
    wg_fence();
#pragma unroll
    for (int n = 0; n < kKeyTile / 8; ++n) {
      wg_pv<0>(o, ph[n], pl[n], vhi, vlo, n * 64, dims.dp);  // n * 64 = wg_offset(0, 8 n, .)
    }
    wg_commit();
    wg_wait_all();
    wg_pin<kDp / 2>(o);
  }

  if (wrow0 >= T) return;
  wg_store_out(out, o, l_run, b, row, h0 + hl, T, dims);
}

}  // namespace mla
