// Deliberately broken: a syntax error (a missing operand), for the tests that
// check that a compile error is a value carrying the NVRTC log.
extern "C" __global__ void broken_kernel(float* out) {
  out[threadIdx.x] = BROKEN_FACTOR * ;
}
