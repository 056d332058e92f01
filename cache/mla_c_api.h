/* The C ABI of mlatune's runtime dispatch, for callers in other languages
 * (a PyTorch extension, Python through ctypes).  No exception crosses it:
 * every function returns a status, and mlatune_last_error() gives the
 * message of the calling thread's last failure.
 *
 * Thread safety: one dispatcher may be used from many threads at once,
 * except mlatune_close, which must not race any other call on it. */
#ifndef MLATUNE_MLA_C_API_H
#define MLATUNE_MLA_C_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlatune_dispatcher mlatune_dispatcher;

enum {
  MLATUNE_OK = 0,
  MLATUNE_INVALID_ARGUMENT = 1, /* bad sizes, null pointers, a shape no config can run, a wrong space */
  MLATUNE_ENVIRONMENT = 2,      /* no GPU, unreadable database, a binary that cannot compile or load */
  MLATUNE_CUDA_ERROR = 3,       /* a CUDA runtime call failed (the launch itself) */
  MLATUNE_BUFFER_TOO_SMALL = 4, /* mlatune_choice: text truncated (still NUL-terminated) */
  MLATUNE_INTERNAL = 5          /* anything else */
};

/* Opens a dispatcher on a database and a fused MLA search space file on CUDA
 * device 0.  On failure *out is NULL. */
int mlatune_open(const char* database, const char* space_file, mlatune_dispatcher** out);
/* Frees the dispatcher and unloads its kernels.  NULL is ignored. */
void mlatune_close(mlatune_dispatcher* dispatcher);

/* Fused MLA attention on float32 device pointers, launched asynchronously on
 * `stream` (a cudaStream_t; NULL = the default stream):
 * q [B,T,H,D], kv_latent [B,T,R], w_up_k and w_up_v [R,H,D], out [B,T,H,D]. */
int mlatune_fused_mla_attention(mlatune_dispatcher* dispatcher, const float* q, const float* kv_latent,
                                const float* w_up_k, const float* w_up_v, float* out, int B, int T,
                                int H, int D, int R, void* stream);

/* The message of the calling thread's last failed call (of any dispatcher,
 * or of mlatune_open); "" when none.  Valid until this thread's next call. */
const char* mlatune_last_error(const mlatune_dispatcher* dispatcher);

/* Writes "<reason> <config> (<explanation>)" for a shape into buffer, where
 * reason is hit, nearest, default, first_valid or none. */
int mlatune_choice(mlatune_dispatcher* dispatcher, int B, int T, int H, int D, int R, char* buffer,
                   size_t size);

/* NVRTC compilations this dispatcher has done (0 when every binary came
 * from the database). */
int mlatune_compile_count(const mlatune_dispatcher* dispatcher, unsigned long long* count);

#ifdef __cplusplus
}
#endif

#endif /* MLATUNE_MLA_C_API_H */
