// Strict-fp32 RMSNorm over the rows of x, as one template family for the tuner:
//
//   out[r, c] = x[r, c] * w[c] / sqrt(mean_c(x[r, :]^2) + eps)
//
// Work map: THREADS_PER_ROW consecutive threads share a row (a power of two:
// part of a warp, one warp, or several warps), ROWS_PER_BLOCK rows per block,
// block b owning rows b * ROWS_PER_BLOCK onwards.  A row is cut into chunks
// of VEC floats (4 with FLOAT4, else 1); lane j of a row takes the chunks
// j, j + THREADS_PER_ROW, j + 2 THREADS_PER_ROW, ..., so the lanes of a row
// read consecutive chunks (coalesced) whatever THREADS_PER_ROW is.
//
// ALGORITHM:
//   registers  a lane's chunks of x are loaded once into registers, squared
//              and summed, then scaled and stored from the registers: x is
//              read once.
//   shared     the same, with the row kept in dynamic shared memory instead
//              (each lane reads back only the chunks it wrote, so the data
//              needs no barrier): long rows with few threads, no register cap.
//   reread     pass 1 reads x for the sum of squares, pass 2 reads it again
//              (from L1 or L2) to scale and store: no row cache at all.
// UNROLL (shared, reread): chunks per loop step, each with its own partial
// sum (more loads in flight, shorter addition chains).
//
// Reduction: xor shuffles among the row's lanes within a warp, then, for rows
// of several warps, one partial per warp through shared memory, summed in
// warp order by every lane.  Every lane of a row ends with the bitwise same
// total (a + b == b + a in IEEE arithmetic), so the whole row is scaled by
// one factor.
//
// Accuracy (strict fp32, no fast math): squares are accumulated with fmaf in
// independent partial sums per vector element and per UNROLL slot, in chains
// of at most 256 / (VEC * UNROLL) additions (the space bounds the chunks per
// lane), then combined in a tree; the mean is a true division by COLS and
// the factor 1 / sqrtf(...) uses IEEE division and square root (NVRTC's
// defaults).  The relative error of the sum of squares is then a few 1e-7,
// and that of the output about half of it plus two roundings.
//
// FLOAT4 needs COLS % 4 == 0 (then every row starts 16-byte aligned) and
// 16-byte aligned x, w and out.  Pointers a caller passes that are not take
// the scalar loop at run time: the test is the same for every thread of the
// grid, so it costs one uniform branch and never a misaligned access.
//
// Compiled in (-D): SHAPE_COLS and every parameter of
// search_spaces/rms_norm.yaml.  ROWS arrives as the argument `rows`: a
// model's hidden size is fixed, its token count changes with every call.

#if !defined(SHAPE_COLS)
#error "rms_norm needs SHAPE_COLS"
#endif
#if !defined(ALGORITHM) || !defined(ALGORITHM_registers) || !defined(ALGORITHM_shared) || \
    !defined(ALGORITHM_reread) || !defined(THREADS_PER_ROW) || !defined(ROWS_PER_BLOCK) ||   \
    !defined(FLOAT4) || !defined(UNROLL)
#error "rms_norm needs every parameter of its search space as -D"
#endif

namespace rms {

constexpr int kCols = SHAPE_COLS;
constexpr int kTpr = THREADS_PER_ROW;
constexpr int kRpb = ROWS_PER_BLOCK;
constexpr int kThreads = kTpr * kRpb;
constexpr int kVec = FLOAT4 ? 4 : 1;
constexpr int kUnroll = UNROLL;
constexpr bool kRegisters = ALGORITHM == ALGORITHM_registers;
constexpr bool kShared = ALGORITHM == ALGORITHM_shared;
constexpr int kLanesInWarp = kTpr < 32 ? kTpr : 32;  // a row's lanes that one warp holds
constexpr int kWarpsPerRow = kTpr > 32 ? kTpr / 32 : 1;

static_assert(kTpr >= 1 && kTpr <= 1024 && (kTpr & (kTpr - 1)) == 0,
              "THREADS_PER_ROW must be a power of two <= 1024");
static_assert(kThreads % 32 == 0 && kThreads <= 1024,
              "a block must be whole warps, at most 1024 threads (the shuffles use every lane)");
static_assert(kVec == 1 || kCols % 4 == 0, "FLOAT4 needs COLS % 4 == 0");
static_assert(kUnroll >= 1, "UNROLL must be positive");
static_assert(!kRegisters || kUnroll == 1, "registers keeps every chunk: UNROLL is 1");

// Shared: one row of COLS floats per row of the block (16-byte aligned).
extern __shared__ float4 row_cache4[];

template <int V>
__device__ __forceinline__ void load(const float* p, float (&v)[V]) {
  if constexpr (V == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x;
    v[1] = t.y;
    v[2] = t.z;
    v[3] = t.w;
  } else {
    v[0] = *p;
  }
}

template <int V>
__device__ __forceinline__ void store(float* p, const float (&v)[V]) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    *p = v[0];
  }
}

// The sum of `s` over the lanes of a row, in every lane.  Every thread of the
// block calls it (rows past the end with s = 0): the shuffles use the whole
// warp and the barrier the whole block.
__device__ __forceinline__ float row_sum(float s, float* partials, int group, int lane) {
#pragma unroll
  for (int offset = kLanesInWarp / 2; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
  if constexpr (kWarpsPerRow > 1) {
    if (lane % 32 == 0) partials[group * kWarpsPerRow + lane / 32] = s;
    __syncthreads();
    s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsPerRow; ++w) s += partials[group * kWarpsPerRow + w];
  }
  return s;
}

// The sum of n partial sums, pairwise (n a power of two or not).
template <int N>
__device__ __forceinline__ float tree_sum(const float* a) {
  if constexpr (N == 1) {
    return a[0];
  } else {
    return tree_sum<N / 2>(a) + tree_sum<N - N / 2>(a + N / 2);
  }
}

__device__ __forceinline__ float inverse_rms(float sum_of_squares, float eps) {
  return 1.0f / sqrtf(sum_of_squares / static_cast<float>(kCols) + eps);
}

// One row with chunks of V floats (V = kVec, or 1 for unaligned pointers).
// `xr` and `outr` point at the row (row 0 where the row is not `active`).
template <int V>
__device__ __forceinline__ void normalize_row(const float* __restrict__ xr, const float* __restrict__ w,
                                              float* __restrict__ outr, bool active, int group, int lane,
                                              float eps, float* partials) {
  constexpr int kChunks = kCols / V;
  constexpr int kPerLane = (kChunks + kTpr - 1) / kTpr;
  if constexpr (kRegisters) {
    float v[kPerLane][V];
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int chunk = lane + i * kTpr;
      if (active && chunk < kChunks) {
        load<V>(xr + chunk * V, v[i]);
      } else {
#pragma unroll
        for (int k = 0; k < V; ++k) v[i][k] = 0.0f;
      }
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] = fmaf(v[i][k], v[i][k], acc[k]);
    }
    const float scale = inverse_rms(row_sum(tree_sum<V>(acc), partials, group, lane), eps);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int chunk = lane + i * kTpr;
      if (!active || chunk >= kChunks) continue;
      float wv[V], o[V];
      load<V>(w + chunk * V, wv);
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = v[i][k] * scale * wv[k];
      store<V>(outr + chunk * V, o);
    }
  } else {
    float* cache = reinterpret_cast<float*>(row_cache4) + group * kCols;
    float acc[kUnroll * V];
#pragma unroll
    for (int k = 0; k < kUnroll * V; ++k) acc[k] = 0.0f;
    // The passes stay loops (unroll 1 outside): reread must read x twice,
    // not turn into registers by full unrolling.
#pragma unroll 1
    for (int i0 = 0; i0 < kPerLane; i0 += kUnroll) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int chunk = lane + (i0 + u) * kTpr;
        if (!active || chunk >= kChunks) continue;
        float v[V];
        load<V>(xr + chunk * V, v);
        if constexpr (kShared) store<V>(cache + chunk * V, v);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[u * V + k] = fmaf(v[k], v[k], acc[u * V + k]);
      }
    }
    const float scale = inverse_rms(row_sum(tree_sum<kUnroll * V>(acc), partials, group, lane), eps);
#pragma unroll 1
    for (int i0 = 0; i0 < kPerLane; i0 += kUnroll) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int chunk = lane + (i0 + u) * kTpr;
        if (!active || chunk >= kChunks) continue;
        float v[V], wv[V], o[V];
        load<V>((kShared ? cache : xr) + chunk * V, v);
        load<V>(w + chunk * V, wv);
#pragma unroll
        for (int k = 0; k < V; ++k) o[k] = v[k] * scale * wv[k];
        store<V>(outr + chunk * V, o);
      }
    }
  }
}

}  // namespace rms

// (__launch_bounds__ with a minimum of one block per SM: without it ptxas
// squeezed a few reread configs into 32 registers and spilled.)
// x [rows, COLS], w [COLS], out [rows, COLS], all float32; block
// [THREADS_PER_ROW * ROWS_PER_BLOCK] (anything else traps), grid
// ceil(rows / ROWS_PER_BLOCK), dynamic shared memory 4 * ROWS_PER_BLOCK *
// COLS bytes for shared (else 0).
extern "C" __global__ void __launch_bounds__(rms::kThreads, 1)
rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out, int rows, float eps) {
  using namespace rms;
  __shared__ float partials[kRpb * kWarpsPerRow];
  if (blockDim.x != kThreads || blockDim.y != 1 || blockDim.z != 1) __trap();
  const int group = static_cast<int>(threadIdx.x) / kTpr;
  const int lane = static_cast<int>(threadIdx.x) % kTpr;
  const long long row = static_cast<long long>(blockIdx.x) * kRpb + group;
  const bool active = row < rows;
  const long long offset = (active ? row : 0) * kCols;
  if constexpr (kVec == 4) {
    const unsigned long long address = reinterpret_cast<unsigned long long>(x) |
                                       reinterpret_cast<unsigned long long>(w) |
                                       reinterpret_cast<unsigned long long>(out);
    if ((address & 15) == 0) {
      normalize_row<4>(x + offset, w, out + offset, active, group, lane, eps, partials);
      return;
    }
  }
  normalize_row<1>(x + offset, w, out + offset, active, group, lane, eps, partials);
}
