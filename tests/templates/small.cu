// A small kernel for compiler tests: scales a vector by a compiled-in factor.
#ifndef SCALE
#error "SCALE must be defined"
#endif
extern "C" __global__ void scale_vector(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * static_cast<float>(SCALE);
}
