// Fault-injection kernel for the evaluator's tests (faults.yaml): computes
// out = a * scale + b, or fails in the way MODE asks for.
extern "C" __global__ void faults(const float* a, const float* b, float* out, int n, float scale) {
  const int first = blockIdx.x * blockDim.x + threadIdx.x;
  const int stride = gridDim.x * blockDim.x;
#if MODE == MODE_hang
  if (first == 0) {
    // Inputs are random normal, never NaN: this spins forever; the volatile
    // read keeps the compiler from removing the loop.
    volatile const float* p = a;
    while (p[0] == p[0]) {
    }
  }
#endif
#if MODE == MODE_trap
  if (first == 0) __trap();
#endif
  // No __restrict__: out may alias a or b, so the second pass of double_work
  // must load and store everything again.
  const int passes = MODE == MODE_double_work ? 2 : 1;
  for (int pass = 0; pass < passes; ++pass) {
    for (int i = first; i < n; i += stride) {
      float value = a[i] * scale + b[i];
#if MODE == MODE_off_by_1e3
      if (i == n / 2) value += 1e-3f;
#endif
      out[i] = value;
    }
  }
#if MODE == MODE_out_of_bounds
  if (first == 0) out[(long long)n + (1ll << 36)] = 1.0f;  // 256 GiB past the end
#endif
}
