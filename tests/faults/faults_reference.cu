// float64 reference of faults.cu: same arguments, output in double; the
// workspace ws is a null pointer here.
extern "C" __global__ void faults_reference(const float* a, const float* b, double* out, float* ws,
                                            int n, float scale) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (double)a[i] * (double)scale + (double)b[i];
}
