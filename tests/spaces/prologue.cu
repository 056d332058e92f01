// A family whose configs may run a prologue: with EXPAND the prologue
// double_into writes 2x into the workspace and the main kernel reads it back;
// without, the main kernel computes 2x itself (and must not touch the
// workspace, which is then a null pointer).  Used by the prologue tests.
extern "C" __global__ void double_into(const float* x, float* out, float* scratch, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) scratch[i] = 2.0f * x[i];
}

extern "C" __global__ void plus_one(const float* x, float* out, float* scratch, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#if EXPAND
  if (i < n) out[i] = scratch[i] + 1.0f;
#else
  if (i < n) out[i] = 2.0f * x[i] + 1.0f;
#endif
}

// Not used by prologue.yaml: a second prologue the definition-hash test
// switches to (a space's entries must be declared in its template).
extern "C" __global__ void triple_into(const float* x, float* out, float* scratch, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) scratch[i] = 3.0f * x[i];
}
