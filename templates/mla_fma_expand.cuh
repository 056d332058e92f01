// The K/V expansion of tf32x3_kvgemm and tf32x3_wgmma for few latent rows
// (EXPAND_GEMM fma): plain fp32 FMAs on the CUDA cores, included by
// fused_mla_attention.cu.
//
// With B*T small (decode, short prompts) the expansion reads every weight
// once for a handful of latent rows: it is bound by the bytes of w_up_k and
// w_up_v (2 R H D floats), not by arithmetic, and a tensor-core tile of 16 or
// more rows wastes most of its work and, worse, has too few blocks in flight
// to pull the weights at the memory's rate.  Here a block owns kFCols
// virtual columns (the GEMM's columns: head v / dp, d = v % dp, zero weights
// for d >= D, as in mla_wgmma_expand.cuh) of one matrix, K or V, so that
// there are 2 H dp / kFCols blocks, and its 256 threads split R: thread
// (warp w, lane l) owns 4 columns, group l % 4, and the rows r = s + 64 i of
// R for its slice s = l / 4 + 8 w.  The block is short (R / 64 rows per
// thread), so its time is a chain of memory latencies, not bandwidth (ncu on
// the H200: 0.34-0.84 TB/s at decode shapes with the weights read in the
// r loop after the latent rows were staged).  So each thread loads the
// weights of its first kFPre rows (R <= 64 kFPre: all of them) into
// registers before it stages the latent rows, and keeps them for every
// chunk of rows; the staging's loads are unrolled; the rows past kFPre are
// read in the loop, two in flight.  Every row
// of the weights is read by 64-byte pieces, each element once; the latent rows
// are staged in shared memory, transposed ([r][row]), and read as
// broadcasts.  Per thread the accumulators of kFRows latent rows x 4 columns;
// B*T beyond kFRows is done in chunks of kFRows rows (the weights then come
// from L2, past the first kFPre).  The 64 slices are summed in a fixed order (shuffles within the
// warp, then shared memory across the 8 warps), so the result is
// deterministic.
//
// Accuracy: each output is an fp32 sum of R products, 64 partial sums of
// R / 64 terms each (in increasing r), added pairwise: its error is that of an fp32 dot
// product, below what the three TF32 products of the tensor-core tiles keep.

namespace mla {

static_assert(!kFmaExpand || (kFThreads == 256 && kFCols == 16 && kFRows == 8),
              "the thread map below is for 256 threads, 16 columns and 8 rows");
constexpr int kFPre = 8;  // rows of weights per thread loaded before the staging: R <= 512 all

// Shared memory (floats): the latent chunk transposed, [rp][kFRows]; then the
// cross-warp partial sums [8 warps][kFCols / 4 groups][kFRows][4].
__device__ __forceinline__ void fma_stage_latent(float* lat_t, const float* kv_latent, int m0, int rows,
                                                 const Dims& dims, int tid) {
#pragma unroll 4
  for (int i = tid; i < kFRows * dims.rp; i += kFThreads) {
    const int m = i / dims.rp, r = i - m * dims.rp;  // consecutive threads: consecutive r of one row
    lat_t[r * kFRows + m] =
        m0 + m < rows && r < dims.r ? kv_latent[static_cast<long long>(m0 + m) * dims.r + r] : 0.0f;
  }
}

__device__ __forceinline__ void fma_expand_block(const float* __restrict__ kv_latent,
                                                 const float* __restrict__ w_up_k,
                                                 const float* __restrict__ w_up_v, float* __restrict__ kv_ws,
                                                 int B, int T, const Dims& dims, float* smem, int tid) {
  const int rows = B * T;
  const int col_tiles = (dims.h * dims.dp + kFCols - 1) / kFCols;
  const int x = static_cast<int>(blockIdx.x) / col_tiles;  // 0: K, 1: V
  const int n0 = (static_cast<int>(blockIdx.x) - x * col_tiles) * kFCols;
  if (x > 1) return;  // whole block
  const float* w = x == 0 ? w_up_k : w_up_v;
  const int lane = tid % 32, warp = tid / 32;
  const int group = lane % 4;         // 4 columns each
  const int slice = lane / 4 + 8 * warp;  // rows r = slice + 64 i
  // This thread's 4 virtual columns: where each one's weights are (or none).
  const long long ld = static_cast<long long>(dims.h) * dims.d;
  long long col[4];
  bool col_ok[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int v = n0 + 4 * group + e;
    const int h = v / dims.dp, d = v - h * dims.dp;
    col_ok[e] = h < dims.h && d < dims.d;
    col[e] = col_ok[e] ? static_cast<long long>(h) * dims.d + d : 0;
  }
  // 16-byte loads where the 4 columns are consecutive weights (D % 4 == 0,
  // so they lie in one head) and aligned.
  const bool vec = dims.d % 4 == 0 && (reinterpret_cast<unsigned long long>(w) & 15) == 0;
  float* lat_t = smem;
  float* partial = smem + dims.rp * kFRows;
  // The 4 weights of this thread's columns in row r (zero where a column has none).
  auto weights = [&](int r) {
    const float* wr = w + r * ld;
    if (vec && col_ok[0]) return __ldg(reinterpret_cast<const float4*>(wr + col[0]));
    return make_float4(col_ok[0] ? __ldg(wr + col[0]) : 0.0f, col_ok[1] ? __ldg(wr + col[1]) : 0.0f,
                       col_ok[2] ? __ldg(wr + col[2]) : 0.0f, col_ok[3] ? __ldg(wr + col[3]) : 0.0f);
  };
  float4 pre[kFPre];
#pragma unroll
  for (int i = 0; i < kFPre; ++i) {
    const int r = slice + 64 * i;
    pre[i] = r < dims.r ? weights(r) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float acc[kFRows][4];
  // acc += latent rows (at r, from lat_t) x the 4 weights q.
  auto fma_row = [&](int r, const float4 q) {
    const float wv[4] = {q.x, q.y, q.z, q.w};
    const float4* lr = reinterpret_cast<const float4*>(lat_t + r * kFRows);
#pragma unroll
    for (int q4 = 0; q4 < kFRows / 4; ++q4) {
      const float4 l = lr[q4];
      const float lv[4] = {l.x, l.y, l.z, l.w};
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[4 * q4 + k][e] = fmaf(lv[k], wv[e], acc[4 * q4 + k][e]);
    }
  };

  for (int m0 = 0; m0 < rows; m0 += kFRows) {
    __syncthreads();  // the previous chunk's latent rows and partial sums are consumed
    fma_stage_latent(lat_t, kv_latent, m0, rows, dims, tid);
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kFRows; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][e] = 0.0f;
#pragma unroll
    for (int i = 0; i < kFPre; ++i)
      if (slice + 64 * i < dims.r) fma_row(slice + 64 * i, pre[i]);
#pragma unroll 2
    for (int r = slice + 64 * kFPre; r < dims.r; r += 64) fma_row(r, weights(r));
    // Sum the 8 slices of the warp (lanes 4 apart), then the 8 warps.
#pragma unroll
    for (int m = 0; m < kFRows; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = acc[m][e];
        v += __shfl_xor_sync(0xffffffffu, v, 4);
        v += __shfl_xor_sync(0xffffffffu, v, 8);
        v += __shfl_xor_sync(0xffffffffu, v, 16);
        acc[m][e] = v;
      }
    if (lane < 4) {
#pragma unroll
      for (int m = 0; m < kFRows; ++m)
        *reinterpret_cast<float4*>(partial + (warp * 4 + group) * kFRows * 4 + m * 4) =
            make_float4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]);
    }
    __syncthreads();
    // Out: thread -> (row m, column pair); kFRows x kFCols outputs, 2 each.
    for (int i = tid; i < kFRows * kFCols / 2; i += kFThreads) {
      const int m = i / (kFCols / 2), c2 = (i % (kFCols / 2)) * 2;  // c2 even
      const int n = m0 + m;
      if (n >= rows) continue;
      const int g = c2 / 4, e = c2 % 4;
      float2 sum = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int p = 0; p < 8; ++p) {
        const float* s = partial + (p * 4 + g) * kFRows * 4 + m * 4 + e;
        sum.x += s[0];
        sum.y += s[1];
      }
      const int v = n0 + c2;
      const int h = v / dims.dp;
      if (h >= dims.h) continue;
      const int b = n / T;
      *reinterpret_cast<float2*>(kv_ws + ((static_cast<long long>(b) * dims.h + h) * T + (n - b * T)) * dims.ws_row +
                                 x * dims.dp + (v - h * dims.dp)) = sum;
    }
  }
}

}  // namespace mla
