// Fused MLA attention: causal attention whose keys and values are expanded
// from a shared low-rank latent, as one template family for the tuner.
//
//   k_s = kv_latent[b,s] . w_up_k[:,h,:]      v_s = kv_latent[b,s] . w_up_v[:,h,:]
//   out[b,t,h] = sum_{s<=t} softmax_s(q[b,t,h] . k_s * scale) v_s
//
// Neither algorithm writes keys or values to global memory:
//   absorbed  qa = w_up_k[:,h,:] q (length R, registers); logits are
//             kv_latent[b,s] . qa; acc = sum_s p_s kv_latent[b,s] (length R,
//             registers); out = acc . w_up_v[:,h,:].  2R FMAs per (t,s) pair.
//   expanded  per key tile, the block expands its latent rows into K and V
//             tiles in shared memory (for each of its heads), then runs
//             ordinary attention with head size D.  2D FMAs per pair plus the
//             expansion, shared by the block's queries.
//
// Work map: a block owns QUERIES_PER_BLOCK consecutive positions of one batch
// and HEADS_PER_BLOCK consecutive heads; THREADS_PER_QUERY lanes (a power of
// two, inside one warp) share each (t, h) query and split its R (absorbed) or
// D (expanded) vector, combining partial dot products with xor shuffles.
// The grid is one-dimensional, so T*H*B is bounded only by 2^31 blocks.
// Blocks are ordered heaviest query tile first, which balances the causal
// triangle.
//
// Compiled in (-D): SHAPE_H, SHAPE_D, SHAPE_R and every parameter of
// search_spaces/fused_mla_attention.yaml.  B and T are run-time arguments.
//
// Accuracy: strict fp32 (no tensor cores).  __expf (ex2.approx after a
// multiply by log2 e) is used for the softmax weights: its relative error is
// about 2^-22 plus |x| * 2^-24 for exp(x), x <= 0, i.e. < 1e-6 on every weight
// that matters (x > -10), far below the 1e-5 relative-L2 budget, whose real
// consumer is the rounding of logits of size ~sqrt(R).
//
// Every per-thread array is indexed only by compile-time constants inside
// fully unrolled loops, so it lives in registers.

#if !defined(SHAPE_H) || !defined(SHAPE_D) || !defined(SHAPE_R)
#error "fused_mla_attention needs SHAPE_H, SHAPE_D and SHAPE_R"
#endif
#if !defined(ALGORITHM) || !defined(ALGORITHM_expanded) || !defined(THREADS_PER_QUERY) || \
    !defined(QUERIES_PER_BLOCK) || !defined(HEADS_PER_BLOCK) || !defined(STAGE_LATENT) ||  \
    !defined(KEY_TILE) || !defined(FLOAT4) || !defined(UNROLL)
#error "fused_mla_attention needs every parameter of its search space as -D"
#endif

namespace mla {

constexpr int kH = SHAPE_H;
constexpr int kD = SHAPE_D;
constexpr int kR = SHAPE_R;
constexpr bool kExpanded = ALGORITHM == ALGORITHM_expanded;
constexpr int kTpq = THREADS_PER_QUERY;
constexpr int kQpb = QUERIES_PER_BLOCK;
constexpr int kHpb = HEADS_PER_BLOCK;
constexpr int kThreads = kTpq * kQpb * kHpb;
constexpr bool kStage = STAGE_LATENT != 0;
constexpr int kKeyTile = KEY_TILE;
constexpr int kVec = FLOAT4 ? 4 : 1;  // floats per load
constexpr int kUnroll = UNROLL;       // keys per online-softmax step

static_assert(kTpq >= 1 && kTpq <= 32 && (kTpq & (kTpq - 1)) == 0,
              "THREADS_PER_QUERY must be a power of two <= 32");
static_assert(kThreads <= 1024, "block larger than 1024 threads");
static_assert(kH % kHpb == 0, "HEADS_PER_BLOCK must divide H");
static_assert(kKeyTile % kUnroll == 0, "UNROLL must divide KEY_TILE");
static_assert(kVec == 1 || (kR % 4 == 0 && kD % 4 == 0), "FLOAT4 needs R % 4 == 0 and D % 4 == 0");
static_assert(!kExpanded || kD % (kTpq * kVec) == 0,
              "expanded needs D divisible by THREADS_PER_QUERY (x4 with FLOAT4)");

// Absorbed: lane j owns the R-chunks j, j + kTpq, j + 2 kTpq, ... of kVec
// floats each; the last round may be partial (R need not divide evenly).
constexpr int kRChunks = kR / kVec;
constexpr int kChunksA = (kRChunks + kTpq - 1) / kTpq;
// Expanded: lane j owns the D-chunks j, j + kTpq, ... (D divides evenly).
// (1 in absorbed configs, where the expanded code is compiled but unused.)
constexpr int kChunksE = kExpanded ? kD / (kVec * kTpq) : 1;

// Shared memory, in floats; the YAML's shared_memory expression is 4x this.
// Each head's K and V tile is padded by one lane-group width so that the
// heads met by one warp (when a warp spans several heads) use distinct banks.
constexpr int kLatentTileFloats = kStage ? kKeyTile * kR : 0;
constexpr int kHeadStride = kKeyTile * kD + kTpq * kVec;
constexpr int kKvTileFloats = kExpanded ? 2 * kHpb * kHeadStride : 0;
constexpr unsigned kSmemBytes = 4u * (kLatentTileFloats + kKvTileFloats);

// Optional cross-checks of the YAML's launch expressions (scripts/check-templates
// passes what the space evaluates to): a mismatch is a compile error.
#ifdef MLA_EXPECT_THREADS
static_assert(kThreads == MLA_EXPECT_THREADS, "YAML block size != kernel's block size");
#endif
#ifdef MLA_EXPECT_SMEM_BYTES
static_assert(kSmemBytes == MLA_EXPECT_SMEM_BYTES, "YAML shared_memory != kernel's kSmemBytes");
#endif

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// A compiler barrier for memory accesses: loads are not merged or hoisted
// across it.  Keeps live registers bounded where the compiler would
// otherwise keep many loaded values (rows of a softmax step, weights of the
// prologue and epilogue) alive at once and spill.
__device__ __forceinline__ void load_fence() { asm volatile("" ::: "memory"); }

// Loads kVec consecutive floats; p is 16-byte aligned when kVec == 4.
__device__ __forceinline__ void load_global(const float* p, float (&x)[kVec]) {
  if constexpr (kVec == 4) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(p));
    x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
  } else {
    x[0] = __ldg(p);
  }
}

__device__ __forceinline__ void load_shared(const float* p, float (&x)[kVec]) {
  if constexpr (kVec == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    x[0] = v.x; x[1] = v.y; x[2] = v.z; x[3] = v.w;
  } else {
    x[0] = *p;
  }
}

template <bool kShared>
__device__ __forceinline__ void load_vec(const float* p, float (&x)[kVec]) {
  if constexpr (kShared) load_shared(p, x); else load_global(p, x);
}

// The lanes of one query: kTpq consecutive lanes starting at a multiple of
// kTpq.  Shuffles name only these lanes, so groups of one warp may run
// different trip counts (queries of different t) without deadlock.
__device__ __forceinline__ unsigned group_mask(int tid) {
  constexpr unsigned kOnes = kTpq == 32 ? 0xffffffffu : (1u << (kTpq & 31)) - 1u;
  return kOnes << ((tid & 31) & ~(kTpq - 1));
}

// Sum over the lanes of a group.  The xor butterfly adds the same two
// operands on both partners at every level, so every lane ends with the
// bit-identical total and the softmax state stays identical across the group.
__device__ __forceinline__ float group_sum(float v, unsigned mask) {
#pragma unroll
  for (int offset = kTpq / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(mask, v, offset);
  return v;
}

// Is R-chunk i of this lane inside R?  Decided at compile time except for the
// one partial round.
__device__ __forceinline__ bool a_chunk_ok(int i, int lane) {
  return (i + 1) * kTpq <= kRChunks || lane + i * kTpq < kRChunks;
}

// Online softmax state of one query (identical on every lane of its group).
struct Softmax {
  float m;  // running maximum of the logits
  float l;  // running sum of exp(logit - m)
};

// Folds kUnroll logits (masked ones are -inf; the first is always valid) into
// the state; returns the factor for the old accumulator and the weights.
__device__ __forceinline__ float softmax_step(Softmax& st, const float (&logit)[kUnroll],
                                              float (&p)[kUnroll]) {
  float m_new = st.m;
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) m_new = fmaxf(m_new, logit[j]);
  const float corr = __expf(st.m - m_new);  // st.m == -inf gives 0
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    p[j] = __expf(logit[j] - m_new);
    sum += p[j];
  }
  st.l = st.l * corr + sum;
  st.m = m_new;
  return corr;
}

// Copies latent rows [s0, s0 + kKeyTile) of one batch into shared memory;
// rows at or beyond s_end are zero so nothing undefined is ever read.
__device__ __forceinline__ void load_latent_tile(float* tile, const float* lat_b, int s0,
                                                 int s_end, int tid) {
  constexpr int kRowVecs = kR / kVec;
  constexpr int kTotal = kKeyTile * kRowVecs;
  for (int idx = tid; idx < kTotal; idx += kThreads) {
    const int row = idx / kRowVecs;
    const int col = (idx - row * kRowVecs) * kVec;
    const int s = s0 + row;
    float x[kVec];
    if (s < s_end) {
      load_global(lat_b + static_cast<long long>(s) * kR + col, x);
    } else {
#pragma unroll
      for (int e = 0; e < kVec; ++e) x[e] = 0.0f;
    }
    if constexpr (kVec == 4) {
      *reinterpret_cast<float4*>(tile + row * kR + col) = make_float4(x[0], x[1], x[2], x[3]);
    } else {
      tile[row * kR + col] = x[0];
    }
  }
}

// ---------------------------------------------------------------------------
// absorbed

// One softmax step over the kUnroll latent rows at `rows` (row stride R),
// of which `remaining` (>= 1) are keys of this query.
template <bool kShared>
__device__ __forceinline__ void absorbed_step(const float* rows, int remaining, int lane,
                                              unsigned mask, float scale,
                                              const float (&qa)[kChunksA][kVec],
                                              float (&acc)[kChunksA][kVec], Softmax& st) {
  float logit[kUnroll];
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    logit[j] = neg_inf();
    if (j < remaining) {  // uniform over the group
      const float* row = rows + j * kR;
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < kChunksA; ++i) {
        if (a_chunk_ok(i, lane)) {
          float x[kVec];
          load_vec<kShared>(row + (lane + i * kTpq) * kVec, x);
#pragma unroll
          for (int e = 0; e < kVec; ++e) part = fmaf(qa[i][e], x[e], part);
        }
      }
      logit[j] = group_sum(part, mask) * scale;
    }
  }
  // Re-read the rows below instead of keeping kUnroll rows live in registers.
  load_fence();
  float p[kUnroll];
  const float corr = softmax_step(st, logit, p);
#pragma unroll
  for (int i = 0; i < kChunksA; ++i) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[i][e] *= corr;
  }
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    if (j < remaining) {
      const float* row = rows + j * kR;
#pragma unroll
      for (int i = 0; i < kChunksA; ++i) {
        if (a_chunk_ok(i, lane)) {
          float x[kVec];
          load_vec<kShared>(row + (lane + i * kTpq) * kVec, x);
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[i][e] = fmaf(p[j], x[e], acc[i][e]);
        }
      }
    }
  }
}

__device__ __forceinline__ void absorbed(const float* __restrict__ q,
                                         const float* __restrict__ kv_latent,
                                         const float* __restrict__ w_up_k,
                                         const float* __restrict__ w_up_v,
                                         float* __restrict__ out, int T, float scale, int b,
                                         int t, int h, bool active, int s_end, int tid,
                                         int lane, float* smem) {
  const unsigned mask = group_mask(tid);
  const long long qrow = (static_cast<long long>(b) * T + t) * kH + h;  // (b,t,h)

  // qa = w_up_k[:,h,:] q: lane owns the rows r of its chunks.
  float qa[kChunksA][kVec];
  float acc[kChunksA][kVec];
#pragma unroll
  for (int i = 0; i < kChunksA; ++i) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      qa[i][e] = 0.0f;
      acc[i][e] = 0.0f;
    }
  }
  if (active) {
    const float* qv = q + qrow * kD;
    const float* wk = w_up_k + h * kD;
#pragma unroll 1
    for (int d = 0; d < kD; d += kVec) {
      float x[kVec];
      load_global(qv + d, x);
#pragma unroll
      for (int i = 0; i < kChunksA; ++i) {
        if (a_chunk_ok(i, lane)) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            const long long r = (lane + i * kTpq) * kVec + e;
            float w[kVec];
            load_global(wk + r * (kH * kD) + d, w);
#pragma unroll
            for (int f = 0; f < kVec; ++f) qa[i][e] = fmaf(w[f], x[f], qa[i][e]);
          }
        }
        load_fence();
      }
    }
  }

  Softmax st{neg_inf(), 0.0f};
  const float* lat_b = kv_latent + static_cast<long long>(b) * T * kR;
  if constexpr (kStage) {
    for (int s0 = 0; s0 < s_end; s0 += kKeyTile) {
      __syncthreads();  // the previous tile is no longer read
      load_latent_tile(smem, lat_b, s0, s_end, tid);
      __syncthreads();
      const int n = active ? min(kKeyTile, t - s0 + 1) : 0;
      // One step is the unit of unrolling (UNROLL keys); unrolling further
      // only multiplies live registers.
#pragma unroll 1
      for (int k = 0; k < n; k += kUnroll)
        absorbed_step<true>(smem + k * kR, n - k, lane, mask, scale, qa, acc, st);
    }
  } else {
    const int n = active ? t + 1 : 0;
#pragma unroll 1
    for (int k = 0; k < n; k += kUnroll)
      absorbed_step<false>(lat_b + static_cast<long long>(k) * kR, n - k, lane, mask, scale, qa,
                           acc, st);
  }

  // out = (acc / l) . w_up_v[:,h,:]: every lane adds its rows' share of
  // out[d..d+kVec), the group sums, and one lane per d stores.
  if (active) {
    const float inv_l = 1.0f / st.l;
    const float* wv = w_up_v + h * kD;
    float* o = out + qrow * kD;
#pragma unroll 1
    for (int d = 0; d < kD; d += kVec) {
      float part[kVec];
#pragma unroll
      for (int f = 0; f < kVec; ++f) part[f] = 0.0f;
#pragma unroll
      for (int i = 0; i < kChunksA; ++i) {
        if (a_chunk_ok(i, lane)) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            const long long r = (lane + i * kTpq) * kVec + e;
            float w[kVec];
            load_global(wv + r * (kH * kD) + d, w);
#pragma unroll
            for (int f = 0; f < kVec; ++f) part[f] = fmaf(acc[i][e], w[f], part[f]);
          }
        }
        load_fence();
      }
#pragma unroll
      for (int f = 0; f < kVec; ++f) part[f] = group_sum(part[f], mask) * inv_l;
      if (lane == (d / kVec) % kTpq) {
        if constexpr (kVec == 4) {
          *reinterpret_cast<float4*>(o + d) = make_float4(part[0], part[1], part[2], part[3]);
        } else {
          o[d] = part[0];
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// expanded

// K and V rows [s0, s0 + kKeyTile) of the block's heads into shared memory.
// A work item is one column (K or V, head, d) for kExpRows rows, so that each
// weight loaded from global memory feeds kExpRows FMAs; the lanes of a warp
// take consecutive d (coalesced weights, conflict-free stores) and the same
// latent row (broadcast reads).
constexpr int kExpRows = kKeyTile < 8 ? kKeyTile : 8;
static_assert(kKeyTile % kExpRows == 0, "KEY_TILE must be a multiple of 8 or below 8");

__device__ __forceinline__ void expand_tile(const float* __restrict__ w_up_k,
                                            const float* __restrict__ w_up_v,
                                            const float* lat_b, const float* lat_tile,
                                            float* ktile, float* vtile, int h0, int s0,
                                            int s_end, int tid) {
  constexpr int kCols = 2 * kHpb * kD;
  constexpr int kItems = kCols * (kKeyTile / kExpRows);
  for (int item = tid; item < kItems; item += kThreads) {
    const int col = item % kCols;
    const int row0 = (item / kCols) * kExpRows;
    const bool is_v = col >= kHpb * kD;
    const int hl = (col / kD) % kHpb;
    const int d = col % kD;
    float a[kExpRows];
#pragma unroll
    for (int j = 0; j < kExpRows; ++j) a[j] = 0.0f;
    if (s0 + row0 < s_end) {  // rows past the block's last query are never read
      const float* w = (is_v ? w_up_v : w_up_k) + (h0 + hl) * kD + d;
      // Latent rows of this item: from the staged tile, or straight from
      // global memory (clamped to a real row; the clamped rows are unused).
      const float* rows[kExpRows];
#pragma unroll
      for (int j = 0; j < kExpRows; ++j) {
        if constexpr (kStage) {
          rows[j] = lat_tile + (row0 + j) * kR;
        } else {
          rows[j] = lat_b + static_cast<long long>(min(s0 + row0 + j, s_end - 1)) * kR;
        }
      }
#pragma unroll kUnroll
      for (int r = 0; r < kR; r += kVec) {
        float wr[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) wr[e] = __ldg(w + static_cast<long long>(r + e) * (kH * kD));
#pragma unroll
        for (int j = 0; j < kExpRows; ++j) {
          float x[kVec];
          load_vec<kStage>(rows[j] + r, x);
#pragma unroll
          for (int e = 0; e < kVec; ++e) a[j] = fmaf(x[e], wr[e], a[j]);
        }
      }
    }
    float* dst = (is_v ? vtile : ktile) + hl * kHeadStride + row0 * kD + d;
#pragma unroll
    for (int j = 0; j < kExpRows; ++j) dst[j * kD] = a[j];
  }
}

// One softmax step over kUnroll rows of this head's K and V tiles.
__device__ __forceinline__ void expanded_step(const float* krows, const float* vrows,
                                              int remaining, int lane, unsigned mask,
                                              float scale, const float (&qr)[kChunksE][kVec],
                                              float (&acc)[kChunksE][kVec], Softmax& st) {
  float logit[kUnroll];
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    logit[j] = neg_inf();
    if (j < remaining) {  // uniform over the group
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < kChunksE; ++i) {
        float x[kVec];
        load_shared(krows + j * kD + (lane + i * kTpq) * kVec, x);
#pragma unroll
        for (int e = 0; e < kVec; ++e) part = fmaf(qr[i][e], x[e], part);
      }
      logit[j] = group_sum(part, mask) * scale;
    }
  }
  load_fence();  // as in absorbed_step
  float p[kUnroll];
  const float corr = softmax_step(st, logit, p);
#pragma unroll
  for (int i = 0; i < kChunksE; ++i) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[i][e] *= corr;
  }
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    if (j < remaining) {
#pragma unroll
      for (int i = 0; i < kChunksE; ++i) {
        float x[kVec];
        load_shared(vrows + j * kD + (lane + i * kTpq) * kVec, x);
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[i][e] = fmaf(p[j], x[e], acc[i][e]);
      }
    }
  }
}

__device__ __forceinline__ void expanded(const float* __restrict__ q,
                                         const float* __restrict__ kv_latent,
                                         const float* __restrict__ w_up_k,
                                         const float* __restrict__ w_up_v,
                                         float* __restrict__ out, int T, float scale, int b,
                                         int t, int h0, int hl, bool active, int s_end, int tid,
                                         int lane, float* smem) {
  const unsigned mask = group_mask(tid);
  const int h = h0 + hl;
  const long long qrow = (static_cast<long long>(b) * T + t) * kH + h;

  float qr[kChunksE][kVec];
  float acc[kChunksE][kVec];
#pragma unroll
  for (int i = 0; i < kChunksE; ++i) {
    float x[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) x[e] = 0.0f;
    if (active) load_global(q + qrow * kD + (lane + i * kTpq) * kVec, x);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      qr[i][e] = x[e];
      acc[i][e] = 0.0f;
    }
  }

  float* lat_tile = smem;
  float* ktile = smem + kLatentTileFloats;
  float* vtile = ktile + kHpb * kHeadStride;
  const float* lat_b = kv_latent + static_cast<long long>(b) * T * kR;
  const float* kmine = ktile + hl * kHeadStride;
  const float* vmine = vtile + hl * kHeadStride;

  Softmax st{neg_inf(), 0.0f};
  for (int s0 = 0; s0 < s_end; s0 += kKeyTile) {
    __syncthreads();  // the previous tiles are no longer read
    if constexpr (kStage) {
      load_latent_tile(lat_tile, lat_b, s0, s_end, tid);
      __syncthreads();
    }
    expand_tile(w_up_k, w_up_v, lat_b, lat_tile, ktile, vtile, h0, s0, s_end, tid);
    __syncthreads();
    const int n = active ? min(kKeyTile, t - s0 + 1) : 0;
#pragma unroll 1
    for (int k = 0; k < n; k += kUnroll)
      expanded_step(kmine + k * kD, vmine + k * kD, n - k, lane, mask, scale, qr, acc, st);
  }

  if (active) {
    const float inv_l = 1.0f / st.l;
    float* o = out + qrow * kD;
#pragma unroll
    for (int i = 0; i < kChunksE; ++i) {
      const int d = (lane + i * kTpq) * kVec;
      if constexpr (kVec == 4) {
        *reinterpret_cast<float4*>(o + d) = make_float4(acc[i][0] * inv_l, acc[i][1] * inv_l,
                                                        acc[i][2] * inv_l, acc[i][3] * inv_l);
      } else {
        o[d] = acc[i][0] * inv_l;
      }
    }
  }
}

}  // namespace mla

// Launch: grid [ceil(T / QUERIES_PER_BLOCK) * (H / HEADS_PER_BLOCK) * B],
// block [THREADS_PER_QUERY * QUERIES_PER_BLOCK * HEADS_PER_BLOCK], dynamic
// shared memory mla::kSmemBytes; anything else traps.
extern "C" __global__ void __launch_bounds__(mla::kThreads, 1)
fused_mla_attention(const float* __restrict__ q, const float* __restrict__ kv_latent,
                    const float* __restrict__ w_up_k, const float* __restrict__ w_up_v,
                    float* __restrict__ out, int B, int T, float scale) {
  using namespace mla;
  extern __shared__ float4 smem_f4[];
  float* smem = reinterpret_cast<float*>(smem_f4);

  unsigned dynamic_smem;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
  const bool geometry_ok = blockDim.x == kThreads && blockDim.y == 1 && blockDim.z == 1 &&
                           static_cast<long long>(dynamic_smem) >= static_cast<long long>(kSmemBytes);
  if (!geometry_ok) __trap();

  // Block -> (query tile, head group, batch); the heaviest (last) query tiles
  // get the lowest block numbers so they start first.
  constexpr int kHeadGroups = kH / kHpb;
  const int ntiles = (T + kQpb - 1) / kQpb;
  const int per_tile = kHeadGroups * B;
  const int bid = blockIdx.x;
  const int tile_rank = bid / per_tile;
  if (tile_rank >= ntiles) return;  // whole block: no barrier is skipped
  const int rest = bid - tile_rank * per_tile;
  const int hg = rest % kHeadGroups;
  const int b = rest / kHeadGroups;
  const int t0 = (ntiles - 1 - tile_rank) * kQpb;

  // Thread -> (lane, query, head): lanes fastest, then queries, so a warp
  // holds queries of one head (broadcast reads of its K and V tile rows).
  const int tid = threadIdx.x;
  const int lane = tid % kTpq;
  const int ql = (tid / kTpq) % kQpb;
  const int hl = tid / (kTpq * kQpb);
  const int t = t0 + ql;
  const bool active = t < T;
  const int s_end = min(T, t0 + kQpb);  // keys the block needs: s < s_end

  if constexpr (kExpanded) {
    expanded(q, kv_latent, w_up_k, w_up_v, out, T, scale, b, t, hg * kHpb, hl, active, s_end,
             tid, lane, smem);
  } else {
    absorbed(q, kv_latent, w_up_k, w_up_v, out, T, scale, b, t, hg * kHpb + hl, active, s_end,
             tid, lane, smem);
  }
}
