// f16x3_wgmma_ws: tf32x3_wgmma_ws's warp-specialized attention (sm_90a
// only) with every fp32 product made of three FP16 products instead of
// three TF32 ones: FP16 wgmma (m64nNk16) runs at twice TF32's rate and
// reads half the bytes.  Included by fused_mla_attention.cu after
// mla_wgmma_ws.cuh, whose ring, barriers, producer/consumer split and
// store it shares.
//
// The split (after Ootomo & Yokota 2022, arXiv 2203.03341).  A value x,
// first scaled by a power of two 2^e so that the largest of its group lies
// in [8, 16), is hi = fp16(x 2^e) and lo = fp16((x 2^e - hi) 2^11): about
// 22 significant bits, as TF32's hi and lo.  A product a b is then
//   2^11 a' b' = (hi_a 2^11) hi_b + hi_a lo_b + lo_a hi_b      (lo lo dropped)
// three FP16 products accumulated in one fp32 accumulator: hi_a 2^11 is
// exact in FP16 because |hi_a| < 16.  The power-of-two scales are what
// FP16's range needs (inputs scaled by 2^+-20 overflow or vanish in FP16
// unscaled; tests/fp16_split_emulation_test.cpp shows it on the CPU):
//   Q K^T  one exponent per query row (the block's Q, staged once) and one
//          per key row (the producer, per tile): the logits are scaled back
//          per element in fp32, before the softmax.
//   P V    P in [0, 1] unscaled; V one exponent per key tile, taken as the
//          smallest over the tiles so far (the largest V seen), so that it
//          never grows: O is kept in units of 2^(11 + e_V), and when a tile
//          lowers e_V the softmax's correction of O carries the factor
//          2^(e_new - e_old) <= 1 (no overflow, no extra pass).
// In every group, values below about 2^-35 of its largest (where lo falls
// under FP16's subnormals) are lost.  For V the group is every tile so
// far: a row whose weights sit only on values that small, after a much
// larger V in an earlier tile, loses them (the validation's input kinds,
// rows scaled by 2^+-20 among them, stay within 4.1e-6).
// Exponents come from a maximum over the group through shared-memory
// atomicMax on the float bits (|x| >= 0 orders like its bits): per query
// row while Q is staged (the consumers), per key row and per V tile in the
// producer, three scratch arrays in turn so that each is cleared two tiles
// before it is used again (see ws_f16_produce).  A group of zeros gets the
// largest exponent, 126, which the running minimum of V's never takes from
// a nonzero tile; so does a group whose largest is an fp32 subnormal
// (scaled by 2^126 only).
//
// FP16 operands use wgmma's canonical K-major layout without swizzle, core
// matrices of 8 rows x 8 halves (128 contiguous bytes), the same byte
// geometry as tf32x3_wgmma's (mla_wgmma.cuh).  Q K^T runs over D padded to
// 16 (kDh, defined beside kSmemBytes: the k of one instruction), the
// padding zero.  FP16's A fragment of m64nNk16 is exactly the S
// accumulators of two consecutive groups of 8 keys, so P V takes P from
// registers with no permutation, and V^T stores keys in order.
//
// UNROLL picks the consumers' schedule as in tf32x3_wgmma_ws: 1 one tile
// at a time (ws_f16_consume), 2 tile i's S issued beside tile i - 1's P V
// (ws_f16_consume_overlap; no registers handed over: the producer keeps
// its share).  Scope: SHAPE_BUCKETS exact, HEADS_PER_BLOCK 1 (the space
// says so).
//
// Shared memory (bytes): Q 2^11 hi, hi and lo (3 x QUERIES_PER_BLOCK x kDh
// halves), then kWsStages buffers of K hi, K lo (KEY_TILE x kDh halves
// each), V^T hi, V^T lo (kDp x KEY_TILE halves each), then per buffer the
// key rows' factors 2^-e and V's exponent (KEY_TILE + 4 floats), three
// scratch arrays for the producer's maxima (KEY_TILE + 4 words each) and
// the query rows' maxima (QUERIES_PER_BLOCK words).

namespace mla {

constexpr bool kF16Ws = ALGORITHM == ALGORITHM_f16x3_wgmma_ws;
constexpr int kFhQ = kQpb * kDh;                  // halves per Q array
constexpr int kFhK = kKeyTile * kDh;              // halves per K array
constexpr int kFhV = kDp * kKeyTile;              // halves per V^T array
constexpr int kFhStage = 2 * kFhK + 2 * kFhV;     // halves per ring buffer
constexpr int kFhMeta = kKeyTile + 4;             // floats (words) per buffer's factors, per scratch
constexpr unsigned kF16SmemBytes =
    2u * (3 * kFhQ + kWsStages * kFhStage) + 4u * (kWsStages * kFhMeta + 3 * kFhMeta + kQpb);
constexpr int kF16Sync = 1 + 2 * kWsStages;       // the producer's own named barrier
constexpr int kFvUnits = (kKeyTile / 8) * kDp;    // the producer's V units: 8 keys of one column
constexpr int kFvPer = (kFvUnits + 127) / 128;    // V units per producer thread
// The producer holds the next tile's loads while it splits one
// (F16Tile, ws_f16_produce) where two tiles' registers and about 64 more
// fit in what __launch_bounds__ leaves a thread (kWsEntryRegs): at 384
// threads KEY_TILE 16 and 32 at D 64 do, KEY_TILE 64 (64 registers a tile)
// does not (it spilled 160 bytes, sm_90a, NVRTC 13.0).
constexpr int kF16TileRegs = 4 * kWsPiecesPerThread + 8 * kFvPer;
constexpr bool kF16Prefetch = 2 * kF16TileRegs + 64 <= kWsEntryRegs;
static_assert(!kF16Ws || (kHpb == 1 && kQpb % kWgRows == 0 && kTpq == 2 && kThreads == kWsThreads &&
                          (kUnroll == 1 || kUnroll == 2) && !kBucketed &&
                          (kKeyTile == 16 || kKeyTile == 32 || kKeyTile == 64)),
              "f16x3_wgmma_ws: HEADS_PER_BLOCK 1, QUERIES_PER_BLOCK a multiple of 64, THREADS_PER_QUERY 2, "
              "UNROLL 1 or 2, SHAPE_BUCKETS exact, KEY_TILE 16, 32 or 64; the block is the consumers plus one "
              "producer warpgroup");
static_assert(!kF16Ws || kSmemBytes == kF16SmemBytes, "kSmemBytes must be f16x3_wgmma_ws's layout");

// Offset (halves) of element (row, k) of a K-major FP16 operand with
// `kcols` columns: core matrices of 8 rows x 8 halves.
__device__ __forceinline__ int wh_offset(int row, int k, int kcols) {
  return (row >> 3) * (8 * kcols) + (k >> 3) * 64 + (row & 7) * 8 + (k & 7);
}

// As wg_desc, for FP16 operands: 8-row groups 16 kcols bytes apart.
__device__ __forceinline__ unsigned long long wh_desc(const unsigned short* p, int kcols) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(p));
  const unsigned long long start = (addr & 0x3ffffu) >> 4;
  const unsigned long long lbo = 128u >> 4;
  const unsigned long long sbo = static_cast<unsigned>(16 * kcols) >> 4;
  return start | (lbo << 16) | (sbo << 32);
}

// 2^e for e in [-126, 127], exactly.
__device__ __forceinline__ float f16_pow2(int e) { return __int_as_float((e + 127) << 23); }

// The exponent e that puts a group whose largest magnitude is m (given by
// its float bits) in [8, 16): m = f 2^E with f in [0.5, 1), e = 4 - E,
// capped at 126 (zero and fp32 subnormals).
__device__ __forceinline__ int f16_exp(unsigned m_bits) {
  const int biased = static_cast<int>((m_bits >> 23) & 0xffu);
  return biased == 0 ? 126 : min(126, 4 - (biased - 126));
}

// Two floats as one f16x2 word, `first` in the low half.
__device__ __forceinline__ unsigned f16_pack(float first, float second) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(second), "f"(first));
  return r;
}

// A pair (a, b), already scaled, as FP16 hi and lo (lo scaled by 2^11),
// each an f16x2 word with a in the low half: hi rounded once, its value
// read back from the packed word for lo.
__device__ __forceinline__ void f16_split2(float a, float b, unsigned& hi, unsigned& lo) {
  hi = f16_pack(a, b);
  float ha, hb;
  asm("{\n.reg .f16 l, u;\nmov.b32 {l, u}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, u;\n}"
      : "=f"(ha), "=f"(hb)
      : "r"(hi));
  lo = f16_pack((a - ha) * 2048.0f, (b - hb) * 2048.0f);
}

// 2^11 hi of an f16x2 hi word: exact wherever |hi| < 32 (Q's and P's).
__device__ __forceinline__ unsigned f16_times2048(unsigned hi) {
  unsigned r;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(hi), "r"(0x68006800u));  // 2048 in both halves
  return r;
}

__device__ __forceinline__ float f16_max4(float4 x) {
  return fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w)));
}

// Four consecutive elements along k (scaled by mul) into the hi and lo
// arrays at offset `at` (8 bytes each: at % 4 == 0), and with h11 also
// 2^11 hi.
__device__ __forceinline__ void f16_store4(unsigned short* h11, unsigned short* hi, unsigned short* lo, int at,
                                           float4 x, float mul) {
  uint2 h, l;
  f16_split2(x.x * mul, x.y * mul, h.x, l.x);
  f16_split2(x.z * mul, x.w * mul, h.y, l.y);
  *reinterpret_cast<uint2*>(hi + at) = h;
  *reinterpret_cast<uint2*>(lo + at) = l;
  if (h11 != nullptr) *reinterpret_cast<uint2*>(h11 + at) = make_uint2(f16_times2048(h.x), f16_times2048(h.y));
}

// Eight consecutive elements along k (scaled by mul) into the hi and lo
// arrays at offset `at` (16 bytes each: at % 8 == 0).
__device__ __forceinline__ void f16_store8(unsigned short* hi, unsigned short* lo, int at, const float (&x)[8],
                                           float mul) {
  uint4 h, l;
  f16_split2(x[0] * mul, x[1] * mul, h.x, l.x);
  f16_split2(x[2] * mul, x[3] * mul, h.y, l.y);
  f16_split2(x[4] * mul, x[5] * mul, h.z, l.z);
  f16_split2(x[6] * mul, x[7] * mul, h.w, l.w);
  *reinterpret_cast<uint4*>(hi + at) = h;
  *reinterpret_cast<uint4*>(lo + at) = l;
}

// d (64 x kN accumulators) += A (64 x 16) . B (kN x 16), FP16 operands,
// fp32 accumulation: A from shared memory (wh_ss) or from registers (wh_rs,
// the m16n8k16 A fragment per warp).  sm_90a only.
template <int kN>
__device__ __forceinline__ void wh_ss(float* d, unsigned long long a, unsigned long long b);
template <int kN>
__device__ __forceinline__ void wh_rs(float* d, const unsigned (&a)[4], unsigned long long b);

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MLA_WH_SS(N, V, R, A, B, P)                                                                  \
  template <>                                                                                        \
  __device__ __forceinline__ void wh_ss<N>(float* d, unsigned long long a, unsigned long long b) {   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                           \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 " V ", %" #A ", %" #B        \
                 ", p, 1, 1, 0, 0;\n}"                                                                \
                 : R(d, 0)                                                                           \
                 : "l"(a), "l"(b), "r"(1)                                                            \
                 : "memory");                                                                        \
  }
#define MLA_WH_RS(N, V, R, A0, A1, A2, A3, B, P)                                                     \
  template <>                                                                                        \
  __device__ __forceinline__ void wh_rs<N>(float* d, const unsigned (&a)[4], unsigned long long b) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                           \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 " V ", {%" #A0 ", %" #A1      \
                 ", %" #A2 ", %" #A3 "}, %" #B ", p, 1, 1, 0;\n}"                                      \
                 : R(d, 0)                                                                           \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1)                        \
                 : "memory");                                                                        \
  }
#else
#define MLA_WH_SS(N, V, R, A, B, P)                                                                  \
  template <>                                                                                        \
  __device__ __forceinline__ void wh_ss<N>(float*, unsigned long long, unsigned long long) {         \
    __trap();                                                                                        \
  }
#define MLA_WH_RS(N, V, R, A0, A1, A2, A3, B, P)                                                     \
  template <>                                                                                        \
  __device__ __forceinline__ void wh_rs<N>(float*, const unsigned (&)[4], unsigned long long) {      \
    __trap();                                                                                        \
  }
#endif
MLA_WH_SS(16, MLA_WG_V8, MLA_WG_R8, 8, 9, 10)
MLA_WH_SS(32, MLA_WG_V16, MLA_WG_R16, 16, 17, 18)
MLA_WH_SS(64, MLA_WG_V32, MLA_WG_R32, 32, 33, 34)
MLA_WH_RS(8, MLA_WG_V4, MLA_WG_R4, 4, 5, 6, 7, 8, 9)
MLA_WH_RS(16, MLA_WG_V8, MLA_WG_R8, 8, 9, 10, 11, 12, 13)
MLA_WH_RS(32, MLA_WG_V16, MLA_WG_R16, 16, 17, 18, 19, 20, 21)
MLA_WH_RS(64, MLA_WG_V32, MLA_WG_R32, 32, 33, 34, 35, 36, 37)
#undef MLA_WH_SS
#undef MLA_WH_RS

// O (64 x kDp) += 2^11 P . V' over 16 keys: P's 2^11 hi, hi and lo in
// registers, V^T hi and lo from column kD0 on, in chunks of 64, then at
// most one each of 32, 16 and 8 columns; `keys` is the half offset of the
// 16 keys in V^T (wh_offset(0, 16 n, KEY_TILE)).
template <int kD0>
__device__ __forceinline__ void wh_pv(float* o, const unsigned (&p11)[4], const unsigned (&ph)[4],
                                      const unsigned (&pl)[4], const unsigned short* vt_hi,
                                      const unsigned short* vt_lo, int keys) {
  if constexpr (kD0 < kDp) {
    constexpr int kRest = kDp - kD0;
    constexpr int kN = kRest >= 64 ? 64 : kRest >= 32 ? 32 : kRest >= 16 ? 16 : 8;
    const int off = kD0 * kKeyTile + keys;  // wh_offset(kD0, 0, kKeyTile) + keys, kD0 % 8 == 0
    const unsigned long long bh = wh_desc(vt_hi + off, kKeyTile);
    wh_rs<kN>(o + kD0 / 2, ph, wh_desc(vt_lo + off, kKeyTile));
    wh_rs<kN>(o + kD0 / 2, pl, bh);
    wh_rs<kN>(o + kD0 / 2, p11, bh);
    wh_pv<kD0 + kN>(o, p11, ph, pl, vt_hi, vt_lo, keys);
  }
}

__device__ __forceinline__ void ws_f16_sync() {  // the producer warpgroup only
  asm volatile("bar.sync %0, 128;" ::"r"(kF16Sync) : "memory");
}

// A key tile as the producer's threads hold it: K in 16-byte pieces of one
// key row (wg_piece), V in units of 8 keys of one column (fv_unit), so
// that V^T takes each unit's hi and lo as one 16-byte store each.  Keys
// at or past s_end are zero.
struct F16Tile {
  float4 k[kWsPiecesPerThread];
  float v[kFvPer][8];
};

// V unit u of a tile: column u % kDp of its keys 8 (u / kDp) .. + 7.
struct FvUnit {
  int col, key0;
};
__device__ __forceinline__ FvUnit fv_unit(int u) { return FvUnit{u % kDp, (u / kDp) * 8}; }

__device__ __forceinline__ void f16_load_tile(F16Tile& t, const float* head, int s0, int s_end, const Dims& dims,
                                              int ptid) {
#pragma unroll
  for (int j = 0; j < kWsPiecesPerThread; ++j) {
    const int idx = ptid + 128 * j;
    const WgPiece p = wg_piece(idx);
    t.k[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (idx < kWsPieces && s0 + p.row < s_end && p.col < dims.dp)
      t.k[j] = __ldg(reinterpret_cast<const float4*>(head + static_cast<long long>(s0 + p.row) * dims.ws_row + p.col));
  }
#pragma unroll
  for (int j = 0; j < kFvPer; ++j) {
    const int u = ptid + 128 * j;
    const FvUnit unit = fv_unit(u);
    const int key0 = s0 + unit.key0;
    const float* src = head + dims.dp + unit.col;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      t.v[j][e] = 0.0f;
      if (u < kFvUnits && key0 + e < s_end) t.v[j][e] = __ldg(src + static_cast<long long>(key0 + e) * dims.ws_row);
    }
  }
}

// The producer warpgroup (ptid 0..127): every key tile of [0, s_end) into
// the ring, split into FP16 with its scales.  Per tile, in the scratch
// array i % 3: the maxima of K's rows and of V (atomicMax); a barrier of
// the producer; then every thread reads them, stores its pieces split, and
// clears scratch (i + 2) % 3: its last reader finished before this tile's
// barrier, and its next writer (tile i + 2) starts only after tile i + 1's,
// which follows this clear.  With kF16Prefetch, tile i + 1's loads are
// issued before tile i is split, into a second F16Tile, so that their
// latency runs under tile i's work (the producer bounds the block: see
// docs/performance.md); without it (the registers do not allow two
// tiles), they follow tile i's hand-off.
__device__ __forceinline__ void ws_f16_produce(unsigned char* smem, const float* kv_ws, int b, int h, int T,
                                               int s_end, const Dims& dims, int ptid) {
  unsigned short* ring = reinterpret_cast<unsigned short*>(smem) + 3 * kFhQ;
  float* meta = reinterpret_cast<float*>(ring + kWsStages * kFhStage);
  unsigned* scratch = reinterpret_cast<unsigned*>(meta + kWsStages * kFhMeta);
  const float* head = kv_ws + (static_cast<long long>(b) * dims.h + h) * T * dims.ws_row;
  const int ntiles = (s_end + kKeyTile - 1) / kKeyTile;
  int ev_run = 126;  // V's exponent so far (never grows)
  F16Tile t;
  f16_load_tile(t, head, 0, s_end, dims, ptid);
  for (int i = 0; i < ntiles; ++i) {
    const int s0 = i * kKeyTile;
    F16Tile next;  // used only with kF16Prefetch
    if constexpr (kF16Prefetch) f16_load_tile(next, head, s0 + kKeyTile, s_end, dims, ptid);  // past s_end: nothing read
    unsigned* scr = scratch + (i % 3) * kFhMeta;
    float vmax = 0.0f;
#pragma unroll
    for (int j = 0; j < kWsPiecesPerThread; ++j) {
      const int idx = ptid + 128 * j;
      if (idx >= kWsPieces) break;
      atomicMax(scr + wg_piece(idx).row, __float_as_uint(f16_max4(t.k[j])));
    }
#pragma unroll
    for (int j = 0; j < kFvPer; ++j)
#pragma unroll
      for (int e = 0; e < 8; ++e) vmax = fmaxf(vmax, fabsf(t.v[j][e]));
    const unsigned vbits = __reduce_max_sync(0xffffffffu, __float_as_uint(vmax));
    if (ptid % 32 == 0) atomicMax(scr + kKeyTile, vbits);
    ws_f16_sync();
    ev_run = min(ev_run, f16_exp(scr[kKeyTile]));
    const float vmul = f16_pow2(ev_run);

    const int buf = i % kWsStages;
    if (i >= kWsStages) ws_wait(kWsEmpty + buf);  // the consumers are done with tile i - kWsStages
    unsigned short* khi = ring + buf * kFhStage;
    unsigned short* klo = khi + kFhK;
    unsigned short* vhi = klo + kFhK;
    unsigned short* vlo = vhi + kFhV;
#pragma unroll
    for (int j = 0; j < kWsPiecesPerThread; ++j) {
      const int idx = ptid + 128 * j;
      if (idx >= kWsPieces) break;
      const WgPiece p = wg_piece(idx);
      f16_store4(nullptr, khi, klo, wh_offset(p.row, p.col, kDh), t.k[j], f16_pow2(f16_exp(scr[p.row])));
    }
#pragma unroll
    for (int j = 0; j < kFvPer; ++j) {
      const int u = ptid + 128 * j;
      if (u >= kFvUnits) break;
      const FvUnit unit = fv_unit(u);
      f16_store8(vhi, vlo, wh_offset(unit.col, unit.key0, kKeyTile), t.v[j], vmul);
    }
    float* factors = meta + buf * kFhMeta;  // what the consumers scale by
    for (int r = ptid; r < kKeyTile; r += 128) factors[r] = f16_pow2(-f16_exp(scr[r]));
    if (ptid == 0) factors[kKeyTile] = __int_as_float(ev_run);
    unsigned* clear = scratch + ((i + 2) % 3) * kFhMeta;
    for (int r = ptid; r <= kKeyTile; r += 128) clear[r] = 0u;
    wg_proxy_fence();  // the tensor cores read what these stores wrote
    ws_arrive(kWsFull + buf);
    if constexpr (kF16Prefetch)
      t = next;
    else if (i + 1 < ntiles)
      f16_load_tile(t, head, s0 + kKeyTile, s_end, dims, ptid);
  }
}

// What a consumer warpgroup reads of shared memory, and its rows.
struct F16View {
  const unsigned short* q11;  // its 64 rows of Q: 2^11 hi, then hi and lo kFhQ halves apart
  const unsigned short* ring;
  const float* meta;          // per buffer: the key rows' factors, then V's exponent
  int wrow0, row, last_key, ntiles;
  float rowf[2];              // its two rows' logit factors: 2^-(11 + e_q) scale log2(e)
};

__device__ __forceinline__ F16View f16_view(const unsigned char* smem, int T, float scale, int t0, int s_end,
                                            int tid) {
  F16View v;
  const int wg_row = (tid / 128) * kWgRows;
  const int lrow = wg_row + ((tid / 32) % 4) * 16 + (tid % 32) / 4;  // rows lrow, lrow + 8 of the block
  v.q11 = reinterpret_cast<const unsigned short*>(smem) + wh_offset(wg_row, 0, kDh);
  v.ring = reinterpret_cast<const unsigned short*>(smem) + 3 * kFhQ;
  v.meta = reinterpret_cast<const float*>(v.ring + kWsStages * kFhStage);
  const unsigned* qmax = reinterpret_cast<const unsigned*>(v.meta + (kWsStages + 3) * kFhMeta);
  v.wrow0 = t0 + wg_row;
  v.row = t0 + lrow;
  v.last_key = v.wrow0 < T ? min(v.wrow0 + kWgRows, T) - 1 : -1;  // its rows' last key; -1: no row
  v.ntiles = (s_end + kKeyTile - 1) / kKeyTile;
  const float lscale = scale * 1.4426950408889634f;  // logits in log2 units (softmax by ex2)
  v.rowf[0] = ldexpf(lscale, -11 - f16_exp(qmax[lrow]));
  v.rowf[1] = ldexpf(lscale, -11 - f16_exp(qmax[lrow + 8]));
  return v;
}

// S += 2^11 Q' K'^T of the tile in buffer `stage`, issued and committed.
__device__ __forceinline__ void f16_issue_scores(float (&s)[kKeyTile / 2], const F16View& v,
                                                 const unsigned short* stage) {
  const unsigned short* qhi = v.q11 + kFhQ;
  const unsigned short* qlo = qhi + kFhQ;
  const unsigned short* khi = stage;
  const unsigned short* klo = khi + kFhK;
#pragma unroll
  for (int k0 = 0; k0 < kDh; k0 += 16) {
    const int at = k0 * 8;  // wh_offset(0, k0, .)
    const unsigned long long bh = wh_desc(khi + at, kDh);
    wh_ss<kKeyTile>(s, wh_desc(qhi + at, kDh), wh_desc(klo + at, kDh));
    wh_ss<kKeyTile>(s, wh_desc(qlo + at, kDh), bh);
    wh_ss<kKeyTile>(s, wh_desc(v.q11 + at, kDh), bh);
  }
  wg_commit();
}

// O += 2^11 P V' of the tile in buffer `stage`, issued and committed.
__device__ __forceinline__ void f16_issue_pv(float (&o)[kDp / 2], const unsigned (&p11)[kKeyTile / 16][4],
                                             const unsigned (&ph)[kKeyTile / 16][4],
                                             const unsigned (&pl)[kKeyTile / 16][4], const unsigned short* stage) {
  const unsigned short* vhi = stage + 2 * kFhK;
  const unsigned short* vlo = vhi + kFhV;
#pragma unroll
  for (int n = 0; n < kKeyTile / 16; ++n) wh_pv<0>(o, p11[n], ph[n], pl[n], vhi, vlo, n * 128);
  wg_commit();
}

// The accumulators as logits (log2 units): each row's and each key's factor.
__device__ __forceinline__ void f16_scale_scores(float (&s)[kKeyTile / 2], const F16View& v, const float* factors) {
  const int c = threadIdx.x % 4;
#pragma unroll
  for (int n = 0; n < kKeyTile / 8; ++n) {
    const float f0 = factors[8 * n + 2 * c], f1 = factors[8 * n + 2 * c + 1];
    s[4 * n] *= v.rowf[0] * f0;
    s[4 * n + 1] *= v.rowf[0] * f1;
    s[4 * n + 2] *= v.rowf[1] * f0;
    s[4 * n + 3] *= v.rowf[1] * f1;
  }
}

// The softmax's correction of O, times 2^(e_tile - ev) when the tile's V
// exponent is lower (O moves to the tile's units); ev becomes the tile's.
__device__ __forceinline__ void f16_rescale_units(float (&corr)[2], int& ev, const float* factors) {
  const int ev_tile = __float_as_int(factors[kKeyTile]);  // <= ev
  corr[0] = ldexpf(corr[0], ev_tile - ev);
  corr[1] = ldexpf(corr[1], ev_tile - ev);
  ev = ev_tile;
}

__device__ __forceinline__ void f16_correct(float (&o)[kDp / 2], const float (&corr)[2]) {
#pragma unroll
  for (int j = 0; j < kDp / 8; ++j) {
    o[4 * j] *= corr[0];
    o[4 * j + 1] *= corr[0];
    o[4 * j + 2] *= corr[1];
    o[4 * j + 3] *= corr[1];
  }
}

// P (the softmax's output in s) as FP16 2^11 hi, hi and lo A fragments:
// keys 16 n .. 16 n + 15 are the accumulators of two groups of 8.
__device__ __forceinline__ void f16_split_p(const float (&s)[kKeyTile / 2], unsigned (&p11)[kKeyTile / 16][4],
                                            unsigned (&ph)[kKeyTile / 16][4], unsigned (&pl)[kKeyTile / 16][4]) {
#pragma unroll
  for (int n = 0; n < kKeyTile / 16; ++n)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      f16_split2(s[8 * n + 2 * r], s[8 * n + 2 * r + 1], ph[n][r], pl[n][r]);
      p11[n][r] = f16_times2048(ph[n][r]);  // |P| <= 1
    }
}

// O in units of 2^(11 + ev) back to its value, then out = O / l.
__device__ __forceinline__ void f16_store_out(float* out, float (&o)[kDp / 2], const float (&l_run)[2], int ev,
                                              int b, const F16View& v, int h, int T, const Dims& dims) {
  const float back = ldexpf(1.0f, -11 - ev);
#pragma unroll
  for (int i = 0; i < kDp / 2; ++i) o[i] *= back;
  wg_store_out(out, o, l_run, b, v.row, h, T, dims);
}

// A consumer warpgroup (tid 0 .. 128 kWsConsumers - 1) with UNROLL 1: its
// 64 query rows over every tile of the ring, one at a time, then its rows
// of out.
__device__ __forceinline__ void ws_f16_consume(const unsigned char* smem, float* out, int T, float scale, int b,
                                               int t0, int h, int s_end, int tid, const Dims& dims) {
  const F16View v = f16_view(smem, T, scale, t0, s_end, tid);
  float o[kDp / 2];
#pragma unroll
  for (int i = 0; i < kDp / 2; ++i) o[i] = 0.0f;
  float m_run[2] = {neg_inf(), neg_inf()};
  float l_run[2] = {0.0f, 0.0f};
  int ev = 126;  // O holds 2^(11 + ev) times the weighted sum of V

  for (int i = 0; i < v.ntiles; ++i) {
    const int s0 = i * kKeyTile;
    const int buf = i % kWsStages;
    const unsigned short* stage = v.ring + buf * kFhStage;
    const float* factors = v.meta + buf * kFhMeta;
    ws_wait(kWsFull + buf);
    if (s0 <= v.last_key) {  // uniform over the warpgroup
      float s[kKeyTile / 2];
      ws_zero_scores(s);
      wg_fence();
      f16_issue_scores(s, v, stage);
      wg_wait_all();
      wg_pin<kKeyTile / 2>(s);
      f16_scale_scores(s, v, factors);
      float corr[2];
      wg_softmax(s, s0, v.row, 1.0f, m_run, l_run, corr);
      f16_rescale_units(corr, ev, factors);
      f16_correct(o, corr);
      unsigned p11[kKeyTile / 16][4], ph[kKeyTile / 16][4], pl[kKeyTile / 16][4];
      f16_split_p(s, p11, ph, pl);
      wg_pin<kDp / 2>(o);
      wg_fence();
      f16_issue_pv(o, p11, ph, pl, stage);
      wg_wait_all();  // the buffer is read: it may be released
      wg_pin<kDp / 2>(o);
    }
    if (i + kWsStages < v.ntiles) ws_arrive(kWsEmpty + buf);
  }
  if (v.wrow0 >= T) return;
  f16_store_out(out, o, l_run, ev, b, v, h, T, dims);
}

// The same with UNROLL 2, as ws_consume_overlap schedules tf32x3_wgmma_ws:
// tile i's S issued together with tile i - 1's P V; wait S(i) (wait_group
// 1); its softmax; wait P V(i - 1); release buffer i - 1; O corrected (and
// moved to tile i's V units); P(i) split after the wait, since P V(i - 1)
// reads P's registers until then.
__device__ __forceinline__ void ws_f16_consume_overlap(const unsigned char* smem, float* out, int T, float scale,
                                                       int b, int t0, int h, int s_end, int tid,
                                                       const Dims& dims) {
  const F16View v = f16_view(smem, T, scale, t0, s_end, tid);
  const int mine = v.last_key < 0 ? 0 : min(v.ntiles, v.last_key / kKeyTile + 1);  // uniform over the warpgroup
  float o[kDp / 2];
#pragma unroll
  for (int i = 0; i < kDp / 2; ++i) o[i] = 0.0f;
  float m_run[2] = {neg_inf(), neg_inf()};
  float l_run[2] = {0.0f, 0.0f};
  int ev = 126;

  if (mine > 0) {
    float s[kKeyTile / 2];
    float corr[2];
    unsigned p11[kKeyTile / 16][4], ph[kKeyTile / 16][4], pl[kKeyTile / 16][4];
    ws_wait(kWsFull + 0);
    ws_zero_scores(s);
    wg_fence();
    f16_issue_scores(s, v, v.ring);
    wg_wait_all();
    wg_pin<kKeyTile / 2>(s);
    f16_scale_scores(s, v, v.meta);
    wg_softmax(s, 0, v.row, 1.0f, m_run, l_run, corr);  // O is zero: no correction
    f16_rescale_units(corr, ev, v.meta);
    f16_split_p(s, p11, ph, pl);
    for (int i = 1; i < mine; ++i) {
      const int buf = i % kWsStages, prev = (i - 1) % kWsStages;
      const unsigned short* stage = v.ring + buf * kFhStage;
      const float* factors = v.meta + buf * kFhMeta;
      ws_wait(kWsFull + buf);
      ws_zero_scores(s);
      wg_pin<kDp / 2>(o);
      wg_fence();
      f16_issue_scores(s, v, stage);
      f16_issue_pv(o, p11, ph, pl, v.ring + prev * kFhStage);
      ws_wait_one();  // S(i) is done; P V(i - 1) may still run
      wg_pin<kKeyTile / 2>(s);
      f16_scale_scores(s, v, factors);
      wg_softmax(s, i * kKeyTile, v.row, 1.0f, m_run, l_run, corr);
      f16_rescale_units(corr, ev, factors);
      wg_wait_all();
      wg_pin<kDp / 2>(o);
      f16_split_p(s, p11, ph, pl);  // after the wait: P V(i - 1) reads them until then
      if (i - 1 + kWsStages < v.ntiles) ws_arrive(kWsEmpty + prev);  // buffer i - 1 is read
      f16_correct(o, corr);
    }
    const int last = mine - 1;
    wg_pin<kDp / 2>(o);
    wg_fence();
    f16_issue_pv(o, p11, ph, pl, v.ring + (last % kWsStages) * kFhStage);
    wg_wait_all();
    wg_pin<kDp / 2>(o);
    if (last + kWsStages < v.ntiles) ws_arrive(kWsEmpty + last % kWsStages);
  }
  // The block's tiles past this warpgroup's rows: waited for and released.
  for (int i = mine; i < v.ntiles; ++i) {
    const int buf = i % kWsStages;
    ws_wait(kWsFull + buf);
    if (i + kWsStages < v.ntiles) ws_arrive(kWsEmpty + buf);
  }
  if (v.wrow0 >= T) return;
  f16_store_out(out, o, l_run, ev, b, v, h, T, dims);
}

// Q staging (f16_stage_q): the consumers' threads hold up to kQBatch
// 16-byte pieces of Q each at a time, all loaded before any is used.
constexpr int kQPieces = kQpb * (kDp / 4);
constexpr int kQThreads = 128 * (kWsConsumers > 0 ? kWsConsumers : 1);  // (another algorithm's kQpb may be below 64)
constexpr int kQPer = (kQPieces + kQThreads - 1) / kQThreads;
constexpr int kQBatch = kQPer < 8 ? kQPer : 8;
constexpr int kF16QSync = kF16Sync + 1;  // the consumers' own named barrier

// Whether this thread has a piece r0 + j of Q's kQPieces; its index in idx.
__device__ __forceinline__ bool f16_q_piece(int tid, int r0, int j, int& idx) {
  idx = tid + kQThreads * (r0 + j);
  return r0 + j < kQPer && idx < kQPieces;
}

__device__ __forceinline__ void ws_f16_consumers_sync() {
  asm volatile("bar.sync %0, %1;" ::"r"(kF16QSync), "r"(kQThreads) : "memory");
}

// Pieces r0 .. r0 + kQBatch - 1 of this thread (rows at or beyond T and
// columns at or beyond D zero): float4 loads where q is 16-byte aligned
// and D a multiple of 4 (every row then is), else one float at a time.
__device__ __forceinline__ void f16_load_q(float4 (&x)[kQBatch], const float* q, int b, int t0, int h, int T,
                                           const Dims& dims, int tid, int r0) {
#pragma unroll
  for (int j = 0; j < kQBatch; ++j) {
    int idx;
    x[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (!f16_q_piece(tid, r0, j, idx)) continue;
    const WgPiece p = wg_piece(idx);
    const int t = t0 + p.row;
    if (t >= T) continue;
    const float* src = q + ((static_cast<long long>(b) * T + t) * dims.h + h) * dims.d + p.col;
    if (dims.d % 4 == 0 && (reinterpret_cast<unsigned long long>(q) & 15u) == 0) {
      if (p.col < dims.d) x[j] = __ldg(reinterpret_cast<const float4*>(src));
    } else {
      float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if (p.col + c < dims.d) e[c] = __ldg(src + c);
      x[j] = make_float4(e[0], e[1], e[2], e[3]);
    }
  }
}

// Q rows [t0, t0 + kQpb) of head h into shared memory as 2^11 hi, hi and
// lo with one exponent per row, by the consumers only (tid < kQThreads),
// while the producer loads its first tiles: every piece's maximum into
// qmax, a barrier of the consumers, the pieces split and stored (read
// again only where a thread has more than kQBatch of them), a proxy fence
// and a barrier.
__device__ __forceinline__ void f16_stage_q(unsigned char* smem, const float* q, int b, int t0, int h, int T,
                                            const Dims& dims, int tid) {
  unsigned short* q11 = reinterpret_cast<unsigned short*>(smem);
  unsigned* qmax = reinterpret_cast<unsigned*>(smem + kF16SmemBytes) - kQpb;
  float4 x[kQBatch];
#pragma unroll 1
  for (int r0 = 0; r0 < kQPer; r0 += kQBatch) {
    f16_load_q(x, q, b, t0, h, T, dims, tid, r0);
#pragma unroll
    for (int j = 0; j < kQBatch; ++j) {
      int idx;
      if (f16_q_piece(tid, r0, j, idx)) atomicMax(qmax + wg_piece(idx).row, __float_as_uint(f16_max4(x[j])));
    }
  }
  ws_f16_consumers_sync();
#pragma unroll 1
  for (int r0 = 0; r0 < kQPer; r0 += kQBatch) {
    if constexpr (kQPer > kQBatch) f16_load_q(x, q, b, t0, h, T, dims, tid, r0);
#pragma unroll
    for (int j = 0; j < kQBatch; ++j) {
      int idx;
      if (!f16_q_piece(tid, r0, j, idx)) continue;
      const WgPiece p = wg_piece(idx);
      f16_store4(q11, q11 + kFhQ, q11 + 2 * kFhQ, wh_offset(p.row, p.col, kDh), x[j],
                 f16_pow2(f16_exp(qmax[p.row])));
    }
  }
  wg_proxy_fence();  // Q is read by the tensor cores
  ws_f16_consumers_sync();
}

// The attention of one block: shared memory cleared (the padding of Q and
// K past D is read by the MMAs), then the roles split as in
// tf32x3_wgmma_ws, the consumers staging Q first (f16_stage_q) while the
// producer starts on the key tiles.
__device__ __forceinline__ void wgmma_f16_attention(const float* __restrict__ q, float* __restrict__ out,
                                                    const float* __restrict__ kv_ws, int T, float scale, int b,
                                                    int t0, int h, int s_end, int tid, float* smem_f,
                                                    const Dims& dims) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma needs sm_90a
#endif
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem_f);
  for (unsigned i = tid; i < kF16SmemBytes / 16; i += kThreads)
    reinterpret_cast<uint4*>(smem)[i] = make_uint4(0u, 0u, 0u, 0u);
  __syncthreads();
  if (tid >= kQThreads) {
    ws_f16_produce(smem, kv_ws, b, h, T, s_end, dims, tid - kQThreads);
    return;
  }
  f16_stage_q(smem, q, b, t0, h, T, dims, tid);
  if constexpr (kUnroll == 1)
    ws_f16_consume(smem, out, T, scale, b, t0, h, s_end, tid, dims);
  else
    ws_f16_consume_overlap(smem, out, T, scale, b, t0, h, s_end, tid, dims);
}

}  // namespace mla
