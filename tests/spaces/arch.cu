// A kernel with an sm_90a-only path, for the architecture tests: PATH ==
// hopper issues wgmma.fence, which NVRTC accepts for --gpu-architecture=sm_90a
// only, so a binary that compiles proves the target was sm_90a.  Both paths
// compute y = scale * x, so the same reference checks either.
extern "C" __global__ void arch_probe(const float* x, float* y, int n, float scale) {
#if PATH == PATH_hopper
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = scale * x[i];
}
