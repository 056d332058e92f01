// Float64 reference for RMSNorm, used by validation at every shape.  Same
// arguments as the tuned kernel except that `out` is double:
//
//   out[r, c] = x[r, c] * w[c] / sqrt(sum_c(x[r, c]^2) / COLS + eps)
//
// everything in double (the float inputs and eps widened exactly).  One
// block of 256 threads per row at a time; the grid strides over the rows, so
// any grid size works.  Each thread sums its columns c = tid, tid + 256, ...
// in order, warps reduce with xor shuffles and the 8 warp sums are added in
// warp order: the result depends only on the inputs, never on the grid.
//
// Compiled in: SHAPE_COLS.  Launch: block [256, 1, 1] (anything else traps),
// no dynamic shared memory.

#if !defined(SHAPE_COLS)
#error "rms_norm_reference needs SHAPE_COLS"
#endif

namespace rms_ref {

constexpr int kCols = SHAPE_COLS;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace rms_ref

extern "C" __global__ void __launch_bounds__(256)
rms_norm_reference(const float* __restrict__ x, const float* __restrict__ w, double* __restrict__ out,
                   int rows, float eps) {
  using namespace rms_ref;
  __shared__ double warp_sums[kWarps];
  if (blockDim.x != kThreads || blockDim.y != 1 || blockDim.z != 1) __trap();
  const int tid = static_cast<int>(threadIdx.x);
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * kCols;
    double sum = 0.0;
    for (int c = tid; c < kCols; c += kThreads) {
      const double v = xr[c];
      sum += v * v;
    }
    sum = warp_sum(sum);
    __syncthreads();  // the previous row is done reading warp_sums
    if (tid % 32 == 0) warp_sums[tid / 32] = sum;
    __syncthreads();
    double total = 0.0;
    for (int i = 0; i < kWarps; ++i) total += warp_sums[i];
    const double scale = 1.0 / sqrt(total / kCols + static_cast<double>(eps));
    for (int c = tid; c < kCols; c += kThreads)
      out[row * kCols + c] = static_cast<double>(xr[c]) * scale * static_cast<double>(w[c]);
  }
}
