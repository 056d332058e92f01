/* The C ABI of mlatune's runtime dispatch, for any kernel family of a search
 * space file: callers in C, C++ or other languages (Python through ctypes, a
 * PyTorch extension) launch a family without C++ written for it.  A caller
 * asks the dispatcher what the family takes (shape variables, buffers with
 * their element types, roles and sizes at a shape), then launches with one
 * device pointer per buffer and one value per shape variable.
 *
 * No exception crosses this ABI: every function returns a status, and
 * mlatune_last_error() gives the message of the calling thread's last
 * failure.  Strings returned through `const char**` belong to the dispatcher
 * and stay valid until mlatune_close.
 *
 * Thread safety: one dispatcher may be used from many threads at once,
 * except mlatune_close, which must not race any other call on it.
 *
 * cache/mla_c_api.h adds typed entry points for fused MLA attention. */
#ifndef MLATUNE_C_API_H
#define MLATUNE_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mlatune_dispatcher mlatune_dispatcher;

/* Statuses. */
enum {
  MLATUNE_OK = 0,
  MLATUNE_INVALID_ARGUMENT = 1, /* bad sizes, null pointers, a shape no config can run, a wrong space */
  MLATUNE_ENVIRONMENT = 2,      /* no GPU, unreadable database, a binary that cannot compile or load */
  MLATUNE_CUDA_ERROR = 3,       /* a CUDA runtime call failed (the launch itself) */
  MLATUNE_BUFFER_TOO_SMALL = 4, /* a text did not fit the caller's buffer (still NUL-terminated) */
  MLATUNE_INTERNAL = 5,         /* anything else */
  MLATUNE_NOT_READY = 6         /* MLATUNE_COMPILE_NONBLOCKING: nothing ran, no binary is ready yet (see below) */
};

/* Element types of buffers, as the space file names them. */
enum { MLATUNE_FLOAT32 = 0, MLATUNE_FLOAT64 = 1, MLATUNE_INT32 = 2, MLATUNE_INT64 = 3 };

/* Roles of buffers: read by the kernel, or written by it. */
enum { MLATUNE_INPUT = 0, MLATUNE_OUTPUT = 1 };

/* Opens a dispatcher on a database and a search space file (any kernel
 * family) on CUDA device 0.  On failure *out is NULL. */
int mlatune_open(const char* database, const char* space_file, mlatune_dispatcher** out);
/* Frees the dispatcher and unloads its kernels.  NULL is ignored. */
void mlatune_close(mlatune_dispatcher* dispatcher);

/* The message of the calling thread's last failed call (of any dispatcher,
 * or of mlatune_open); "" when none.  Valid until this thread's next call. */
const char* mlatune_last_error(const mlatune_dispatcher* dispatcher);

/* NVRTC compilations this dispatcher has done (0 when every binary came
 * from the database), on callers' threads and in the background. */
int mlatune_compile_count(const mlatune_dispatcher* dispatcher, unsigned long long* count);

/* Host time callers' threads spent in first uses of shapes so far, summed
 * over shapes, by phase, in nanoseconds: ns[MLATUNE_PHASE_*] for each phase
 * below (work the background thread does for races and compiles is not
 * counted).  Take it before and after a call to see where that call's first
 * use went.  The first launch's time includes its workspaces' allocation
 * (also given apart); the phases do not overlap otherwise. */
enum {
  MLATUNE_PHASE_CHOOSE = 0,      /* the selector: index lookup, repairs, the stand-ins' ranking */
  MLATUNE_PHASE_STORE_READ = 1,  /* cubins read from the database */
  MLATUNE_PHASE_LOAD = 2,        /* cubins loaded into the context */
  MLATUNE_PHASE_READY = 3,       /* kernel attributes, shared-memory opt-in */
  MLATUNE_PHASE_MISS = 4,        /* the untuned shape noted (counted in the database in the background) */
  MLATUNE_PHASE_RANK = 5,        /* stand-ins ranked (only where the choice's binary is absent) */
  MLATUNE_PHASE_QUEUE = 6,       /* the choice's background compile queued */
  MLATUNE_PHASE_FIRST_LAUNCH = 7,
  MLATUNE_PHASE_WORKSPACE = 8,   /* inside the first launch: workspaces allocated and freed */
  MLATUNE_PHASE_LOCK_WAIT = 9,   /* waiting for the background thread's load or store to end */
  MLATUNE_PHASE_COUNT = 10
};
int mlatune_first_use_ns(const mlatune_dispatcher* dispatcher, unsigned long long ns[MLATUNE_PHASE_COUNT]);

/* ---- compiling -------------------------------------------------------------
 * By default a launch never waits for NVRTC while a binary is ready: where
 * the chosen config's binary is neither loaded nor in the database, the shape
 * runs a stand-in (another valid config whose binary is ready) while the
 * chosen one compiles on a background thread, and switches to it once it is
 * loaded.  Only a shape with no ready binary at all compiles on the caller's
 * thread.  MLATUNE_COMPILE_BLOCKING makes every first launch compile its
 * chosen binary on the caller's thread instead.  MLATUNE_COMPILE_NONBLOCKING
 * never compiles on the caller's thread: where no binary at all is ready, the
 * launch returns MLATUNE_NOT_READY at once, having launched nothing, and the
 * binary compiles in the background; the shape's launches return it until a
 * binary is ready (mlatune_wait_compiles waits for that).  Use it where the
 * caller has another way to run the call (its own attention) meanwhile. */
enum { MLATUNE_COMPILE_BACKGROUND = 0, MLATUNE_COMPILE_BLOCKING = 1, MLATUNE_COMPILE_NONBLOCKING = 2 };
/* Sets the mode for shapes first launched from now on. */
int mlatune_set_compile_mode(mlatune_dispatcher* dispatcher, int mode);
/* Blocks until every background compile queued so far has finished and its
 * shapes have switched to their chosen binary (or kept their stand-in after
 * a failed compile, which mlatune_choice_for then reports), and the untuned
 * shapes noted so far are counted in the database. */
int mlatune_wait_compiles(mlatune_dispatcher* dispatcher);
/* The stored binaries the preload has loaded so far, and those it could not
 * read or load (MLATUNE_PRELOAD=1: every stored binary the dispatcher could
 * run is loaded on a thread of its own from open on; mlatune_wait_compiles
 * waits for it). */
int mlatune_preloaded(const mlatune_dispatcher* dispatcher, unsigned long long* loaded, unsigned long long* failed);
/* Whether the shape currently runs a stand-in (1) or its chosen config (0;
 * also for a shape not launched yet). */
int mlatune_runs_stand_in(mlatune_dispatcher* dispatcher, const int64_t* shape, size_t shape_count,
                          int* stand_in);

/* ---- races at untuned shapes -------------------------------------------------
 * At a shape nobody tuned the dispatcher readies the selector's first four
 * configs (MLATUNE_RACE=N: N of them; 0 or 1: no race), plus up to two that
 * launch more blocks where the first leaves SMs idle (MLATUNE_RACE_FILL=N: N
 * of those), in the background and times them on the shape's next launches
 * (CUDA events on the caller's stream, never waited for), then runs the
 * fastest; mlatune_choice_for says how it went.  Every raced config is valid
 * at the shape: outputs are right throughout, their last bits may differ
 * until the race settles. */
enum { MLATUNE_NO_RACE = 0, MLATUNE_RACING = 1, MLATUNE_RACE_SETTLED = 2 };
/* The shape's race state: no race (a tuned shape, racing off, a shape not
 * launched yet, or its candidates still being readied: see
 * mlatune_wait_compiles), racing, or settled. */
int mlatune_race_state(mlatune_dispatcher* dispatcher, const int64_t* shape, size_t shape_count, int* state);

/* ---- what the family takes ------------------------------------------------ */

/* The space's kernel name (`kernel:` of the file). */
int mlatune_kernel_name(const mlatune_dispatcher* dispatcher, const char** name);

/* The shape variables, in the order launches take their values. */
int mlatune_shape_variable_count(const mlatune_dispatcher* dispatcher, size_t* count);
int mlatune_shape_variable_name(const mlatune_dispatcher* dispatcher, size_t index, const char** name);

/* The caller's buffers: the space's input and output arguments in launch
 * order (its scalars come from the shape, its workspaces from the
 * dispatcher).  Each out-pointer of mlatune_buffer_info may be NULL when
 * that part is not wanted; element_type is an MLATUNE_FLOAT32.. value, role
 * MLATUNE_INPUT or MLATUNE_OUTPUT, element_bytes the size of one element. */
int mlatune_buffer_count(const mlatune_dispatcher* dispatcher, size_t* count);
int mlatune_buffer_info(const mlatune_dispatcher* dispatcher, size_t index, const char** name,
                        int* element_type, int* role, size_t* element_bytes);
/* Elements buffer `index` holds at a shape (shape_count values, one per
 * shape variable, each positive). */
int mlatune_buffer_elements(const mlatune_dispatcher* dispatcher, size_t index, const int64_t* shape,
                            size_t shape_count, uint64_t* elements);

/* ---- launching ------------------------------------------------------------ */

/* Launches the family at `shape` (shape_count values, one per shape variable,
 * each positive) on device pointers `buffers` (buffer_count of them, in
 * mlatune_buffer_info's order, none NULL), asynchronously on `stream` (a
 * cudaStream_t; NULL = the default stream).  A tuned shape launches the
 * stored best binary; an untuned one the nearest tuned config that is valid
 * for it, else the space's default (compiled once). */
int mlatune_launch(mlatune_dispatcher* dispatcher, const void* const* buffers, size_t buffer_count,
                   const int64_t* shape, size_t shape_count, void* stream);

/* mlatune_launch that also checks sizes: buffer_bytes[i] is the size in
 * bytes of buffers[i].  A buffer smaller than its argument at `shape` is
 * MLATUNE_INVALID_ARGUMENT naming the argument, the bytes it needs and the
 * bytes given; nothing is launched. */
int mlatune_launch_checked(mlatune_dispatcher* dispatcher, const void* const* buffers,
                           const size_t* buffer_bytes, size_t buffer_count, const int64_t* shape,
                           size_t shape_count, void* stream);

/* Writes "<reason> <config> (<explanation>)" for a shape into buffer, where
 * reason is hit, nearest, repaired, fallback, default, first_valid or none;
 * a repaired config's explanation says what changed and why ("FLOAT4 true
 * -> false (constraint '...' fails at D=64,R=131)").  While the shape runs a
 * stand-in, "; running stand-in <reason> <config> ..." follows; once it
 * races, "; racing ..." or "; race settled among N configs ...: running
 * <reason> <config> at <median> us median ...". */
int mlatune_choice_for(mlatune_dispatcher* dispatcher, const int64_t* shape, size_t shape_count, char* buffer,
                       size_t size);

#ifdef __cplusplus
}
#endif

#endif /* MLATUNE_C_API_H */
