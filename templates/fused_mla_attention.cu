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
//   tf32x3    expanded, with every product on the tensor cores
//             (mma.sync m16n8k8 TF32): each fp32 operand x is split into a
//             TF32 high part and a TF32 low part (x - high), and a.b is
//             a_lo.b_hi + a_hi.b_lo + a_hi.b_hi, which keeps fp32 accuracy
//             (the dropped a_lo.b_lo term is ~2^-22 relative).  A warp owns
//             16 query rows of one head; the block expands K and V tiles with
//             the same split MMAs.
//   tf32x3_2k tf32x3 in two kernels: the space's prologue,
//             fused_mla_expand_kv, writes K and V of every (b, h, s) once to
//             the workspace kv_ws; the attention kernel then reads K and V
//             tiles from it instead of re-expanding them for every query tile
//             (which costs R / QUERIES_PER_BLOCK times the attention).
//   tf32x3_wgmma tf32x3_2k's two kernels, its attention on Hopper's
//             warpgroup MMA (wgmma, sm_90a only): a warpgroup per 64 query
//             rows; see mla_wgmma.cuh.
//   tf32x3_wgmma_ws tf32x3_wgmma's attention, warp-specialized: one more
//             warpgroup stages and splits the K/V tiles into a ring of two
//             buffers while the others run the MMAs; see mla_wgmma_ws.cuh.
//   f16x3_wgmma_ws tf32x3_wgmma_ws with each fp32 product as three FP16
//             products (with power-of-two scales) instead of three TF32
//             ones; see mla_wgmma_f16.cuh.
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
// SHAPE_BUCKETS bucketed (tf32x3 and tf32x3_2k only): SHAPE_H is 0 and
// SHAPE_D, SHAPE_R are capacities (buckets, multiples of 16), so that one
// binary serves every shape of a bucket; the actual H, D and R are the
// run-time arguments of the same names.  Loads zero-fill d >= D and r >= R,
// loops over D and R stop at the actual extent padded to 8, stores skip
// d >= D; only shared memory and registers are sized by the capacity.
// SHAPE_BUCKETS exact: the H, D, R arguments are ignored and every extent is
// a compile-time constant, so the code is what it was without buckets.
//
// Accuracy: strict fp32 (tf32x3: see above).  __expf (ex2.approx after a
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
#if !defined(ALGORITHM) || !defined(ALGORITHM_expanded) || !defined(ALGORITHM_tf32x3) || \
    !defined(ALGORITHM_tf32x3_2k) || !defined(ALGORITHM_tf32x3_kvgemm) || !defined(ALGORITHM_tf32x3_wgmma) || \
    !defined(ALGORITHM_tf32x3_wgmma_ws) || !defined(ALGORITHM_f16x3_wgmma_ws) || \
    !defined(THREADS_PER_QUERY) || \
    !defined(QUERIES_PER_BLOCK) || !defined(HEADS_PER_BLOCK) || !defined(STAGE_LATENT) ||  \
    !defined(KEY_TILE) || !defined(FLOAT4) || !defined(UNROLL) || !defined(STAGE_WEIGHTS) || \
    !defined(SHAPE_BUCKETS) || !defined(SHAPE_BUCKETS_bucketed) || !defined(EXPAND_GEMM) || \
    !defined(EXPAND_GEMM_mma_sync) || !defined(EXPAND_GEMM_wgmma_m128) || !defined(EXPAND_GEMM_fma) || \
    !defined(EXPAND_GEMM_fma_cluster) || !defined(KEY_SPLITS)
#error "fused_mla_attention needs every parameter of its search space as -D"
#endif

// EXPAND_GEMM fma_cluster: the blocks of a cluster, each with a share of R
// (mla::kCSplit; also the kernel's __cluster_dims__).
#define MLA_FMA_CLUSTER_SPLIT 8

namespace mla {

constexpr int kH = SHAPE_H;
constexpr int kD = SHAPE_D;
constexpr int kR = SHAPE_R;
constexpr bool kExpanded = ALGORITHM == ALGORITHM_expanded;
// tf32x3_2k: two kernels; fused_mla_expand_kv writes K and V once into the
// workspace, and the attention kernel reads them (no re-expansion per query
// tile).  Everything else is tf32x3's.  tf32x3_kvgemm: the same attention;
// its prologue is a GEMM over every latent row and weight column (see
// kXThreads below).  tf32x3_wgmma: that prologue and workspace, its own
// attention (mla_wgmma.cuh).
constexpr bool kKvGemm = ALGORITHM == ALGORITHM_tf32x3_kvgemm;
constexpr bool kWgmma = ALGORITHM == ALGORITHM_tf32x3_wgmma;
constexpr bool kWgmmaWs = ALGORITHM == ALGORITHM_tf32x3_wgmma_ws;
// f16x3_wgmma_ws: tf32x3_wgmma_ws's structure with FP16 split products
// (mla_wgmma_f16.cuh).
constexpr bool kGemmPrologue = kKvGemm || kWgmma || kWgmmaWs || ALGORITHM == ALGORITHM_f16x3_wgmma_ws;
constexpr bool k2k = ALGORITHM == ALGORITHM_tf32x3_2k || kGemmPrologue;
constexpr bool kTc = ALGORITHM == ALGORITHM_tf32x3 || k2k;
constexpr int kTpq = THREADS_PER_QUERY;
constexpr int kQpb = QUERIES_PER_BLOCK;
constexpr int kHpb = HEADS_PER_BLOCK;
// (tf32x3_wgmma_ws and f16x3_wgmma_ws: one more warpgroup, the producer;
// see mla_wgmma_ws.cuh.)
constexpr int kThreads =
    kTpq * kQpb * kHpb +
    (ALGORITHM == ALGORITHM_tf32x3_wgmma_ws || ALGORITHM == ALGORITHM_f16x3_wgmma_ws ? 128 : 0);
constexpr bool kStage = STAGE_LATENT != 0;
constexpr int kKeyTile = KEY_TILE;
constexpr int kVec = FLOAT4 ? 4 : 1;  // floats per load
constexpr int kUnroll = UNROLL;       // keys per online-softmax step
constexpr bool kBucketed = SHAPE_BUCKETS == SHAPE_BUCKETS_bucketed;
// KEY_SPLITS (tf32x3, tf32x3_2k and tf32x3_kvgemm, sm_90): a query tile's
// key tiles shared out over a thread-block cluster of kSplits blocks
// (consecutive blockIdx.x, the kernel's __cluster_dims__), each with its own
// online softmax over its share; then the blocks merge their states through
// distributed shared memory (see tf32x3 below).  For shapes with few
// (batch, head group, query tile) blocks, where one block walking every key
// tile of the last query tile is the whole time.
constexpr int kSplits = KEY_SPLITS;
// UNROLL 2 in tf32x3 (whose softmax step is always a key tile): the
// expansion stores every K and V element split into its TF32 hi and lo
// parts, once per tile, and the MMA loops load both parts.  With UNROLL 1
// every warp that reads an element splits it again: K by each of the head's
// QUERIES_PER_BLOCK / 16 warps.  The price is a second K and V tile in
// shared memory (the lo parts).  (tf32x3_2k and tf32x3_kvgemm, whose K and V
// come from the workspace, would need a pass of the block and a barrier per
// tile for it: on an H100 that lost 1-63% in 35 of 35 kvgemm configs; the
// prologue writing split K and V into the workspace is the way left.)
constexpr bool kSplitOnce = ALGORITHM == ALGORITHM_tf32x3 && kUnroll == 2;

static_assert(kTpq >= 1 && kTpq <= 32 && (kTpq & (kTpq - 1)) == 0,
              "THREADS_PER_QUERY must be a power of two <= 32");
static_assert(kThreads <= 1024, "block larger than 1024 threads");
static_assert(kBucketed || kH % kHpb == 0, "HEADS_PER_BLOCK must divide H");
static_assert(!kBucketed || (kTc && kH == 0 && kD % 16 == 0 && kR % 16 == 0 && kD > 0 && kR > 0),
              "SHAPE_BUCKETS bucketed is tf32x3's: H at run time (SHAPE_H 0), SHAPE_D and "
              "SHAPE_R capacities that are multiples of 16");
static_assert(kBucketed || (kH > 0 && kD > 0 && kR > 0), "exact needs SHAPE_H, SHAPE_D, SHAPE_R > 0");
static_assert(kKeyTile % kUnroll == 0, "UNROLL must divide KEY_TILE");
static_assert(kVec == 1 || (kR % 4 == 0 && kD % 4 == 0), "FLOAT4 needs R % 4 == 0 and D % 4 == 0");
static_assert(!kExpanded || kD % (kTpq * kVec) == 0,
              "expanded needs D divisible by THREADS_PER_QUERY (x4 with FLOAT4)");
static_assert(kSplits == 1 || ((kSplits == 2 || kSplits == 4 || kSplits == 8) && kTc && !kWgmma && !kWgmmaWs &&
                                ALGORITHM != ALGORITHM_f16x3_wgmma_ws &&
                                (kHpb * kQpb) % kSplits == 0),
              "KEY_SPLITS (2, 4 or 8) is the mma.sync attention's (tf32x3, tf32x3_2k, tf32x3_kvgemm)");
static_assert(!kTc || (kTpq == 2 && kQpb % 16 == 0 && kStage &&
                       (kUnroll == 1 || kWgmmaWs || ALGORITHM == ALGORITHM_f16x3_wgmma_ws || kSplitOnce) &&
                       kKeyTile % 16 == 0),
              "tf32x3 needs THREADS_PER_QUERY 2 (a warp per 16 queries), QUERIES_PER_BLOCK a "
              "multiple of 16, STAGE_LATENT, UNROLL 1 (tf32x3 also 2: K and V split once; "
              "tf32x3_wgmma_ws and f16x3_wgmma_ws: their schedules) and KEY_TILE a multiple of 16");

// Absorbed: lane j owns the R-chunks j, j + kTpq, j + 2 kTpq, ... of kVec
// floats each; the last round may be partial (R need not divide evenly).
constexpr int kRChunks = kR / kVec;
constexpr int kChunksA = (kRChunks + kTpq - 1) / kTpq;
// Expanded: lane j owns the D-chunks j, j + kTpq, ... (D divides evenly).
// (1 in absorbed configs, where the expanded code is compiled but unused.)
constexpr int kChunksE = kExpanded ? kD / (kVec * kTpq) : 1;

// tf32x3: R and D padded to the MMA's 8 (zeros), and shared-memory rows of
// 8k + 4 floats, so that the fragment loads of a warp (8 rows x 4 columns,
// or 4 row pairs x 8 columns) fall in 32 distinct banks.
constexpr int kRp = (kR + 7) / 8 * 8;
constexpr int kDp = (kD + 7) / 8 * 8;
constexpr int kLs = kRp + 4;   // latent tile row stride
constexpr int kKs = kDp + 4;   // Q, K and V tile row stride
constexpr int kWarpsPerHead = kQpb / 16;

// Shared memory, in floats; the YAML's shared_memory expression is 4x this.
// Each head's K and V tile is padded by one lane-group width so that the
// heads met by one warp (when a warp spans several heads) use distinct banks.
// tf32x3: the latent tile, then per head K and V tiles and the block's
// (pre-scaled) query rows.
constexpr int kLatentTileFloats = k2k ? 0 : kTc ? kKeyTile * kLs : kStage ? kKeyTile * kR : 0;
constexpr int kHeadStride = kKeyTile * kD + kTpq * kVec;
// (tf32x3_2k: two K and V buffers, one loading while the other is read.)
constexpr int kKvTileFloats = k2k   ? kHpb * (4 * kKeyTile + kQpb) * kKs
                              : kTc ? kHpb * (2 * kKeyTile + kQpb) * kKs
                                  : kExpanded ? 2 * kHpb * kHeadStride : 0;
// tf32x3 with STAGE_WEIGHTS: both weight slices of every head of the block,
// rows of kWsPad floats (see kWs below).
constexpr int kWsPad = kDp % 16 == 0 ? kDp + 8 : kDp;
constexpr int kWeightFloats = kTc && STAGE_WEIGHTS ? kHpb * 2 * kRp * kWsPad : 0;
// (tf32x3 with UNROLL 2, kSplitOnce: the lo parts of its K and V tiles,
// after everything else.)
constexpr int kLoFloats = kSplitOnce ? 2 * kHpb * kKeyTile * kKs : 0;
// (tf32x3_wgmma: per head, Q, K and V^T tiles, each as TF32 hi and lo parts;
// tf32x3_wgmma_ws: Q hi and lo, then two buffers of K and V^T hi and lo;
// f16x3_wgmma_ws: mla_wgmma_f16.cuh's kF16SmemBytes, in halves and words;
// kDh, D padded to 16, is its Q K^T's k extent.)
constexpr int kDh = (kD + 15) / 16 * 16;
constexpr unsigned kSmemBytes = kWgmma     ? 4u * kHpb * 2 * kDp * (kQpb + 2 * kKeyTile)
                                : kWgmmaWs ? 4u * kDp * (2 * kQpb + 8 * kKeyTile)
                                : ALGORITHM == ALGORITHM_f16x3_wgmma_ws
                                    ? 6u * kQpb * kDh + 8u * kKeyTile * (kDh + kDp) + 4u * (5 * (kKeyTile + 4) + kQpb)
                                           : 4u * (kLatentTileFloats + kKvTileFloats + (k2k ? 0 : kWeightFloats) +
                                                   kLoFloats);
// fused_mla_expand_kv of tf32x3_kvgemm and tf32x3_wgmma is a GEMM of its own, [B*T, R] latent
// rows times [R, H*D] weights, in blocks of kXThreads threads that own
// kXRows latent rows (KEY_TILE) and kXCols columns of one head (16 x 32,
// 32 x 64 or 64 x 64), for K and V
// together (one latent tile feeds both).  It walks R in stages of kXK
// columns, double-buffered: the latent tile (rows of kXAs floats, 4 mod 32)
// and both weight tiles (rows of kXBs floats, 8 mod 32), so that the A and
// B fragment reads of a warp fall in 32 distinct banks.  Its block and grid
// do not depend on the attention's: the grid covers every (row tile, head,
// column tile), so that few latent rows (small B*T, decode) still fill the
// GPU.
constexpr int kXRows = kKeyTile;
constexpr int kXCols = kKeyTile == 16 ? 32 : 64;
// Warps as kXWarpRows x 4, each owning 16 (KEY_TILE 16) or 32 rows by 8 or
// 16 columns of K and of V: 128 threads, or 256 for the 64 x 64 tile.
constexpr int kXWarpRows = kKeyTile == 64 ? 2 : 1;
constexpr int kXThreads = 128 * kXWarpRows;
constexpr int kXK = 32;
constexpr int kXAs = kXK + 4;
constexpr int kXBs = kXCols + 8;
constexpr int kXStageFloats = kXRows * kXAs + 2 * kXK * kXBs;
// EXPAND_GEMM wgmma_m64 and wgmma_m128 (tf32x3_kvgemm and tf32x3_wgmma,
// sm_90a): the same GEMM on wgmma instead (mla_wgmma_expand.cuh), in blocks
// of kGRows latent rows (a warpgroup per 64) by kGCols virtual columns of K
// and of V; two raw stages (latent rows of kGAs floats, then the weights
// [k][K | V]) and two split stages (A and B^T, each hi then lo).
constexpr bool kWgExpand =
    kGemmPrologue && (EXPAND_GEMM == EXPAND_GEMM_wgmma_m64 || EXPAND_GEMM == EXPAND_GEMM_wgmma_m128);
constexpr int kGRows = EXPAND_GEMM == EXPAND_GEMM_wgmma_m128 ? 128 : 64;
constexpr int kGCols = kGRows / 2;
constexpr int kGN = 2 * kGCols;
constexpr int kGThreads = 2 * kGRows;
constexpr int kGK = 32;
constexpr int kGAs = kGK + 4;
constexpr int kGRawFloats = kGRows * kGAs + kGK * kGN;
constexpr int kGSplitFloats = 2 * (kGRows + kGN) * kGK;
// EXPAND_GEMM fma (few latent rows): fp32 FMAs on the CUDA cores, blocks of
// 256 threads over kFCols virtual columns of K or of V and kFRows latent rows
// at a time (mla_fma_expand.cuh); the latent rows transposed and the
// cross-warp partial sums in shared memory.
constexpr bool kFmaExpand = kGemmPrologue && EXPAND_GEMM == EXPAND_GEMM_fma;
constexpr int kFThreads = 256;
constexpr int kFCols = 16;
constexpr int kFRows = 8;
// EXPAND_GEMM fma_cluster (few latent rows, sm_90): the same FMAs with R
// split over a cluster of kCSplit blocks, each over kCCols virtual columns
// and its share of R (at most kCRsMax rows), kCRows latent rows at a time,
// the first kCPre weight rows of each thread in registers
// (mla_fma_cluster.cuh).
constexpr bool kFmaCluster = kGemmPrologue && EXPAND_GEMM == EXPAND_GEMM_fma_cluster;
constexpr int kCThreads = 384;
constexpr int kCCols = 128;
constexpr int kCRows = 16;
constexpr int kCSplit = MLA_FMA_CLUSTER_SPLIT;
constexpr int kCRsMax = 12 * ((kRp + 12 * kCSplit - 1) / (12 * kCSplit));
constexpr int kCPre = kCRsMax / 12 < 12 ? kCRsMax / 12 : 12;
// tf32x3_2k's prologue instead: the attention's block, the latent tile, one
// K and V tile per head, and the staged weights.
constexpr int kExpandThreads = kFmaCluster ? kCThreads : kFmaExpand ? kFThreads : kWgExpand ? kGThreads : kGemmPrologue ? kXThreads : kThreads;
constexpr unsigned kExpandSmemBytes =
    kFmaCluster     ? 4u * (kCRsMax * kCRows + 6 * kCRows * kCCols + kCRows * kCCols)
    : kFmaExpand    ? 4u * (kRp * kFRows + (kFThreads / 32) * kFCols * kFRows)
    : kWgExpand     ? 4u * 2 * (kGRawFloats + kGSplitFloats)
    : kGemmPrologue ? 4u * 2 * kXStageFloats
                    : 4u * (kKeyTile * kLs + 2 * kHpb * kKeyTile * kKs + kWeightFloats);

// The problem's extents as the tf32x3 code uses them: compile-time constants
// (exact), or the run-time arguments (bucketed), with D and R padded to the
// MMA's 8.  In exact configs every field is a constant after inlining, so the
// code is the same as with the constants written out.
struct Dims {
  int h, d, r;  // H, D, R
  int dp, rp;   // D and R padded to 8 (<= kDp, kRp)
  int ws_row;   // floats per workspace row [K | V]: 2 dp (tf32x3_2k)
};

// Whether a bucketed binary can serve the run-time H, D and R (always in
// exact configs, which ignore them).
__device__ __forceinline__ bool dims_fit(const Dims& dims) {
  if constexpr (kBucketed) {
    return dims.h >= kHpb && dims.h % kHpb == 0 && dims.d >= 1 && dims.d <= kD && dims.r >= 1 &&
           dims.r <= kR;
  } else {
    return true;
  }
}

__device__ __forceinline__ Dims make_dims(int H, int D, int R) {
  if constexpr (kBucketed) {
    const int dp = (D + 7) / 8 * 8;
    return Dims{H, D, R, dp, (R + 7) / 8 * 8, 2 * dp};
  } else {
    return Dims{kH, kD, kR, kDp, kRp, 2 * kDp};
  }
}

// Optional cross-checks of the YAML's launch expressions (scripts/check-templates
// passes what the space evaluates to): a mismatch is a compile error.
#ifdef MLA_EXPECT_THREADS
static_assert(kThreads == MLA_EXPECT_THREADS, "YAML block size != kernel's block size");
#endif
#ifdef MLA_EXPECT_SMEM_BYTES
static_assert(kSmemBytes == MLA_EXPECT_SMEM_BYTES, "YAML shared_memory != kernel's kSmemBytes");
#endif
#ifdef MLA_EXPECT_EXPAND_THREADS
static_assert(kExpandThreads == MLA_EXPECT_EXPAND_THREADS,
              "YAML prologue block != kernel's kExpandThreads");
#endif
#ifdef MLA_EXPECT_EXPAND_SMEM_BYTES
static_assert(kExpandSmemBytes == MLA_EXPECT_EXPAND_SMEM_BYTES,
              "YAML prologue shared_memory != kernel's kExpandSmemBytes");
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

// ---------------------------------------------------------------------------
// tf32x3
//
// Fragments of mma.sync m16n8k8 (TF32 in, fp32 accumulate), with g = lane/4
// and c = lane%4:  A (16x8, rows x k): a0 (g, c), a1 (g+8, c), a2 (g, c+4),
// a3 (g+8, c+4);  B (8x8, k x cols): b0 (c, g), b1 (c+4, g);  C (16x8):
// c0 (g, 2c), c1 (g, 2c+1), c2 (g+8, 2c), c3 (g+8, 2c+1).
//
// P.V takes P straight from the C fragments of the logits: the k index of
// the MMA is mapped to keys as k = c <-> key 2c and k = c+4 <-> key 2c+1 (a
// permutation of the 8 keys, which the sum over keys does not see), so
// a = (c0, c2, c1, c3) and V's B fragment reads keys 2c and 2c+1.
//
// Global memory reaches shared memory through cp.async (zero-filled outside
// the matrices), so that the query rows, the first latent tile and the
// weights cost one memory latency together, and the next latent tile loads
// while the current key tile is attended.

// x rounded to TF32 (10 explicit mantissa bits), to nearest with ties away
// from zero: what cvt.rna.tf32.f32 gives for every finite x and for inf, in
// two integer operations (on sm_90 the cvt is four: it adds an inf/NaN test
// and a select, and ncu found the splits' ALU work bounding the kernels).  A
// NaN may come out as another NaN or, for NaNs whose top mantissa bits are
// all set, as a zero; split_tf32's low part, x - hi, is then NaN, so a NaN
// operand still makes the product NaN.
__device__ __forceinline__ unsigned to_tf32(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }

// x = hi + lo with both parts TF32; lo holds the 13 bits hi dropped.
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
  hi = to_tf32(x);
  lo = to_tf32(x - __uint_as_float(hi));
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4],
                                         const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a.b to fp32 accuracy: the two small cross terms first.
__device__ __forceinline__ void mma_3xtf32(float (&d)[4], const unsigned (&ah)[4],
                                           const unsigned (&al)[4], const unsigned (&bh)[2],
                                           const unsigned (&bl)[2]) {
  mma_tf32(d, al, bh);
  mma_tf32(d, ah, bl);
  mma_tf32(d, ah, bh);
}

// A fragment of rows [0, 16) x columns [k0, k0 + 8) of a row-major tile
// with row stride `stride`, split.
__device__ __forceinline__ void load_a_split(const float* tile, int stride, int k0, int g, int c,
                                             unsigned (&hi)[4], unsigned (&lo)[4]) {
  const float* p = tile + g * stride + k0 + c;
  split_tf32(p[0], hi[0], lo[0]);
  split_tf32(p[8 * stride], hi[1], lo[1]);
  split_tf32(p[4], hi[2], lo[2]);
  split_tf32(p[8 * stride + 4], hi[3], lo[3]);
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// kVec floats from global to shared memory without passing through
// registers; `valid` false writes zeros (and reads nothing).
__device__ __forceinline__ void cp_async(float* dst, const float* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int n = valid ? 4 * kVec : 0;
  if constexpr (kVec == 4) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(n)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(n)
                 : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all_but_one() {
  asm volatile("cp.async.wait_group 1;" ::: "memory");
}

// Thread-block clusters (sm_90): EXPAND_GEMM fma_cluster and KEY_SPLITS.
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// Every thread of every block of the cluster: the shared-memory writes
// before it are visible to the cluster's reads after it.
__device__ __forceinline__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The same meeting without ordering: for a barrier whose only job is that
// every read of a block's shared memory (already consumed) is done.
__device__ __forceinline__ void cluster_barrier_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}

// 4 floats at `local`'s place in the shared memory of the cluster's block `rank`.
__device__ __forceinline__ float4 load_from_rank(const float* local, unsigned rank) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(local));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}

// Starts copying rows [0, rows) x columns [0, pad) of a row-major global
// matrix (row stride ld; rows below row_end and columns below cols exist)
// into a shared tile of row stride `stride`; the rest of the tile is zero.
// (cols and pad are constants in exact configs: the divisions below are by
// constants there.)
// (kN: the threads that share the copy, tid in [0, kN).)
template <int kN = kThreads>
__device__ __forceinline__ void stage_rows_async(float* tile, int stride, const float* src,
                                                 long long ld, int rows, int row_end, int cols,
                                                 int pad, int tid) {
  const int row_vecs = pad / kVec;
  const int total = rows * row_vecs;
  for (int idx = tid; idx < total; idx += kN) {
    const int row = idx / row_vecs;
    const int col = (idx - row * row_vecs) * kVec;
    const bool valid = row < row_end && col < cols;  // kVec == 4 implies cols % 4 == 0
    cp_async(tile + row * stride + col, valid ? src + row * ld + col : src, valid);
  }
}

// The expansion (tc_expand, below) works on kNPair column groups of 8 at a
// time: the column groups that cover D padded to 8 (kDGroups / kNPair in
// exact configs), and the columns they span (<= kDp: bucketed capacities
// are multiples of 16).
constexpr int kMTiles = kKeyTile / 16;
constexpr int kDGroups = kDp / 8;
constexpr int kNPair = kDGroups % 2 == 0 ? 2 : 1;
__device__ __forceinline__ int tc_pairs(const Dims& dims) { return (dims.dp / 8 + kNPair - 1) / kNPair; }
__device__ __forceinline__ int tc_columns(const Dims& dims) { return tc_pairs(dims) * kNPair * 8; }

// Weights staged per head (STAGE_WEIGHTS): w_up_k and w_up_v slices of
// kRp x kDp, row stride kWs, which is 8 or 24 mod 32 so that the B fragment
// reads (4 rows x 8 columns) hit 32 distinct banks.
constexpr bool kStageW = STAGE_WEIGHTS != 0;
constexpr int kWs = kWsPad;

// Starts copying head h0 + i's w_up_k and w_up_v slices into their places in
// the staged weights (STAGE_WEIGHTS): rp rows of the expansion's column
// extent (tc_columns), zeros beyond D and R.
__device__ __forceinline__ void stage_head_weights_async(float* wtile, const float* w_up_k,
                                                         const float* w_up_v, int h0, int i,
                                                         const Dims& dims, int tid) {
  const long long ld = static_cast<long long>(dims.h) * dims.d;
  stage_rows_async(wtile + (i * 2) * kRp * kWs, kWs, w_up_k + (h0 + i) * dims.d, ld, dims.rp, dims.r,
                   dims.d, tc_columns(dims), tid);
  stage_rows_async(wtile + (i * 2 + 1) * kRp * kWs, kWs, w_up_v + (h0 + i) * dims.d, ld, dims.rp, dims.r,
                   dims.d, tc_columns(dims), tid);
}

// K and V tiles (kKeyTile x kDp per head) = latent tile (kKeyTile x kRp) .
// w_up_{k,v}[:, h, :].  A unit of work is one matrix of one head and kNPair
// column groups of 8, over all kKeyTile rows, so that each split A fragment
// feeds kNPair MMAs and each split B fragment feeds kKeyTile / 16.
// Accuracy: the tensor cores do not round their fp32 accumulation to
// nearest, and that error grows with the length of the chain (measured here:
// relative L2 ~2e-8 R with one chain over R); each chunk of kRChunk latent
// columns is therefore summed in fresh registers and added with an fp32 add.
constexpr int kWarps = kThreads / 32;
constexpr int kRChunk = 32;

// kSplitStore (UNROLL 2): K and V are stored split, the TF32 hi parts in
// ktile and vtile, the lo parts at the same places in klo and vlo.
template <bool kSplitStore = false>
__device__ __forceinline__ void tc_expand(const float* __restrict__ w_up_k,
                                          const float* __restrict__ w_up_v, const float* wtile,
                                          const float* lat_tile, float* ktile, float* vtile,
                                          float* klo, float* vlo, int h0, int warp, int g, int c,
                                          const Dims& dims) {
  const int pairs = tc_pairs(dims);
  const int units = kHpb * 2 * pairs;
  for (int unit = warp; unit < units; unit += kWarps) {
    const int group = unit % pairs;
    const int rest = unit / pairs;
    const bool is_v = rest % 2 != 0;
    const int hl = rest / 2;
    const float* w = (is_v ? w_up_v : w_up_k) + (h0 + hl) * dims.d;
    const float* ws = wtile + (hl * 2 + (is_v ? 1 : 0)) * kRp * kWs;
    float acc[kMTiles][kNPair][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int j = 0; j < kNPair; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][j][e] = 0.0f;
#pragma unroll 1
    for (int kc = 0; kc < dims.rp; kc += kRChunk) {
      float part[kMTiles][kNPair][4];
#pragma unroll
      for (int m = 0; m < kMTiles; ++m)
#pragma unroll
        for (int j = 0; j < kNPair; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) part[m][j][e] = 0.0f;
#pragma unroll
      for (int k0 = kc; k0 < kc + kRChunk; k0 += 8) {
        if (k0 >= dims.rp) break;
        unsigned bh[kNPair][2], bl[kNPair][2];
#pragma unroll
        for (int j = 0; j < kNPair; ++j) {
          const int d = (group * kNPair + j) * 8 + g;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int r = k0 + c + 4 * e;
            float x;
            if constexpr (kStageW) {
              x = ws[r * kWs + d];
            } else {
              x = (d < dims.d && r < dims.r) ? __ldg(w + static_cast<long long>(r) * (dims.h * dims.d) + d)
                                       : 0.0f;
            }
            split_tf32(x, bh[j][e], bl[j][e]);
          }
        }
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          unsigned ah[4], al[4];
          load_a_split(lat_tile + m * 16 * kLs, kLs, k0, g, c, ah, al);
#pragma unroll
          for (int j = 0; j < kNPair; ++j) mma_3xtf32(part[m][j], ah, al, bh[j], bl[j]);
        }
      }
#pragma unroll
      for (int m = 0; m < kMTiles; ++m)
#pragma unroll
        for (int j = 0; j < kNPair; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[m][j][e] += part[m][j][e];
    }
    float* dst = (is_v ? vtile : ktile) + hl * kKeyTile * kKs;
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
      for (int j = 0; j < kNPair; ++j) {
        const int col = (group * kNPair + j) * 8 + 2 * c;
        float* p = dst + (m * 16 + g) * kKs + col;
        if constexpr (kSplitStore) {
          float* p_lo = (is_v ? vlo : klo) + hl * kKeyTile * kKs + (m * 16 + g) * kKs + col;
          unsigned hi[4], lo[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) split_tf32(acc[m][j][e], hi[e], lo[e]);
          *reinterpret_cast<uint2*>(p) = make_uint2(hi[0], hi[1]);
          *reinterpret_cast<uint2*>(p + 8 * kKs) = make_uint2(hi[2], hi[3]);
          *reinterpret_cast<uint2*>(p_lo) = make_uint2(lo[0], lo[1]);
          *reinterpret_cast<uint2*>(p_lo + 8 * kKs) = make_uint2(lo[2], lo[3]);
        } else {
          *reinterpret_cast<float2*>(p) = make_float2(acc[m][j][0], acc[m][j][1]);
          *reinterpret_cast<float2*>(p + 8 * kKs) = make_float2(acc[m][j][2], acc[m][j][3]);
        }
      }
    }
  }
}

constexpr int kKeyGroups = kKeyTile / 8;

// KEY_SPLITS: the end of tf32x3 for split `split` of a cluster of kSplits
// blocks that share one query tile.  Each block leaves its partial state in
// its own shared memory, per row of the block (hl * kQpb + query, row stride
// kKs): O before the division in [0, dp), the running maximum (log2 units)
// at kDp and the row sum at kDp + 1.  After a cluster barrier, rank `split`
// merges rows [split, split + 1) * kHpb kQpb / kSplits of every block, four
// columns a thread: M = max m_j, w_j = 2^(m_j - M), out = sum w_j O_j / sum
// w_j l_j (split 0 holds key 0, which no row masks, so M is finite); a
// split without keys for a row has m = -inf and adds nothing.  A second
// barrier keeps every block (and its shared memory) until the others have
// read it.  Every thread reaches both barriers: nothing returns early.
template <int kGroups>
__device__ __forceinline__ void key_split_merge(const float (&o)[kGroups][4], const float (&m_run)[2],
                                                const float (&l_run)[2], float* __restrict__ out, int T,
                                                int b, int t0, int h0, int split, int tid, float* smem,
                                                const Dims& dims) {
  const int warp = tid / 32;
  const int g = (tid % 32) / 4;
  const int c = tid % 4;
  const int lrow0 = (warp / kWarpsPerHead) * kQpb + (warp % kWarpsPerHead) * 16;
  cp_async_wait_all();  // (a split without keys still staged its first tile)
  __syncthreads();      // every warp is done with the tiles the state overwrites
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    float* row = smem + (lrow0 + g + 8 * r) * kKs;
#pragma unroll
    for (int j = 0; j < kGroups; ++j) {
      if (j * 8 >= dims.dp) break;  // bucketed: past the actual D
      row[j * 8 + 2 * c] = o[j][2 * r];
      row[j * 8 + 2 * c + 1] = o[j][2 * r + 1];
    }
    if (c == 0) {
      row[kDp] = m_run[r];
      row[kDp + 1] = l;
    }
  }
  cluster_barrier();
  constexpr int kRowsPer = kHpb * kQpb / kSplits;
  const int chunks = dims.dp / 4;
  for (int idx = tid; idx < kRowsPer * chunks; idx += kThreads) {
    const int lr = split * kRowsPer + idx / chunks;
    const int d0 = (idx - (idx / chunks) * chunks) * 4;
    const int t = t0 + lr % kQpb;
    if (t >= T) continue;
    const float* row = smem + lr * kKs;
    float mj[kSplits], lj[kSplits];
    float mx = neg_inf();
#pragma unroll
    for (int j = 0; j < kSplits; ++j) {
      const float4 ml = load_from_rank(row + kDp, j);
      mj[j] = ml.x;
      lj[j] = ml.y;
      mx = fmaxf(mx, ml.x);
    }
    float l = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < kSplits; ++j) {
      const float w = ex2(mj[j] - mx);
      const float4 v = load_from_rank(row + d0, j);
      l += lj[j] * w;
      acc.x += v.x * w;
      acc.y += v.y * w;
      acc.z += v.z * w;
      acc.w += v.w * w;
    }
    const float inv_l = 1.0f / l;
    float* dst = out + ((static_cast<long long>(b) * T + t) * dims.h + h0 + lr / kQpb) * dims.d + d0;
    const float x[4] = {acc.x * inv_l, acc.y * inv_l, acc.z * inv_l, acc.w * inv_l};
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (d0 + e < dims.d) dst[e] = x[e];
  }
  cluster_barrier_relaxed();
}

__device__ __forceinline__ void tf32x3(const float* __restrict__ q,
                                       const float* __restrict__ kv_latent,
                                       const float* __restrict__ w_up_k,
                                       const float* __restrict__ w_up_v, float* __restrict__ out,
                                       const float* __restrict__ kv_ws, int T, float scale, int b,
                                       int t0, int h0, int s_end, int split, int tid, float* smem,
                                       const Dims& dims) {
  const int warp = tid / 32;
  const int g = (tid % 32) / 4;
  const int c = tid % 4;
  const int hl = warp / kWarpsPerHead;
  const int row0 = t0 + (warp % kWarpsPerHead) * 16;  // the warp's first query
  const int h = h0 + hl;

  // tf32x3: latent tile, K, V, queries, weights.  tf32x3_2k: K and V of
  // buffer 0, K and V of buffer 1, queries.
  constexpr int kKvFloats = kHpb * kKeyTile * kKs;
  float* lat_tile = smem;
  float* ktile = smem + kLatentTileFloats;
  float* vtile = ktile + kKvFloats;
  float* qtile = k2k ? smem + 4 * kKvFloats : vtile + kKvFloats;
  float* wtile = qtile + kHpb * kQpb * kKs;  // kWeightFloats (STAGE_WEIGHTS)
  // UNROLL 2: the lo parts of the K tiles, then of the V tiles (kLoFloats)
  float* lo_tile = smem + kLatentTileFloats + kKvTileFloats + (k2k ? 0 : kWeightFloats);
  const float* lat_b = kv_latent + static_cast<long long>(b) * T * dims.r;
  // The block's keys: [s_begin, s_stop), whole key tiles (KEY_SPLITS: its
  // split's share of the tile's key tiles, ceil(tiles / kSplits) each, so
  // that the last shares may be shorter or empty).
  int s_begin = 0, s_stop = s_end;
  if constexpr (kSplits > 1) {
    const int per = ((s_end + kKeyTile - 1) / kKeyTile + kSplits - 1) / kSplits;
    s_begin = min(s_end, split * per * kKeyTile);
    s_stop = min(s_end, (split + 1) * per * kKeyTile);
  }
  // K and V rows [s0, s0 + kKeyTile) of the block's heads from the
  // workspace into buffer `buf` (tf32x3_2k).
  auto load_kv = [&](int s0, int buf) {
#pragma unroll 1
    for (int i = 0; i < kHpb; ++i) {
      const float* src =
          kv_ws + ((static_cast<long long>(b) * dims.h + h0 + i) * T + s0) * dims.ws_row;
      float* kdst = smem + buf * 2 * kKvFloats + i * kKeyTile * kKs;
      stage_rows_async(kdst, kKs, src, dims.ws_row, kKeyTile, s_end - s0, dims.dp, dims.dp, tid);
      stage_rows_async(kdst + kKvFloats, kKs, src + dims.dp, dims.ws_row, kKeyTile, s_end - s0, dims.dp,
                       dims.dp, tid);
    }
  };

  // One round trip for everything the first key tile needs.
#pragma unroll 1
  for (int i = 0; i < kHpb; ++i) {
    stage_rows_async(qtile + i * kQpb * kKs, kKs,
                     q + ((static_cast<long long>(b) * T + t0) * dims.h + h0 + i) * dims.d,
                     static_cast<long long>(dims.h) * dims.d, kQpb, T - t0, dims.d, dims.dp, tid);
    if constexpr (kStageW && !k2k) stage_head_weights_async(wtile, w_up_k, w_up_v, h0, i, dims, tid);
  }
  if constexpr (k2k) {
    load_kv(s_begin, 0);
  } else {
    stage_rows_async(lat_tile, kLs, lat_b + static_cast<long long>(s_begin) * dims.r, dims.r, kKeyTile,
                     s_end - s_begin, dims.r, dims.rp, tid);
  }
  cp_async_commit();

  const float* qs = qtile + (hl * kQpb + (warp % kWarpsPerHead) * 16) * kKs;
  // Logits in log2 units (softmax by ex2).
  const float lscale = scale * 1.4426950408889634f;

  float o[kDGroups][4];
#pragma unroll
  for (int j = 0; j < kDGroups; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
  float m_run[2] = {neg_inf(), neg_inf()};  // rows g and g + 8
  float l_run[2] = {0.0f, 0.0f};            // this lane's share of the row sums

  for (int s0 = s_begin, it = 0; s0 < s_stop; s0 += kKeyTile, ++it) {
    const float* ks;
    const float* vs;
    cp_async_wait_all();
    if constexpr (k2k) {
      // This tile's K and V (and the queries) landed, and every warp is done
      // with the other buffer: the next tile loads into it during attention.
      __syncthreads();
      const int buf = it & 1;
      ks = smem + buf * 2 * kKvFloats + hl * kKeyTile * kKs;
      vs = ks + kKvFloats;
      if (s0 + kKeyTile < s_stop) {
        load_kv(s0 + kKeyTile, buf ^ 1);
        cp_async_commit();
      }
    } else {
      __syncthreads();  // the latent tile (and queries, weights) landed; K, V free
      tc_expand<kSplitOnce>(w_up_k, w_up_v, wtile, lat_tile, ktile, vtile, lo_tile, lo_tile + kKvFloats, h0,
                            warp, g, c, dims);
      __syncthreads();  // K and V ready; the latent tile is free
      if (s0 + kKeyTile < s_stop) {
        stage_rows_async(lat_tile, kLs, lat_b + static_cast<long long>(s0 + kKeyTile) * dims.r, dims.r,
                         kKeyTile, s_end - s0 - kKeyTile, dims.r, dims.rp, tid);
        cp_async_commit();
      }
      ks = ktile + hl * kKeyTile * kKs;
      vs = vtile + hl * kKeyTile * kKs;
    }
    // (UNROLL 2: ks and vs hold the hi parts, these the lo parts.)
    const float* ks_lo = lo_tile + hl * kKeyTile * kKs;
    const float* vs_lo = ks_lo + kKvFloats;
    // Key tiles start at multiples of 16 and so do the warp's rows: a tile
    // the warp reaches at all holds key s0 <= every row of the warp, so no
    // row's maximum stays -inf.
    if (s0 > row0 + 15 || row0 >= T) continue;

    float s[kKeyGroups][4];
#pragma unroll
    for (int n = 0; n < kKeyGroups; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
#pragma unroll
    for (int k0 = 0; k0 < kDp; k0 += 8) {
      if (k0 >= dims.dp) break;  // bucketed: past the actual D (never in exact configs)
      unsigned ah[4], al[4];
      load_a_split(qs, kKs, k0, g, c, ah, al);
#pragma unroll
      for (int n = 0; n < kKeyGroups; ++n) {
        const float* kp = ks + (n * 8 + g) * kKs + k0 + c;
        unsigned bh[2], bl[2];
        if constexpr (kSplitOnce) {
          const float* kl = ks_lo + (n * 8 + g) * kKs + k0 + c;
          bh[0] = __float_as_uint(kp[0]);
          bh[1] = __float_as_uint(kp[4]);
          bl[0] = __float_as_uint(kl[0]);
          bl[1] = __float_as_uint(kl[4]);
        } else {
          split_tf32(kp[0], bh[0], bl[0]);
          split_tf32(kp[4], bh[1], bl[1]);
        }
        mma_3xtf32(s[n], ah, al, bh, bl);
      }
    }

    const int qrow[2] = {row0 + g, row0 + g + 8};
    const bool diagonal = s0 + kKeyTile - 1 > row0;  // some key is after some row
#pragma unroll
    for (int n = 0; n < kKeyGroups; ++n) {
      const int key = s0 + n * 8 + 2 * c;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] *= lscale;
        if (diagonal && key + (e & 1) > qrow[e >> 1]) s[n][e] = neg_inf();
      }
    }

    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = neg_inf();
#pragma unroll
      for (int n = 0; n < kKeyGroups; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[r], mx);
      corr[r] = ex2(m_run[r] - m_new);  // m_run == -inf gives 0
      m_run[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeyGroups; ++n) {
        s[n][2 * r] = ex2(s[n][2 * r] - m_new);
        s[n][2 * r + 1] = ex2(s[n][2 * r + 1] - m_new);
        sum += s[n][2 * r] + s[n][2 * r + 1];
      }
      l_run[r] = l_run[r] * corr[r] + sum;
    }
#pragma unroll
    for (int j = 0; j < kDGroups; ++j) {
      o[j][0] *= corr[0];
      o[j][1] *= corr[0];
      o[j][2] *= corr[1];
      o[j][3] *= corr[1];
    }

#pragma unroll
    for (int n = 0; n < kKeyGroups; ++n) {
      if (s0 + n * 8 > row0 + 15) break;  // every key of this group is masked (warp-uniform)
      unsigned ah[4], al[4];
      split_tf32(s[n][0], ah[0], al[0]);
      split_tf32(s[n][2], ah[1], al[1]);
      split_tf32(s[n][1], ah[2], al[2]);
      split_tf32(s[n][3], ah[3], al[3]);
      const float* vp = vs + (n * 8 + 2 * c) * kKs + g;
#pragma unroll
      for (int j = 0; j < kDGroups; ++j) {
        if (j * 8 >= dims.dp) break;  // bucketed: past the actual D
        unsigned bh[2], bl[2];
        if constexpr (kSplitOnce) {
          const float* vl = vs_lo + (n * 8 + 2 * c) * kKs + g;
          bh[0] = __float_as_uint(vp[j * 8]);
          bh[1] = __float_as_uint(vp[kKs + j * 8]);
          bl[0] = __float_as_uint(vl[j * 8]);
          bl[1] = __float_as_uint(vl[kKs + j * 8]);
        } else {
          split_tf32(vp[j * 8], bh[0], bl[0]);
          split_tf32(vp[kKs + j * 8], bh[1], bl[1]);
        }
        mma_3xtf32(o[j], ah, al, bh, bl);
      }
    }
  }

  if constexpr (kSplits > 1) {
    key_split_merge(o, m_run, l_run, out, T, b, t0, h0, split, tid, smem, dims);
    return;
  }
  if (row0 >= T) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int t = row0 + g + 8 * r;
    if (t >= T) continue;
    const float inv_l = 1.0f / l;
    float* dst = out + ((static_cast<long long>(b) * T + t) * dims.h + h) * dims.d;
    // float2 stores need an even D (8-byte aligned rows); bucketed: decided
    // at run time.
    const bool even_d = kBucketed ? dims.d % 2 == 0 : kD % 2 == 0;
#pragma unroll
    for (int j = 0; j < kDGroups; ++j) {
      const int d = j * 8 + 2 * c;
      const float x0 = o[j][2 * r] * inv_l;
      const float x1 = o[j][2 * r + 1] * inv_l;
      if (even_d) {
        if (d < dims.d) *reinterpret_cast<float2*>(dst + d) = make_float2(x0, x1);
      } else {
        if (d < dims.d) dst[d] = x0;
        if (d + 1 < dims.d) dst[d + 1] = x1;
      }
    }
  }
}

// ---- tf32x3_2k's prologue: K and V of every (b, h, s) as one GEMM ----
// (the tile constants kX* are defined with the shared-memory sizes above)
constexpr int kXWarpCols = kXThreads / 32 / kXWarpRows;
constexpr int kXM = kXRows / kXWarpRows / 16;       // MMA row blocks per warp
constexpr int kXGroups = kXCols / kXWarpCols / 8;  // column groups of 8 per warp
static_assert(kXRows % (16 * kXWarpRows) == 0 && kXCols % (8 * kXWarpCols) == 0 && kXK == kRChunk,
              "the prologue's tiles are whole MMA blocks, and a stage is one accuracy chunk");

// Where a block's tile lies: latent rows [n0, n0 + kXRows) of the B*T rows,
// columns [d0, d0 + kXCols) of head h (the padding columns D..8*ceil(D/8)
// included, so that they are written as zeros).
struct ExpandTile {
  int n0, h, d0;
};

// Starts copying stage k0 (latent columns and weight rows [k0, k0 + kXK))
// into the stage buffer `st`: the latent tile, then w_up_k's and w_up_v's.
// Zeros past the matrices' ends (rows, R, D).
__device__ __forceinline__ void expand_stage_async(float* st, const float* kv_latent,
                                                   const float* w_up_k, const float* w_up_v,
                                                   const ExpandTile& tile, int rows, int k0,
                                                   const Dims& dims, int tid) {
  stage_rows_async<kXThreads>(st, kXAs, kv_latent + static_cast<long long>(tile.n0) * dims.r + k0,
                              dims.r, kXRows, rows - tile.n0, dims.r - k0, kXK, tid);
  const long long ld = static_cast<long long>(dims.h) * dims.d;
  const long long w0 = k0 * ld + static_cast<long long>(tile.h) * dims.d + tile.d0;
  float* wt = st + kXRows * kXAs;
  stage_rows_async<kXThreads>(wt, kXBs, w_up_k + w0, ld, kXK, dims.r - k0, dims.d - tile.d0, kXCols,
                              tid);
  stage_rows_async<kXThreads>(wt + kXK * kXBs, kXBs, w_up_v + w0, ld, kXK, dims.r - k0,
                              dims.d - tile.d0, kXCols, tid);
}

// acc[m][j][0 = K, 1 = V] += the stage's products, summed in fresh registers
// first (see tc_expand on the tensor cores' accumulation error).
__device__ __forceinline__ void expand_stage_mma(const float* st, int k0, int warp, int g, int c,
                                                 const Dims& dims,
                                                 float (&acc)[kXM][kXGroups][2][4]) {
  float part[kXM][kXGroups][2][4];
#pragma unroll
  for (int m = 0; m < kXM; ++m)
#pragma unroll
    for (int j = 0; j < kXGroups; ++j)
#pragma unroll
      for (int x = 0; x < 2; ++x)
#pragma unroll
        for (int e = 0; e < 4; ++e) part[m][j][x][e] = 0.0f;
  const float* wt = st + kXRows * kXAs;
#pragma unroll
  for (int kk = 0; kk < kXK; kk += 8) {
    if (k0 + kk >= dims.rp) break;  // past R padded to 8 (zeros)
    unsigned bh[kXGroups][2][2], bl[kXGroups][2][2];
#pragma unroll
    for (int j = 0; j < kXGroups; ++j)
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const float* p = wt + x * kXK * kXBs + (kk + c) * kXBs + ((warp % kXWarpCols) * kXGroups + j) * 8 + g;
        split_tf32(p[0], bh[j][x][0], bl[j][x][0]);
        split_tf32(p[4 * kXBs], bh[j][x][1], bl[j][x][1]);
      }
#pragma unroll
    for (int m = 0; m < kXM; ++m) {
      unsigned ah[4], al[4];
      load_a_split(st + ((warp / kXWarpCols) * kXM + m) * 16 * kXAs, kXAs, kk, g, c, ah, al);
#pragma unroll
      for (int j = 0; j < kXGroups; ++j)
#pragma unroll
        for (int x = 0; x < 2; ++x) mma_3xtf32(part[m][j][x], ah, al, bh[j][x], bl[j][x]);
    }
  }
#pragma unroll
  for (int m = 0; m < kXM; ++m)
#pragma unroll
    for (int j = 0; j < kXGroups; ++j)
#pragma unroll
      for (int x = 0; x < 2; ++x)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][j][x][e] += part[m][j][x][e];
}

// The block's K and V into kv_ws rows [(b, h, s)], K in columns [0, dp) and
// V in [dp, 2 dp); every column pair is below dp or wholly past it (dp and
// the pair's first column are even).
__device__ __forceinline__ void expand_store(float* kv_ws, const ExpandTile& tile, int T, int rows,
                                             int warp, int g, int c, const Dims& dims,
                                             const float (&acc)[kXM][kXGroups][2][4]) {
#pragma unroll
  for (int m = 0; m < kXM; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int n = tile.n0 + ((warp / kXWarpCols) * kXM + m) * 16 + g + 8 * half;
      if (n >= rows) continue;
      const int b = n / T;
      float* row = kv_ws + ((static_cast<long long>(b) * dims.h + tile.h) * T + (n - b * T)) * dims.ws_row;
#pragma unroll
      for (int j = 0; j < kXGroups; ++j) {
        const int d = tile.d0 + ((warp % kXWarpCols) * kXGroups + j) * 8 + 2 * c;
        if (d >= dims.dp) continue;
#pragma unroll
        for (int x = 0; x < 2; ++x)
          *reinterpret_cast<float2*>(row + x * dims.dp + d) =
              make_float2(acc[m][j][x][2 * half], acc[m][j][x][2 * half + 1]);
      }
    }
}

// One block tile: R in double-buffered stages (the next stage loads while
// this one multiplies).
__device__ __forceinline__ void expand_tile_gemm(const float* kv_latent, const float* w_up_k,
                                                 const float* w_up_v, float* kv_ws,
                                                 const ExpandTile& tile, int T, int rows,
                                                 const Dims& dims, float* smem, int tid) {
  const int warp = tid / 32;
  const int g = (tid % 32) / 4;
  const int c = tid % 4;
  float acc[kXM][kXGroups][2][4];
#pragma unroll
  for (int m = 0; m < kXM; ++m)
#pragma unroll
    for (int j = 0; j < kXGroups; ++j)
#pragma unroll
      for (int x = 0; x < 2; ++x)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][j][x][e] = 0.0f;
  const int stages = (dims.rp + kXK - 1) / kXK;
  expand_stage_async(smem, kv_latent, w_up_k, w_up_v, tile, rows, 0, dims, tid);
  cp_async_commit();
#pragma unroll 1
  for (int i = 0; i < stages; ++i) {
    if (i + 1 < stages)
      expand_stage_async(smem + ((i + 1) & 1) * kXStageFloats, kv_latent, w_up_k, w_up_v, tile, rows,
                         (i + 1) * kXK, dims, tid);
    cp_async_commit();  // possibly empty: the wait below always leaves one group
    cp_async_wait_all_but_one();
    __syncthreads();  // stage i landed for every thread
    expand_stage_mma(smem + (i & 1) * kXStageFloats, i * kXK, warp, g, c, dims, acc);
    __syncthreads();  // stage i read: its buffer is the next load's
  }
  expand_store(kv_ws, tile, T, rows, warp, g, c, dims, acc);
}

}  // namespace mla


namespace mla {

// tf32x3_2k's prologue: a block per (key tile, head group, batch) expands
// its KEY_TILE latent rows into K and V for its heads with the fused
// algorithm's tc_expand, then writes them out.
__device__ __forceinline__ void expand_key_tile(const float* __restrict__ kv_latent,
                                                const float* __restrict__ w_up_k,
                                                const float* __restrict__ w_up_v,
                                                float* __restrict__ kv_ws, int B, int T,
                                                const Dims& dims, float* smem) {
  const int head_groups = dims.h / kHpb;
  const int ntiles = (T + kKeyTile - 1) / kKeyTile;
  const int tile = blockIdx.x % ntiles;
  const int rest = blockIdx.x / ntiles;
  const int hg = rest % head_groups;
  const int b = rest / head_groups;
  if (b >= B) return;  // whole block
  const int s0 = tile * kKeyTile;
  const int h0 = hg * kHpb;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int g = (tid % 32) / 4;
  const int c = tid % 4;

  float* lat_tile = smem;
  float* ktile = lat_tile + kKeyTile * kLs;
  float* vtile = ktile + kHpb * kKeyTile * kKs;
  float* wtile = vtile + kHpb * kKeyTile * kKs;
  const float* lat_b = kv_latent + static_cast<long long>(b) * T * dims.r;
  if constexpr (kStageW) {
#pragma unroll 1
    for (int i = 0; i < kHpb; ++i)
      stage_head_weights_async(wtile, w_up_k, w_up_v, h0, i, dims, tid);
  }
  stage_rows_async(lat_tile, kLs, lat_b + static_cast<long long>(s0) * dims.r, dims.r, kKeyTile,
                   T - s0, dims.r, dims.rp, tid);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  tc_expand(w_up_k, w_up_v, wtile, lat_tile, ktile, vtile, nullptr, nullptr, h0, warp, g, c, dims);
  __syncthreads();

  // Out in 16-byte pieces: consecutive threads write consecutive columns.
  const int rows = min(kKeyTile, T - s0);
  const int row_vecs = dims.ws_row / 4;
  for (int idx = tid; idx < kHpb * kKeyTile * row_vecs; idx += kThreads) {
    const int col = (idx % row_vecs) * 4;
    const int r = (idx / row_vecs) % kKeyTile;
    const int i = idx / (row_vecs * kKeyTile);
    if (r >= rows) continue;
    const float* src =
        (col < dims.dp ? ktile + col : vtile + (col - dims.dp)) + (i * kKeyTile + r) * kKs;
    *reinterpret_cast<float4*>(
        kv_ws + ((static_cast<long long>(b) * dims.h + h0 + i) * T + s0 + r) * dims.ws_row + col) =
        *reinterpret_cast<const float4*>(src);
  }
}

}  // namespace mla

#include "mla_wgmma.cuh"
#include "mla_wgmma_ws.cuh"
#include "mla_wgmma_f16.cuh"
#include "mla_wgmma_expand.cuh"
#include "mla_fma_expand.cuh"
#include "mla_fma_cluster.cuh"

// The prologue of tf32x3_2k, tf32x3_kvgemm and tf32x3_wgmma (launched first, on the same
// stream, with the same arguments): K and V of every (b, h, s) into kv_ws,
// laid out as [B][H][T][K | V] with rows of 2 x (D padded to 8) floats (the
// padding columns are zero; bucketed: D is the run-time D, as in the YAML's
// shape of kv_ws, not the capacity).
// Launch, tf32x3_2k: grid [ceil(T / KEY_TILE) * (H / HEADS_PER_BLOCK) * B],
// the main kernel's block.  tf32x3_kvgemm and tf32x3_wgmma: grid [ceil(B * T / kXRows) * H *
// ceil(dp / kXCols)] (dp: D padded to 8), block [kXThreads]; with EXPAND_GEMM
// wgmma_*, grid [ceil(B * T / kGRows) * ceil(H * dp / kGCols)], block
// [kGThreads]; with EXPAND_GEMM fma, grid [2 * ceil(H * dp / kFCols)], block
// [kFThreads]; with EXPAND_GEMM fma_cluster, grid [8 * 2 * ceil(H * dp /
// kCCols)] in clusters of 8 (__cluster_dims__), block [kCThreads].  Dynamic shared
// memory mla::kExpandSmemBytes.  Another block or too little shared memory
// traps; blocks past the grid's tiles return.  Other algorithms never
// launch it.
// Compiled apart (the space's prologue.apart): the framework compiles the
// main part with MLATUNE_PART_MAIN, which leaves this kernel out, and the
// prologue part with MLATUNE_PART_PROLOGUE, which leaves the main kernel out;
// each kernel's code is the same as in a compile of both.
#ifndef MLATUNE_PART_MAIN
#if EXPAND_GEMM == EXPAND_GEMM_fma_cluster && \
    (ALGORITHM == ALGORITHM_tf32x3_kvgemm || ALGORITHM == ALGORITHM_tf32x3_wgmma || \
     ALGORITHM == ALGORITHM_tf32x3_wgmma_ws || ALGORITHM == ALGORITHM_f16x3_wgmma_ws)
#define MLA_EXPAND_CLUSTER __cluster_dims__(MLA_FMA_CLUSTER_SPLIT, 1, 1)
#else
#define MLA_EXPAND_CLUSTER
#endif
extern "C" __global__ void MLA_EXPAND_CLUSTER __launch_bounds__(mla::kExpandThreads,
                                             mla::kFmaCluster ? 1
                                             : mla::kFmaExpand ? 2
                                             : mla::kWgExpand ? (mla::kGRows == 128 ? 1 : 2)
                                             : mla::kGemmPrologue ? 2 : 1)
fused_mla_expand_kv(const float* __restrict__ q, const float* __restrict__ kv_latent,
                    const float* __restrict__ w_up_k, const float* __restrict__ w_up_v,
                    float* __restrict__ out, float* __restrict__ kv_ws, int B, int T, float scale,
                    int H, int D, int R) {
  using namespace mla;
  if constexpr (!k2k) {
    __trap();
  } else {
    extern __shared__ float4 smem_f4[];
    float* smem = reinterpret_cast<float*>(smem_f4);
    unsigned dynamic_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
    if (blockDim.x != kExpandThreads || blockDim.y != 1 || blockDim.z != 1 ||
        dynamic_smem < kExpandSmemBytes)
      __trap();
    const Dims dims = make_dims(H, D, R);
    if (!dims_fit(dims)) __trap();
    if constexpr (!kGemmPrologue) {
      expand_key_tile(kv_latent, w_up_k, w_up_v, kv_ws, B, T, dims, smem);
    } else if constexpr (kFmaCluster) {
      fma_cluster_block(kv_latent, w_up_k, w_up_v, kv_ws, B, T, dims, smem, threadIdx.x);
    } else if constexpr (kFmaExpand) {
      fma_expand_block(kv_latent, w_up_k, w_up_v, kv_ws, B, T, dims, smem, threadIdx.x);
    } else if constexpr (kWgExpand) {
      // Block -> (row tile, column tile), row tiles fastest: the blocks that
      // read one slice of the weights (usually the larger operand) run
      // together, and the latent rows stay in L2.
      const int rows = B * T;
      const int row_tiles = (rows + kGRows - 1) / kGRows;
      const int bid = static_cast<int>(blockIdx.x);
      const WgxTile tile{(bid % row_tiles) * kGRows, (bid / row_tiles) * kGCols, rows,
                         dims.r % 4 == 0 && (reinterpret_cast<unsigned long long>(kv_latent) & 15) == 0,
                         dims.d % 4 == 0 && (reinterpret_cast<unsigned long long>(w_up_k) & 15) == 0 &&
                             (reinterpret_cast<unsigned long long>(w_up_v) & 15) == 0};
      if (tile.n0 >= dims.h * dims.dp) return;  // whole block
      wgx_tile(kv_latent, w_up_k, w_up_v, kv_ws, tile, T, dims, smem, threadIdx.x);
    } else {
      // Block -> (row tile, head, column tile), column tiles fastest: the
      // blocks that read one latent tile run together.
      const int rows = B * T;
      const int col_tiles = (dims.dp + kXCols - 1) / kXCols;
      const int ct = blockIdx.x % col_tiles;
      const int rest = blockIdx.x / col_tiles;
      const ExpandTile tile{(rest / dims.h) * kXRows, rest % dims.h, ct * kXCols};
      if (tile.n0 >= rows) return;  // whole block
      expand_tile_gemm(kv_latent, w_up_k, w_up_v, kv_ws, tile, T, rows, dims, smem, threadIdx.x);
    }
  }
}

#endif  // MLATUNE_PART_MAIN

#ifndef MLATUNE_PART_PROLOGUE
#if KEY_SPLITS > 1
#define MLA_KEY_SPLIT_CLUSTER __cluster_dims__(KEY_SPLITS, 1, 1)
#else
#define MLA_KEY_SPLIT_CLUSTER
#endif
// Launch: grid [ceil(T / QUERIES_PER_BLOCK) * (H / HEADS_PER_BLOCK) * B
// * KEY_SPLITS] (KEY_SPLITS > 1: clusters of KEY_SPLITS blocks),
// block [mla::kThreads: THREADS_PER_QUERY * QUERIES_PER_BLOCK *
// HEADS_PER_BLOCK, plus 128 for the ws algorithms' producer], dynamic shared
// memory mla::kSmemBytes; anything else traps.  kv_ws is read by
// tf32x3_2k only (written by fused_mla_expand_kv just before); the other
// algorithms get a null pointer.
extern "C" __global__ void MLA_KEY_SPLIT_CLUSTER __launch_bounds__(mla::kThreads, 1)
fused_mla_attention(const float* __restrict__ q, const float* __restrict__ kv_latent,
                    const float* __restrict__ w_up_k, const float* __restrict__ w_up_v,
                    float* __restrict__ out, const float* __restrict__ kv_ws, int B, int T,
                    float scale, int H, int D, int R) {
  using namespace mla;
  extern __shared__ float4 smem_f4[];
  float* smem = reinterpret_cast<float*>(smem_f4);

  unsigned dynamic_smem;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_smem));
  const bool geometry_ok = blockDim.x == kThreads && blockDim.y == 1 && blockDim.z == 1 &&
                           static_cast<long long>(dynamic_smem) >= static_cast<long long>(kSmemBytes);
  if (!geometry_ok) __trap();

  // Bucketed: a shape beyond the binary's capacity is the caller's error
  // (the space's check() rejects it); trap rather than write out of bounds.
  const Dims dims = make_dims(H, D, R);
  if (!dims_fit(dims)) __trap();

  // Block -> (query tile, head group, batch); the heaviest (last) query tiles
  // get the lowest block numbers so they start first.
  const int head_groups = dims.h / kHpb;
  const int ntiles = (T + kQpb - 1) / kQpb;
  const int per_tile = head_groups * B;
  // (KEY_SPLITS: the kSplits blocks of a cluster share one such block's
  // work; the cluster's rank of this one is its split.)
  const int bid = blockIdx.x / kSplits;
  const int split = blockIdx.x % kSplits;
  const int tile_rank = bid / per_tile;
  if (tile_rank >= ntiles) return;  // whole block: no barrier is skipped
  const int rest = bid - tile_rank * per_tile;
  const int hg = rest % head_groups;
  const int b = rest / head_groups;
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

  if constexpr (kWgmma) {
    wgmma_attention(q, out, kv_ws, T, scale, b, t0, hg * kHpb, s_end, tid, smem, dims);
  } else if constexpr (kWgmmaWs) {
    wgmma_ws_attention(q, out, kv_ws, T, scale, b, t0, hg, s_end, tid, smem, dims);
  } else if constexpr (kF16Ws) {
    wgmma_f16_attention(q, out, kv_ws, T, scale, b, t0, hg, s_end, tid, smem, dims);
  } else if constexpr (kTc) {
    tf32x3(q, kv_latent, w_up_k, w_up_v, out, kv_ws, T, scale, b, t0, hg * kHpb, s_end, split, tid,
           smem, dims);
  } else if constexpr (kExpanded) {
    expanded(q, kv_latent, w_up_k, w_up_v, out, T, scale, b, t, hg * kHpb, hl, active, s_end,
             tid, lane, smem);
  } else {
    absorbed(q, kv_latent, w_up_k, w_up_v, out, T, scale, b, t, hg * kHpb + hl, active, s_end,
             tid, lane, smem);
  }
}
#endif  // MLATUNE_PART_PROLOGUE
