// A tiny kernel template used by the search-space tests (they never compile it).
extern "C" __global__ void tiny(const float* x, float* y, int n, float scale) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = scale * x[i];
}
