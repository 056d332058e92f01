// float64 reference of faults.cu: same arguments, output in double.
extern "C" __global__ void faults_reference(const float* a, const float* b, double* out, int n,
                                            float scale) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (double)a[i] * (double)scale + (double)b[i];
}
