// Support kernels of the evaluator (compiled at run time with NVRTC for the
// GPU at hand, no headers): random normal inputs, NaN poison, comparison with
// the float64 reference, L2 flush, the empty kernel that gives the timing
// floor, and the memory-integrity checks of validation (guard patterns,
// bitwise comparison of inputs with their pristine copies).  Everything here is deterministic: the same seed gives the same
// inputs, and the comparison reduces in a fixed order.

// Number of blocks and threads of every comparison; fixed so that the order
// of the reduction (and so its rounding) never depends on the problem size.
#define MLATUNE_COMPARE_BLOCKS 256
#define MLATUNE_COMPARE_THREADS 256
// Partial sums per block: sum of squared differences, sum of squared
// reference values, max abs difference, non-finite outputs, non-finite references.
#define MLATUNE_PARTIALS 5

typedef unsigned long long u64;

__device__ __forceinline__ u64 mlatune_mix(u64 x) {
  // splitmix64 finalizer: a bijective 64-bit mix; counter-based, so every
  // element draws independently of the launch geometry.
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ double mlatune_normal(u64 key, u64 i) {
  u64 a = mlatune_mix(key ^ mlatune_mix(2 * i));
  u64 b = mlatune_mix(key ^ mlatune_mix(2 * i + 1));
  // Box-Muller with 53-bit uniforms; u1 in (0, 1] keeps log finite.
  double u1 = ((a >> 11) + 1) * (1.0 / 9007199254740992.0);
  double u2 = (b >> 11) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cospi(2.0 * u2);
}

extern "C" __global__ void mlatune_fill_normal_f32(float* data, u64 n, u64 key) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    data[i] = (float)mlatune_normal(key, i);
}

extern "C" __global__ void mlatune_fill_normal_f64(double* data, u64 n, u64 key) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    data[i] = mlatune_normal(key, i);
}

// Integer inputs get uniform values in [0, 16): small, non-negative, never all zero.
extern "C" __global__ void mlatune_fill_int32(int* data, u64 n, u64 key) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    data[i] = (int)(mlatune_mix(key ^ mlatune_mix(i)) >> 60);
}

extern "C" __global__ void mlatune_fill_int64(long long* data, u64 n, u64 key) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    data[i] = (long long)(mlatune_mix(key ^ mlatune_mix(i)) >> 60);
}

extern "C" __global__ void mlatune_poison_f32(float* data, u64 n) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    data[i] = __int_as_float(0x7fc00000);
}

extern "C" __global__ void mlatune_poison_f64(double* data, u64 n) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    data[i] = __longlong_as_double(0x7ff8000000000000ll);
}

// Writes every word of a buffer at least twice the L2 size, so that nothing
// the timed kernel reads is still cached.  The value changes per call so no
// write can be skipped as redundant.
extern "C" __global__ void mlatune_flush_l2(unsigned* data, u64 n, unsigned value) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    data[i] = value + (unsigned)i;
}

extern "C" __global__ void mlatune_empty() {}

// Keeps the GPU busy for about `cycles` clocks without touching memory, so
// that the host has queued the timed launch before the GPU reaches it: the
// events then measure the kernel, not the host's launch rate.
extern "C" __global__ void mlatune_spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__device__ __forceinline__ bool mlatune_finite(double x) { return isfinite(x); }

template <typename T>
__device__ void mlatune_compare(const T* out, const double* ref, u64 n, double* partials) {
  __shared__ double shared[MLATUNE_PARTIALS][MLATUNE_COMPARE_THREADS];
  double d2 = 0.0, r2 = 0.0, max_abs = 0.0, bad_out = 0.0, bad_ref = 0.0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    double o = (double)out[i];
    double r = ref[i];
    if (!mlatune_finite(r)) {
      bad_ref += 1.0;
      continue;
    }
    if (!mlatune_finite(o)) {
      bad_out += 1.0;
      continue;
    }
    double d = o - r;
    d2 += d * d;
    r2 += r * r;
    max_abs = fmax(max_abs, fabs(d));
  }
  unsigned t = threadIdx.x;
  shared[0][t] = d2;
  shared[1][t] = r2;
  shared[2][t] = max_abs;
  shared[3][t] = bad_out;
  shared[4][t] = bad_ref;
  __syncthreads();
  for (unsigned stride = MLATUNE_COMPARE_THREADS / 2; stride > 0; stride /= 2) {
    if (t < stride) {
      shared[0][t] += shared[0][t + stride];
      shared[1][t] += shared[1][t + stride];
      shared[2][t] = fmax(shared[2][t], shared[2][t + stride]);
      shared[3][t] += shared[3][t + stride];
      shared[4][t] += shared[4][t + stride];
    }
    __syncthreads();
  }
  if (t < MLATUNE_PARTIALS) partials[blockIdx.x * MLATUNE_PARTIALS + t] = shared[t][0];
}

extern "C" __global__ void mlatune_compare_f32(const float* out, const double* ref, u64 n,
                                               double* partials) {
  mlatune_compare(out, ref, n, partials);
}

extern "C" __global__ void mlatune_compare_f64(const double* out, const double* ref, u64 n,
                                               double* partials) {
  mlatune_compare(out, ref, n, partials);
}

// One thread sums the block partials in index order: exact same result every run.
extern "C" __global__ void mlatune_reduce_partials(const double* partials, unsigned blocks,
                                                   double* result) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double sums[MLATUNE_PARTIALS] = {0.0, 0.0, 0.0, 0.0, 0.0};
  for (unsigned b = 0; b < blocks; ++b) {
    sums[0] += partials[b * MLATUNE_PARTIALS + 0];
    sums[1] += partials[b * MLATUNE_PARTIALS + 1];
    sums[2] = fmax(sums[2], partials[b * MLATUNE_PARTIALS + 2]);
    sums[3] += partials[b * MLATUNE_PARTIALS + 3];
    sums[4] += partials[b * MLATUNE_PARTIALS + 4];
  }
  for (int k = 0; k < MLATUNE_PARTIALS; ++k) result[k] = sums[k];
}

// ---- Memory integrity during validation (tuner/guarded_buffer.h) ----------
// A changed byte is found by comparing words; the counts and the lowest
// changed position land in two 64-bit counters (atomics: their totals do not
// depend on the order of the blocks).

__device__ __forceinline__ void mlatune_tally(u64 changed, u64 first, u64* total, u64* lowest) {
  if (changed == 0) return;
  atomicAdd(total, changed);
  atomicMin(lowest, first);
}

// Writes the guard pattern over `n` words.
extern "C" __global__ void mlatune_fill_guard(unsigned* words, u64 n, unsigned pattern) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    words[i] = pattern;
}

// Counts the bytes of `n` words that differ from the pattern; `lowest` gets
// the byte offset (from `words`) of the first one.
extern "C" __global__ void mlatune_check_guard(const unsigned* words, u64 n, unsigned pattern,
                                               u64* total, u64* lowest) {
  u64 changed = 0, first = ~0ull;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    unsigned difference = words[i] ^ pattern;
    if (difference == 0) continue;
    // The GPU is little-endian: byte b of the word holds bits 8b..8b+7.
    for (unsigned b = 0; b < 4; ++b) {
      if (((difference >> (8 * b)) & 0xffu) == 0) continue;
      ++changed;
      first = min(first, 4 * i + b);
    }
  }
  mlatune_tally(changed, first, total, lowest);
}

// Counts the elements (4 or 8 bytes) that differ bit for bit between `a`
// and `b`; `lowest` gets the index of the first one.
template <typename T>
__device__ void mlatune_diff(const T* a, const T* b, u64 n, u64* total, u64* lowest) {
  u64 changed = 0, first = ~0ull;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
    if (a[i] == b[i]) continue;
    ++changed;
    first = min(first, i);
  }
  mlatune_tally(changed, first, total, lowest);
}

extern "C" __global__ void mlatune_diff_u32(const unsigned* a, const unsigned* b, u64 n, u64* total,
                                            u64* lowest) {
  mlatune_diff(a, b, n, total, lowest);
}

extern "C" __global__ void mlatune_diff_u64(const u64* a, const u64* b, u64 n, u64* total,
                                            u64* lowest) {
  mlatune_diff(a, b, n, total, lowest);
}

// Copies a float32 output into float64, so that a second run can be compared
// with the first by the same comparison kernels as with the reference.
extern "C" __global__ void mlatune_widen_f32(const float* in, double* out, u64 n) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    out[i] = (double)in[i];
}
