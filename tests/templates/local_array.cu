// A kernel whose runtime-indexed array cannot live in registers: ptxas puts
// it in local memory (a stack frame), which the compiler must flag.
extern "C" __global__ void gather_local(float* out, const float* in, const int* index, int n) {
  float buffer[LOCAL_SIZE];
  for (int i = 0; i < LOCAL_SIZE; ++i) buffer[i] = in[i * n + threadIdx.x];
  out[threadIdx.x] = buffer[index[threadIdx.x] % LOCAL_SIZE];
}
