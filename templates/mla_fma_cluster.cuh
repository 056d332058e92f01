// The K/V expansion of tf32x3_kvgemm and tf32x3_wgmma for few latent rows,
// R split over a thread-block cluster (EXPAND_GEMM fma_cluster, sm_90):
// plain fp32 FMAs on the CUDA cores, included by fused_mla_attention.cu.
//
// Why a second CUDA-core expansion.  EXPAND_GEMM fma gives a block 16
// virtual columns and all of R, so its blocks are few (2 H dp / 16) and
// long: each walks R / 64 weight rows per thread and, for every 8 latent
// rows, stages them and sums 64 partial sums.  ncu on the H200 measured it
// at 0.2-0.8 TB/s, a chain of latencies (docs/performance.md, "Where the
// time goes at few tokens").  Here the weights of a block are a wide, short
// slab instead: kCCols = 128 virtual columns (a warp reads 512 contiguous
// bytes of a weight row: lane l owns columns 4l..4l+3) by the rank's share
// of R, rs = 8 ceil(R / 64) rows, and the kCSplit = 8 blocks of a cluster
// (ranks 0-7, consecutive blockIdx.x) take the 8 shares of R of one column
// tile.  Warp w of the block's 12 takes the share's rows w, w + 12, ...
// (rs = 12 ceil(R / 96) rows); every thread loads the weights of its first
// kCPre rows into registers at once (R <= 1152: all of them), so the
// block's weight bytes are in flight together, and keeps them for every
// chunk of kCRows latent rows.  384 threads at up to 168 registers: 12
// warps per SM to hide the latencies of the FMA chains and shared memory
// (ncu on the H200: the first version, 8 warps of 188 registers, issued an
// instruction per warp every 5-6 cycles and took 22.6 us at 4,7,8,116,935;
// 512 threads leave 128 registers, and 16 rows x 4 columns of sums plus
// 8 rows of weights spilled).
// Only the quads of latent rows that exist are multiplied (decode: one).
//
// Per chunk: the chunk's latent rows of the share are staged in shared
// memory ([row of the share][kCRows], read as broadcasts); each lane sums
// kCRows x 4 products per weight row; the 12 warps' partial sums meet in
// shared memory (warp w + 6 into warp w's place, then the 6 places in
// order) and are added into the block's partial sum
// [kCRows][kCCols]; after a cluster barrier, rank k adds the 8 blocks'
// partial sums of rows 2k and 2k + 1 of the chunk in rank order, reading
// the other blocks' shared memory (distributed shared memory), and writes
// them to the workspace.  A second cluster barrier keeps every block's
// partial sums alive until they are read.  Every sum is in a fixed order,
// so the result is deterministic; its error is that of an fp32 dot product
// of R terms (96 partial sums, each over ceil(R / 96) rows in increasing r).
//
// Launch: grid [kCSplit * 2 * ceil(H dp / kCCols)] (K tiles, then V), block
// [kCThreads], cluster (kCSplit, 1, 1) from the kernel's __cluster_dims__,
// dynamic shared memory kExpandSmemBytes = 4 (kCRows rs_max + 6 kCRows
// kCCols + kCRows kCCols) bytes, rs_max = 12 ceil(kRp / 96).

namespace mla {

static_assert(!kFmaCluster || (kCThreads == 384 && kCCols == 128 && kCRows == 16 && kCRows % kCSplit == 0),
              "the thread map below is for 384 threads, 128 columns, 16 rows and a split that divides them");

// (cluster_rank, cluster_barrier, cluster_barrier_relaxed and load_from_rank
// are in fused_mla_attention.cu, beside the other PTX helpers: KEY_SPLITS
// uses them too.)

__device__ __forceinline__ void fma_cluster_block(const float* __restrict__ kv_latent,
                                                  const float* __restrict__ w_up_k,
                                                  const float* __restrict__ w_up_v, float* __restrict__ kv_ws,
                                                  int B, int T, const Dims& dims, float* smem, int tid) {
  const int rows = B * T;
  const int col_tiles = (dims.h * dims.dp + kCCols - 1) / kCCols;
  const int tile = static_cast<int>(blockIdx.x) / kCSplit;  // the whole cluster's
  const unsigned rank = cluster_rank();
  const int x = tile / col_tiles;  // 0: K, 1: V
  const int n0 = (tile - x * col_tiles) * kCCols;
  // (The grid has exactly 2 col_tiles clusters: no block returns early, so
  // the cluster barriers below are reached by every block.)
  const float* w = x == 0 ? w_up_k : w_up_v;
  const int lane = tid % 32, warp = tid / 32;
  constexpr int kWarps = kCThreads / 32;
  const int rs = kWarps * ((dims.r + kCSplit * kWarps - 1) / (kCSplit * kWarps));  // rows of R per rank
  const int r0 = static_cast<int>(rank) * rs;
  // This lane's 4 virtual columns: where each one's weights are in a row
  // (32-bit offsets: a row has H D < 2^31 floats and R H D elements fit the
  // int the launch's extents already are), or none.  Registers are what
  // this kernel has least of.
  const int ld = dims.h * dims.d;
  int col[4];
  bool col_ok[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int v = n0 + 4 * lane + e;
    const int h = v / dims.dp, d = v - h * dims.dp;
    col_ok[e] = h < dims.h && d < dims.d;
    col[e] = col_ok[e] ? h * dims.d + d : 0;
  }
  // 16-byte loads where the 4 columns are consecutive weights (D % 4 == 0,
  // so they lie in one head) and aligned.
  const bool vec = dims.d % 4 == 0 && (reinterpret_cast<unsigned long long>(w) & 15) == 0;
  auto weights = [&](int r) {
    const float* wr = w + static_cast<long long>(r) * ld;
    if (vec && col_ok[0]) return __ldg(reinterpret_cast<const float4*>(wr + col[0]));
    return make_float4(col_ok[0] ? __ldg(wr + col[0]) : 0.0f, col_ok[1] ? __ldg(wr + col[1]) : 0.0f,
                       col_ok[2] ? __ldg(wr + col[2]) : 0.0f, col_ok[3] ? __ldg(wr + col[3]) : 0.0f);
  };
  float4 pre[kCPre];
#pragma unroll
  for (int i = 0; i < kCPre; ++i) {
    const int r = r0 + warp + kWarps * i;
    pre[i] = kWarps * i < rs && r < dims.r ? weights(r) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float* lat = smem;                       // [kCRsMax][kCRows]
  constexpr int kPlaces = kWarps / 2;
  float* red = lat + kCRsMax * kCRows;            // [kPlaces][kCRows][kCCols]
  float* part = red + kPlaces * kCRows * kCCols;  // [kCRows][kCCols]
  float acc[kCRows][4];
  int quads = 0;  // quads of latent rows in the chunk (the same in every thread)
  // acc += the chunk's latent rows at share row i (from lat) x the 4 weights q.
  auto fma_row = [&](int i, const float4 q) {
    const float wv[4] = {q.x, q.y, q.z, q.w};
    const float4* lr = reinterpret_cast<const float4*>(lat + i * kCRows);
#pragma unroll
    for (int q4 = 0; q4 < kCRows / 4; ++q4) {
      if (q4 >= quads) break;
      const float4 l = lr[q4];
      const float lv[4] = {l.x, l.y, l.z, l.w};
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[4 * q4 + k][e] = fmaf(lv[k], wv[e], acc[4 * q4 + k][e]);
    }
  };

  for (int m0 = 0; m0 < rows; m0 += kCRows) {
    // Stage the chunk's latent rows of this share: consecutive threads read
    // consecutive r of one row; every load is issued before the stores.
    {
      constexpr int kLoads = (kCRsMax * kCRows + kCThreads - 1) / kCThreads;
      float staged[kLoads];
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int j = tid + k * kCThreads;
        const int m = j / rs, i = j - m * rs;
        const int r = r0 + i;
        staged[k] = m < kCRows && m0 + m < rows && r < dims.r
                        ? __ldg(kv_latent + static_cast<long long>(m0 + m) * dims.r + r)
                        : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const int j = tid + k * kCThreads;
        const int m = j / rs, i = j - m * rs;
        if (m < kCRows) lat[i * kCRows + m] = staged[k];
      }
    }
    __syncthreads();
    quads = min(kCRows / 4, (rows - m0 + 3) / 4);
#pragma unroll
    for (int m = 0; m < kCRows; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][e] = 0.0f;
#pragma unroll
    for (int i = 0; i < kCPre; ++i)
      if (kWarps * i < rs && r0 + warp + kWarps * i < dims.r) fma_row(warp + kWarps * i, pre[i]);
#pragma unroll 2
    for (int i = warp + kWarps * kCPre; i < rs && r0 + i < dims.r; i += kWarps) fma_row(i, weights(r0 + i));
    // The warps' partial sums: the upper half store theirs, the lower half
    // add theirs to them; then the block's, in order of the places.
    if (warp >= kPlaces) {
#pragma unroll
      for (int m = 0; m < kCRows; ++m)
        *reinterpret_cast<float4*>(red + ((warp - kPlaces) * kCRows + m) * kCCols + 4 * lane) =
            make_float4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]);
    }
    __syncthreads();
    if (warp < kPlaces) {
#pragma unroll
      for (int m = 0; m < kCRows; ++m) {
        float4* place = reinterpret_cast<float4*>(red + (warp * kCRows + m) * kCCols + 4 * lane);
        const float4 other = *place;
        *place = make_float4(acc[m][0] + other.x, acc[m][1] + other.y, acc[m][2] + other.z, acc[m][3] + other.w);
      }
    }
    __syncthreads();
#pragma unroll
    for (int j = tid; j < kCRows * kCCols / 4; j += kCThreads) {
      const int m = j / (kCCols / 4), c = (j - m * (kCCols / 4)) * 4;
      float4 sum = *reinterpret_cast<const float4*>(red + m * kCCols + c);
#pragma unroll
      for (int p = 1; p < kPlaces; ++p) {
        const float4 s = *reinterpret_cast<const float4*>(red + (p * kCRows + m) * kCCols + c);
        sum.x += s.x;
        sum.y += s.y;
        sum.z += s.z;
        sum.w += s.w;
      }
      *reinterpret_cast<float4*>(part + m * kCCols + c) = sum;
    }
    cluster_barrier();  // every rank's partial sums of the chunk are written
    // Rank k: rows k kCRows / kCSplit ... of the chunk, 4 columns per thread.
    constexpr int kRowsPerRank = kCRows / kCSplit;
    if (tid < kRowsPerRank * kCCols / 4) {
      const int m = kRowsPerRank * static_cast<int>(rank) + tid / (kCCols / 4);
      const int c = (tid % (kCCols / 4)) * 4;
      float4 got[kCSplit];
#pragma unroll
      for (int k = 0; k < kCSplit; ++k) got[k] = load_from_rank(part + m * kCCols + c, k);
      float4 sum = got[0];
#pragma unroll
      for (int k = 1; k < kCSplit; ++k) {
        sum.x += got[k].x;
        sum.y += got[k].y;
        sum.z += got[k].z;
        sum.w += got[k].w;
      }
      const int n = m0 + m;
      const int v = n0 + c;
      const int h = v / dims.dp;
      if (n < rows && h < dims.h) {
        const int b = n / T;
        *reinterpret_cast<float4*>(kv_ws +
                                   ((static_cast<long long>(b) * dims.h + h) * T + (n - b * T)) * dims.ws_row +
                                   x * dims.dp + (v - h * dims.dp)) = sum;
      }
    }
    cluster_barrier_relaxed();  // read by every rank before the next chunk (or the exit) reuses it
  }
}

}  // namespace mla
