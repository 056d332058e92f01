// Fault-injection kernel for the evaluator's tests (faults.yaml): computes
// out = a * scale + b, or fails in the way MODE asks for.  The configs whose
// prologue runs (staged, workspace_past_end) first copy b into the workspace
// ws and read it from there.

// The value the stray writes leave: none of its bytes is the guard byte 0xA5
// (42.0f is 0x42280000), so every one of them shows as changed.
#define FAULTS_STRAY 42.0f

#if MODE == MODE_nondeterministic || MODE == MODE_last_bit_jitter
// Every block takes one ticket per launch; launches on one stream run one
// after the other, so ticket / gridDim.x counts this module's launches.
__device__ unsigned long long faults_tickets;

__device__ unsigned long long faults_launch_index() {
  __shared__ unsigned long long launch;
  if (threadIdx.x == 0) launch = atomicAdd(&faults_tickets, 1ull) / gridDim.x;
  __syncthreads();
  return launch;
}
#endif

extern "C" __global__ void faults_stage(const float* a, const float* b, float* out, float* ws, int n,
                                        float scale) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) ws[i] = b[i];
#if MODE == MODE_workspace_past_end
  if (blockIdx.x == 0 && threadIdx.x == 0) ws[n] = FAULTS_STRAY;
#endif
}

extern "C" __global__ void faults(const float* a, const float* b, float* out, float* ws, int n,
                                  float scale) {
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
#if MODE == MODE_staged || MODE == MODE_workspace_past_end
  const float* addend = ws;
#else
  const float* addend = b;
#endif
#if MODE == MODE_nondeterministic || MODE == MODE_last_bit_jitter
  const bool odd_launch = faults_launch_index() % 2 == 1;
#endif
  // No __restrict__: out may alias a or b, so the second pass of double_work
  // must load and store everything again.
  const int passes = MODE == MODE_double_work ? 2 : 1;
  for (int pass = 0; pass < passes; ++pass) {
    for (int i = first; i < n; i += stride) {
      float value = a[i] * scale + addend[i];
#if MODE == MODE_off_by_1e3
      if (i == n / 2) value += 1e-3f;
#endif
#if MODE == MODE_nondeterministic
      // 6e-5 off one way on even launches and the other way on odd ones:
      // each run alone is within max_abs 1e-4 of the reference, but two
      // runs differ by 1.2e-4.
      if (i == n / 3) value += odd_launch ? 6e-5f : -6e-5f;
#endif
#if MODE == MODE_last_bit_jitter
      // The last bit of every element flips on odd launches, as a kernel
      // whose atomics add in a different order each time: within tolerance.
      if (odd_launch) value = __int_as_float(__float_as_int(value) ^ 1);
#endif
      out[i] = value;
#if MODE == MODE_overwrites_b
      // The output is right (b[17] was read above, by this thread alone),
      // but the input is not left as it was.
      if (i == 17) ((float*)b)[i] = FAULTS_STRAY;
#endif
    }
  }
#if MODE == MODE_out_of_bounds
  if (first == 0) out[(long long)n + (1ll << 36)] = 1.0f;  // 256 GiB past the end
#endif
#if MODE == MODE_past_end
  if (first == 0) out[n] = FAULTS_STRAY;
#endif
#if MODE == MODE_before_start
  if (first == 0) out[-1] = FAULTS_STRAY;
#endif
}
