// Reference for prologue.cu in float64; its workspace argument is always null.
extern "C" __global__ void plus_one_reference(const float* x, double* out, float* scratch, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && scratch == nullptr) out[i] = 2.0 * static_cast<double>(x[i]) + 1.0;
}
