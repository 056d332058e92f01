// prologue.cu's family with its prologue compiled apart (apart.yaml): the
// framework compiles the main part with MLATUNE_PART_MAIN, which leaves the
// prologue out, and the prologue part with MLATUNE_PART_PROLOGUE, which
// leaves the main kernel out.  The prologue reads PROLOGUE_THREADS only
// through its launch; THREADS is the main kernel's.
#ifndef MLATUNE_PART_MAIN
extern "C" __global__ void __launch_bounds__(PROLOGUE_THREADS) double_into(const float* x, float* out, float* scratch, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) scratch[i] = 2.0f * x[i];
}
#endif

#ifndef MLATUNE_PART_PROLOGUE
extern "C" __global__ void __launch_bounds__(THREADS) plus_one(const float* x, float* out, float* scratch, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#if EXPAND
  if (i < n) out[i] = scratch[i] + 1.0f;
#else
  if (i < n) out[i] = 2.0f * x[i] + 1.0f;
#endif
}
#endif
