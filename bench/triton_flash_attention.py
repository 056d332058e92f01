"""Causal flash attention in Triton with 3xTF32 dots: the attention half of the Triton peer.

Imported only where Triton is installed (bench/mla_vs_torch.py imports it lazily, and
reports the column as unavailable otherwise).  Tensors are [B, T, H, D] float32 and
contiguous, as the peer's K and V matmuls produce them.  D is a compile-time constant padded
to a power of two for tl.arange; T and H are not specialized, so every shape with the same D
reuses one binary per config.
"""

import math
import time

import triton
import triton.language as tl

from triton_peer import MAX_ELEMENTS, CompileJob, TritonConfig, first_line, padded_head_dim

LOG2E = 1.0 / math.log(2.0)


@triton.jit
def _load_tile(ptrs, rows, T, offs_d, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, CHECK_ROWS: tl.constexpr):
    # Masks only where they can be false: a mask along D that is always true would still
    # stop Triton from vectorizing the loads along D.
    if CHECK_ROWS:
        if HEAD_DIM == D_PAD:
            tile = tl.load(ptrs, mask=rows[:, None] < T, other=0.0)
        else:
            tile = tl.load(ptrs, mask=(rows[:, None] < T) & (offs_d[None, :] < HEAD_DIM), other=0.0)
    else:
        if HEAD_DIM == D_PAD:
            tile = tl.load(ptrs)
        else:
            tile = tl.load(ptrs, mask=offs_d[None, :] < HEAD_DIM, other=0.0)
    return tile


@triton.jit
def _store_tile(ptrs, tile, rows, T, offs_d, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr):
    if HEAD_DIM == D_PAD:
        tl.store(ptrs, tile, mask=rows[:, None] < T)
    else:
        tl.store(ptrs, tile, mask=(rows[:, None] < T) & (offs_d[None, :] < HEAD_DIM))


@triton.jit
def _attend(acc, m_i, l_i, q, k_head, v_head, key_start, rows, cols, offs_d, T, row_stride, qk_scale_log2e,
            HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, MASKED: tl.constexpr):
    # One key block of the online softmax (scores in log2 units: exp2 of scaled logits).
    keys = key_start + cols
    offsets = keys[:, None] * row_stride + offs_d[None, :]
    k = _load_tile(k_head + offsets, keys, T, offs_d, HEAD_DIM, D_PAD, MASKED)
    v = _load_tile(v_head + offsets, keys, T, offs_d, HEAD_DIM, D_PAD, MASKED)
    scores = tl.dot(q, tl.trans(k), input_precision="tf32x3") * qk_scale_log2e
    if MASKED:
        visible = (keys[None, :] <= rows[:, None]) & (keys[None, :] < T)
        scores = tl.where(visible, scores, float("-inf"))
    # Every row already holds a finite maximum or sees a key here (see the kernel), so no
    # row subtracts -inf from -inf.
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(scores - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="tf32x3")
    return acc, m_new, l_i


@triton.jit(do_not_specialize=["T", "H"])
def causal_attention_kernel(q_ptr, k_ptr, v_ptr, out_ptr, T, H, qk_scale_log2e,
                            HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Axis 0 takes the query blocks from the last: those see the most keys, so the longest
    # programs start first and the short ones fill the tail of the grid.
    m_block = tl.cdiv(T, BLOCK_M) - 1 - tl.program_id(0)
    batch_head = tl.program_id(1)
    row_stride = H * HEAD_DIM
    # [B, T, H, D] contiguous: row t of head h of batch b starts at ((b*T + t)*H + h)*D.
    head_start = (batch_head // H) * T * row_stride + (batch_head % H) * HEAD_DIM
    q_start = m_block * BLOCK_M
    rows = q_start + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D_PAD)
    q = _load_tile(q_ptr + head_start + rows[:, None] * row_stride + offs_d[None, :], rows, T, offs_d,
                   HEAD_DIM, D_PAD, True)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    k_head = k_ptr + head_start
    v_head = v_ptr + head_start
    # Key blocks that end before the block's first query row: every row sees every key
    # there, and those keys lie inside T (q_start < T), so they need no mask.
    unmasked_end = (q_start // BLOCK_N) * BLOCK_N
    for key_start in range(0, unmasked_end, BLOCK_N):
        acc, m_i, l_i = _attend(acc, m_i, l_i, q, k_head, v_head, key_start, rows, cols, offs_d, T, row_stride,
                                qk_scale_log2e, HEAD_DIM, D_PAD, False)
    # The diagonal blocks.  The first starts at or before q_start, so every row sees its
    # first key (inside T) and has a finite maximum before any later block masks it whole.
    for key_start in range(unmasked_end, tl.minimum(q_start + BLOCK_M, T), BLOCK_N):
        acc, m_i, l_i = _attend(acc, m_i, l_i, q, k_head, v_head, key_start, rows, cols, offs_d, T, row_stride,
                                qk_scale_log2e, HEAD_DIM, D_PAD, True)
    _store_tile(out_ptr + head_start + rows[:, None] * row_stride + offs_d[None, :], acc / l_i[:, None], rows, T,
                offs_d, HEAD_DIM, D_PAD)


def launch(q, k, v, out, config: TritonConfig) -> None:
    """out = causal softmax(q·k^T / sqrt(D))·v per (batch, head), asynchronously on the
    current stream.  q, k, v and out: contiguous float32 [B, T, H, D] on the GPU."""
    B, T, H, D = q.shape
    for name, tensor in (("k", k), ("v", v), ("out", out)):
        if tuple(tensor.shape) != (B, T, H, D):
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {(B, T, H, D)}")
    for name, tensor in (("q", q), ("k", k), ("v", v), ("out", out)):
        if not tensor.is_contiguous():
            raise ValueError(f"{name} is not contiguous")
    if q.numel() > MAX_ELEMENTS:
        raise ValueError(f"{q.numel()} elements per tensor: over the kernel's 32-bit offsets")
    grid = (math.ceil(T / config.block_m), B * H)
    causal_attention_kernel[grid](q, k, v, out, T, H, LOG2E / math.sqrt(D),
                                  HEAD_DIM=D, D_PAD=padded_head_dim(D), BLOCK_M=config.block_m,
                                  BLOCK_N=config.block_n, num_warps=config.num_warps,
                                  num_stages=config.num_stages)


def precompile(job: CompileJob) -> tuple[CompileJob, float, str]:
    """Compiles one binary into Triton's on-disk cache without launching it (a worker of
    the benchmark's compiler pool): (job, seconds, error text or "").  The argument kinds
    match launch()'s, so the benchmark process later loads this binary instead of compiling:
    16-byte-aligned float32 pointers, unspecialized T and H, an fp32 scale."""
    import torch

    started = time.perf_counter()
    config = job.config
    try:
        causal_attention_kernel.warmup(torch.float32, torch.float32, torch.float32, torch.float32, 2, 2, 1.0,
                                       grid=(1,), HEAD_DIM=job.head_dim, D_PAD=padded_head_dim(job.head_dim),
                                       BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                                       num_warps=config.num_warps, num_stages=config.num_stages)
        return job, time.perf_counter() - started, ""
    except Exception as e:  # noqa: BLE001 - reported by the parent, which compiles it again itself
        return job, time.perf_counter() - started, first_line(e)
