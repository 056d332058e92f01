// tf32x3_wgmma_ws: tf32x3_wgmma's attention, warp-specialized (sm_90a only),
// included by fused_mla_attention.cu after mla_wgmma.cuh, whose operand
// layout, descriptors, split products, softmax and store it uses.
//
// tf32x3_wgmma has every thread of a block stage and split each K/V tile,
// then wait at a barrier, then run the tile's MMAs, then wait again: the
// tensor cores idle while the tile is loaded and split, and the loads'
// latency is exposed once per tile.  Here one more warpgroup, the producer,
// does only that staging, into a ring of kWsStages buffers, while the
// QUERIES_PER_BLOCK / 64 consumer warpgroups do only the MMAs and the
// softmax:
//   producer, tile i:  load K and V rows of tile i (registers); wait until
//                      the consumers have released buffer i % kWsStages;
//                      split into TF32 hi and lo and store (K, and V
//                      transposed); fence.proxy.async; arrive at "full".
//   consumer, tile i:  wait at "full"; S = Q K^T, online softmax, O += P V
//                      (as tf32x3_wgmma); arrive at "empty" once its wgmma
//                      have read the buffer.
// The loads of tile i are in flight while the producer waits for a buffer,
// and the split of tile i + 1 runs while the consumers compute on tile i;
// as in tf32x3_wgmma, every consumer warpgroup of the block reads the same
// staged tile.
//
// Hand-off: named barriers (bar.sync / bar.arrive with the block's thread
// count), "full" and "empty" per buffer.  A barrier's arrivals are ordered
// before its completion for memory, and the producer's fence.proxy.async
// makes its generic stores visible to the tensor cores' reads.  Each phase
// of a barrier completes before the next begins: the producer arrives at
// "full" of a buffer again only after waiting at its "empty", which the
// consumers reach only after waiting at that "full".  A consumer arrives at
// "empty" only for a tile the producer will wait for (tile i + kWsStages
// exists), so no barrier is left with arrivals at exit.
//
// UNROLL picks the consumers' schedule (the softmax's "keys per step" means
// nothing here: a step is always a whole tile):
//   1  one tile at a time, as above (ws_consume);
//   2  tile i's S = Q K^T issued together with tile i - 1's P V, so that
//      the tensor cores have both queued, and the softmax of tile i placed
//      between the two waits (ws_consume_overlap); with two or more consumer
//      warpgroups the producer hands registers to them (setmaxnreg);
//   4  as 2, with Q's TF32 hi part in the consumers' registers (the A
//      operand of two of S's three products), so that those products read
//      only K from shared memory.
// Measured on an H100 (2026-12-06, docs/performance.md): with 2 the best
// config was within 1% of 1's at S1-S3 and 4% faster at S4; with 4, 12.6%
// faster at S4 (128 query rows, KEY_TILE 16), 3-4% slower at S2-S3.  ptxas
// (13.0) put the second wait before the softmax in the one SASS inspected
// (64 rows, KEY_TILE 16, D 64): the softmax does not overlap P V there.
//
// HEADS_PER_BLOCK is 1 (one head's K/V ring).  Consumers whose 64 rows end
// before a tile (the causal diagonal of a block of several warpgroups) wait
// and release it without computing.  Shared memory (floats): Q hi and lo
// (QUERIES_PER_BLOCK x D padded to 8, as in tf32x3_wgmma), then kWsStages
// buffers of K hi, K lo, V^T hi, V^T lo (KEY_TILE x D padded to 8 each).

namespace mla {

constexpr int kWsStages = 2;
constexpr int kWsConsumers = kQpb / kWgRows;        // consumer warpgroups
constexpr int kWsStageFloats = 4 * kWgKFloats;      // K hi, K lo, V^T hi, V^T lo
constexpr int kWsThreads = 128 * (kWsConsumers + 1);  // the block: consumers, then the producer
constexpr int kWsPieces = kKeyTile * (kDp / 4);      // 16-byte pieces of a K (or V) tile
constexpr int kWsPiecesPerThread = (kWsPieces + 127) / 128;
constexpr int kWsFull = 1;                // named barriers kWsFull + buffer (0 is __syncthreads)
constexpr int kWsEmpty = 1 + kWsStages;   // and kWsEmpty + buffer
static_assert(!kWgmmaWs || (kHpb == 1 && kQpb % kWgRows == 0 && kTpq == 2 && kThreads == kWsThreads &&
                            (kKeyTile == 16 || kKeyTile == 32 || kKeyTile == 64)),
              "tf32x3_wgmma_ws: HEADS_PER_BLOCK 1, QUERIES_PER_BLOCK a multiple of 64, THREADS_PER_QUERY 2, "
              "KEY_TILE 16, 32 or 64; the block is the consumers plus one producer warpgroup");
static_assert(!kWgmmaWs || kUnroll == 1 || kUnroll == 2 || kUnroll == 4, "tf32x3_wgmma_ws: UNROLL 1, 2 or 4");
// Registers per thread with UNROLL 2 and 4 and two or more consumer
// warpgroups: the block starts with kWsEntryRegs a thread
// (__launch_bounds__(kThreads, 1)); the producer keeps room for its loads in
// flight (8 registers per 16-byte piece of K and of V, and 72 for the rest:
// 40 spilled at D 64) and gives the rest to the consumers.
constexpr int kWsEntryRegs = (65536 / kWsThreads < 255 ? 65536 / kWsThreads : 255) & ~7;
constexpr int kWsProducerRegs = (8 * kWsPiecesPerThread + 72 + 7) & ~7;
constexpr int kWsConsumerRegsFree =  // (another algorithm's kQpb may be below 64)
    kWsConsumers > 0 ? ((kWsConsumers + 1) * kWsEntryRegs - kWsProducerRegs) / kWsConsumers : kWsEntryRegs;
constexpr int kWsConsumerRegs = (kWsConsumerRegsFree < 240 ? kWsConsumerRegsFree : 240) & ~7;
constexpr bool kWsRebalance =
    kUnroll > 1 && kWsConsumers >= 2 && kWsConsumerRegs > kWsEntryRegs && kWsProducerRegs < kWsEntryRegs;
static_assert(!kWgmmaWs || kSmemBytes == 4u * (2 * kWgQFloats + kWsStages * kWsStageFloats),
              "kSmemBytes must be tf32x3_wgmma_ws's layout");

__device__ __forceinline__ void ws_wait(int barrier) {
  asm volatile("bar.sync %0, %1;" ::"r"(barrier), "r"(kWsThreads) : "memory");
}
__device__ __forceinline__ void ws_arrive(int barrier) {
  asm volatile("bar.arrive %0, %1;" ::"r"(barrier), "r"(kWsThreads) : "memory");
}

// The producer warpgroup (ptid 0..127): every key tile the block needs,
// [0, s_end), into the ring.  Rows at or beyond s_end, and columns the
// workspace does not hold (bucketed: past the run-time D), are zero.
__device__ __forceinline__ void ws_produce(float* ring, const float* kv_ws, int b, int h, int T, int s_end,
                                           const Dims& dims, int ptid) {
  const float* head = kv_ws + (static_cast<long long>(b) * dims.h + h) * T * dims.ws_row;
  const int ntiles = (s_end + kKeyTile - 1) / kKeyTile;
  for (int i = 0; i < ntiles; ++i) {
    const int s0 = i * kKeyTile;
    float4 k[kWsPiecesPerThread], v[kWsPiecesPerThread];
#pragma unroll
    for (int j = 0; j < kWsPiecesPerThread; ++j) {
      const int idx = ptid + 128 * j;
      const WgPiece p = wg_piece(idx);
      k[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      v[j] = k[j];
      if (idx < kWsPieces && s0 + p.row < s_end && p.col < dims.dp) {
        const float* src = head + static_cast<long long>(s0 + p.row) * dims.ws_row + p.col;
        k[j] = __ldg(reinterpret_cast<const float4*>(src));
        v[j] = __ldg(reinterpret_cast<const float4*>(src + dims.dp));
      }
    }
    const int buf = i % kWsStages;
    if (i >= kWsStages) ws_wait(kWsEmpty + buf);  // the consumers are done with tile i - kWsStages
    float* khi = ring + buf * kWsStageFloats;
    float* klo = khi + kWgKFloats;
    float* vhi = klo + kWgKFloats;
    float* vlo = vhi + kWgKFloats;
#pragma unroll
    for (int j = 0; j < kWsPiecesPerThread; ++j) {
      const int idx = ptid + 128 * j;
      if (idx >= kWsPieces) break;
      const WgPiece p = wg_piece(idx);
      wg_store_split(khi, klo, wg_offset(p.row, p.col, kDp), k[j]);
      const int slot = wg_key_slot(p.row);
      const float vx[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        unsigned hi, lo;
        split_tf32(vx[e], hi, lo);
        const int at = wg_offset(p.col + e, slot, kKeyTile);
        vhi[at] = __uint_as_float(hi);
        vlo[at] = __uint_as_float(lo);
      }
    }
    wg_proxy_fence();  // the tensor cores read what these stores wrote
    ws_arrive(kWsFull + buf);
  }
}

// A consumer warpgroup (tid 0 .. 128 kWsConsumers - 1): its 64 query rows
// over every tile of the ring, then its rows of out.
__device__ __forceinline__ void ws_consume(const float* smem, float* out, int T, float scale, int b, int t0,
                                           int h, int s_end, int tid, const Dims& dims) {
  const int wg_row = (tid / 128) * kWgRows;
  const int wrow0 = t0 + wg_row;
  const int row = wrow0 + ((tid / 32) % 4) * 16 + (tid % 32) / 4;  // this thread's rows: row, row + 8
  const float* qhi = smem + wg_offset(wg_row, 0, kDp);
  const float* qlo = qhi + kWgQFloats;
  const float* ring = smem + 2 * kWgQFloats;
  const float lscale = scale * 1.4426950408889634f;  // logits in log2 units (softmax by ex2)
  const int last_key = wrow0 < T ? min(wrow0 + kWgRows, T) - 1 : -1;  // its rows' last key; -1: no row
  const int ntiles = (s_end + kKeyTile - 1) / kKeyTile;

  float o[kDp / 2];
#pragma unroll
  for (int i = 0; i < kDp / 2; ++i) o[i] = 0.0f;
  float m_run[2] = {neg_inf(), neg_inf()};
  float l_run[2] = {0.0f, 0.0f};

  for (int i = 0; i < ntiles; ++i) {
    const int s0 = i * kKeyTile;
    const int buf = i % kWsStages;
    const float* khi = ring + buf * kWsStageFloats;
    const float* klo = khi + kWgKFloats;
    const float* vhi = klo + kWgKFloats;
    const float* vlo = vhi + kWgKFloats;
    ws_wait(kWsFull + buf);
    // The tile as wgmma_attention's loop runs it (mla_wgmma.cuh), kept apart:
    // moving that loop's body into a function shared with this one changed
    // the PTX of 14 of the 44 shipped tf32x3_wgmma entries (NVVM schedules
    // it differently), which would have to be measured again on an H200.
    // For the same reason this function shares nothing with
    // ws_consume_overlap (UNROLL 2 and 4), though they begin alike: taking
    // the nine lines of setup from one helper gave every ws config other
    // code (code_identities, 2026-12-06), unmeasured on a GPU.
    if (s0 <= last_key) {  // uniform over the warpgroup
      float s[kKeyTile / 2];
#pragma unroll
      for (int k = 0; k < kKeyTile / 2; ++k) s[k] = 0.0f;
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
      wg_pin<kDp / 2>(o);
      wg_fence();
#pragma unroll
      for (int n = 0; n < kKeyTile / 8; ++n) wg_pv<0>(o, ph[n], pl[n], vhi, vlo, n * 64, dims.dp);
      wg_commit();
      wg_wait_all();  // the buffer is read: it may be released
      wg_pin<kDp / 2>(o);
    }
    if (i + kWsStages < ntiles) ws_arrive(kWsEmpty + buf);
  }

  if (wrow0 >= T) return;
  wg_store_out(out, o, l_run, b, row, h, T, dims);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void ws_wait_one() { asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); }
#else
__device__ __forceinline__ void ws_wait_one() {}
#endif
// S = 0, before the wg_fence that precedes its product: no instruction
// but a wgmma may write a wgmma's registers between the fence and the wait.
__device__ __forceinline__ void ws_zero_scores(float (&s)[kKeyTile / 2]) {
#pragma unroll
  for (int k = 0; k < kKeyTile / 2; ++k) s[k] = 0.0f;
  wg_pin<kKeyTile / 2>(s);
}

// S += Q K^T of one staged tile, issued and committed (not waited for).
__device__ __forceinline__ void ws_issue_scores(float (&s)[kKeyTile / 2], const float* qhi, const float* qlo,
                                                const float* khi, const float* klo, const Dims& dims) {
#pragma unroll
  for (int k0 = 0; k0 < kDp; k0 += 8) {
    if (k0 >= dims.dp) break;  // bucketed: past the actual D
    const int at = k0 * 8;     // wg_offset(0, k0, .)
    wg_mma3_ss<kKeyTile>(s, qhi + at, qlo + at, kDp, khi + at, klo + at, kDp);
  }
  wg_commit();
}

// The same with Q's hi part in registers (UNROLL 4): qh[k] is the A
// fragment of columns 8 k .. 8 k + 7 (m64k8: rows g and g + 8, columns
// 8 k + c and 8 k + c + 4); Q lo . K hi still reads Q lo from shared memory.
template <int kFrags>  // kDp / 8 (a template, so that UNROLL 2 need not instantiate it)
__device__ __forceinline__ void ws_issue_scores(float (&s)[kKeyTile / 2], const unsigned (&qh)[kFrags][4],
                                                const float* qlo, const float* khi, const float* klo,
                                                const Dims& dims) {
#pragma unroll
  for (int k = 0; k < kFrags; ++k) {
    if (8 * k >= dims.dp) break;  // bucketed: past the actual D
    const int at = k * 64;        // wg_offset(0, 8 k, .)
    const unsigned long long bh = wg_desc(khi + at, kDp);
    wg_mma_ss<kKeyTile>(s, wg_desc(qlo + at, kDp), bh);
    wg_mma_rs<kKeyTile>(s, qh[k], wg_desc(klo + at, kDp));
    wg_mma_rs<kKeyTile>(s, qh[k], bh);
  }
  wg_commit();
}

// O += P V of one staged tile, issued and committed (not waited for).
__device__ __forceinline__ void ws_issue_pv(float (&o)[kDp / 2], const unsigned (&ph)[kKeyTile / 8][4],
                                            const unsigned (&pl)[kKeyTile / 8][4], const float* stage,
                                            const Dims& dims) {
  const float* vhi = stage + 2 * kWgKFloats;
  const float* vlo = vhi + kWgKFloats;
#pragma unroll
  for (int n = 0; n < kKeyTile / 8; ++n) wg_pv<0>(o, ph[n], pl[n], vhi, vlo, n * 64, dims.dp);
  wg_commit();
}

// P (the softmax's output in s) split into TF32 hi and lo, in the A
// operand's register order.
__device__ __forceinline__ void ws_split_p(const float (&s)[kKeyTile / 2], unsigned (&ph)[kKeyTile / 8][4],
                                           unsigned (&pl)[kKeyTile / 8][4]) {
#pragma unroll
  for (int n = 0; n < kKeyTile / 8; ++n) {
    split_tf32(s[4 * n], ph[n][0], pl[n][0]);
    split_tf32(s[4 * n + 2], ph[n][1], pl[n][1]);
    split_tf32(s[4 * n + 1], ph[n][2], pl[n][2]);
    split_tf32(s[4 * n + 3], ph[n][3], pl[n][3]);
  }
}

// ws_consume with UNROLL 2 and 4: its 64 query rows over every tile of the
// ring, then its rows of out.  The tiles its rows see are a prefix of the
// block's, [0, mine); for those, tile i's S = Q K^T is issued together with
// tile i - 1's P V (after FlashAttention-3's intra-warpgroup overlap):
//   wait S(i) (wait_group 1); softmax; wait P V(i - 1) (wait_group 0);
//   release buffer i - 1; O *= correction; split P(i) into TF32 hi and lo.
// The split waits for P V(i - 1): that wgmma reads P(i - 1)'s registers
// until it completes, and ptxas serializes every wgmma (C7513) when P(i) is
// written into other registers before the wait (it merges the two).  The
// tiles past its rows are only waited for and released.
__device__ __forceinline__ void ws_consume_overlap(const float* smem, float* out, int T, float scale, int b,
                                                   int t0, int h, int s_end, int tid, const Dims& dims) {
  const int wg_row = (tid / 128) * kWgRows;
  const int wrow0 = t0 + wg_row;
  const int row = wrow0 + ((tid / 32) % 4) * 16 + (tid % 32) / 4;  // this thread's rows: row, row + 8
  const float* qhi = smem + wg_offset(wg_row, 0, kDp);
  const float* qlo = qhi + kWgQFloats;
  const float* ring = smem + 2 * kWgQFloats;
  const float lscale = scale * 1.4426950408889634f;  // logits in log2 units (softmax by ex2)
  const int last_key = wrow0 < T ? min(wrow0 + kWgRows, T) - 1 : -1;  // its rows' last key; -1: no row
  const int ntiles = (s_end + kKeyTile - 1) / kKeyTile;
  const int mine = last_key < 0 ? 0 : min(ntiles, last_key / kKeyTile + 1);  // uniform over the warpgroup

  float o[kDp / 2];
#pragma unroll
  for (int i = 0; i < kDp / 2; ++i) o[i] = 0.0f;
  float m_run[2] = {neg_inf(), neg_inf()};
  float l_run[2] = {0.0f, 0.0f};

  // UNROLL 4: Q's hi part in registers, as ws_issue_scores reads it.
  constexpr int kQFrags = kUnroll == 4 ? kDp / 8 : 1;
  unsigned qh[kQFrags][4];
  if constexpr (kUnroll == 4) {
    const int g = ((tid / 32) % 4) * 16 + (tid % 32) / 4, c = tid % 4;
#pragma unroll
    for (int k = 0; k < kQFrags; ++k) {
      const int at0 = wg_offset(g, 8 * k + c, kDp), at1 = wg_offset(g + 8, 8 * k + c, kDp);
      const int at2 = wg_offset(g, 8 * k + c + 4, kDp), at3 = wg_offset(g + 8, 8 * k + c + 4, kDp);
      qh[k][0] = __float_as_uint(qhi[at0]);
      qh[k][1] = __float_as_uint(qhi[at1]);
      qh[k][2] = __float_as_uint(qhi[at2]);
      qh[k][3] = __float_as_uint(qhi[at3]);
    }
  }
  auto issue_scores = [&](float (&s)[kKeyTile / 2], const float* stage) {
    if constexpr (kUnroll == 4)
      ws_issue_scores(s, qh, qlo, stage, stage + kWgKFloats, dims);
    else
      ws_issue_scores(s, qhi, qlo, stage, stage + kWgKFloats, dims);
  };

  if (mine > 0) {
    float s[kKeyTile / 2];
    float corr[2];
    unsigned ph[kKeyTile / 8][4], pl[kKeyTile / 8][4];
    ws_wait(kWsFull + 0);
    ws_zero_scores(s);
    wg_fence();
    issue_scores(s, ring);
    wg_wait_all();
    wg_pin<kKeyTile / 2>(s);
    wg_softmax(s, 0, row, lscale, m_run, l_run, corr);  // O is zero: no correction
    ws_split_p(s, ph, pl);
    for (int i = 1; i < mine; ++i) {
      const int buf = i % kWsStages, prev = (i - 1) % kWsStages;
      const float* stage = ring + buf * kWsStageFloats;
      ws_wait(kWsFull + buf);
      ws_zero_scores(s);
      wg_pin<kDp / 2>(o);
      wg_fence();
      issue_scores(s, stage);
      ws_issue_pv(o, ph, pl, ring + prev * kWsStageFloats, dims);
      ws_wait_one();  // S(i) is done; P V(i - 1) may still run
      wg_pin<kKeyTile / 2>(s);
      wg_softmax(s, i * kKeyTile, row, lscale, m_run, l_run, corr);
      wg_wait_all();
      wg_pin<kDp / 2>(o);
      ws_split_p(s, ph, pl);  // after the wait: P V(i - 1) reads ph and pl until then
      if (i - 1 + kWsStages < ntiles) ws_arrive(kWsEmpty + prev);  // buffer i - 1 is read
#pragma unroll
      for (int j = 0; j < kDp / 8; ++j) {
        o[4 * j] *= corr[0];
        o[4 * j + 1] *= corr[0];
        o[4 * j + 2] *= corr[1];
        o[4 * j + 3] *= corr[1];
      }
    }
    const int last = mine - 1;
    wg_pin<kDp / 2>(o);
    wg_fence();
    ws_issue_pv(o, ph, pl, ring + (last % kWsStages) * kWsStageFloats, dims);
    wg_wait_all();
    wg_pin<kDp / 2>(o);
    if (last + kWsStages < ntiles) ws_arrive(kWsEmpty + last % kWsStages);
  }
  // The block's tiles past this warpgroup's rows: waited for and released.
  for (int i = mine; i < ntiles; ++i) {
    const int buf = i % kWsStages;
    ws_wait(kWsFull + buf);
    if (i + kWsStages < ntiles) ws_arrive(kWsEmpty + buf);
  }

  if (wrow0 >= T) return;
  wg_store_out(out, o, l_run, b, row, h, T, dims);
}

// The attention of one block: Q staged and split by every thread, then the
// roles split (see the top of this file).
__device__ __forceinline__ void wgmma_ws_attention(const float* __restrict__ q, float* __restrict__ out,
                                                   const float* __restrict__ kv_ws, int T, float scale, int b,
                                                   int t0, int h, int s_end, int tid, float* smem,
                                                   const Dims& dims) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma needs sm_90a
#endif
  wg_stage_q(smem, q, b, t0, h, T, dims, tid);
  wg_proxy_fence();  // Q is read by the tensor cores
  __syncthreads();
  if (tid >= 128 * kWsConsumers) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (kWsRebalance) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kWsProducerRegs));
#endif
    ws_produce(smem + 2 * kWgQFloats, kv_ws, b, h, T, s_end, dims, tid - 128 * kWsConsumers);
  } else {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (kWsRebalance) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kWsConsumerRegs));
#endif
    if constexpr (kUnroll == 1)
      ws_consume(smem, out, T, scale, b, t0, h, s_end, tid, dims);
    else
      ws_consume_overlap(smem, out, T, scale, b, t0, h, s_end, tid, dims);
  }
}

}  // namespace mla
