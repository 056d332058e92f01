"""Fused MLA attention as PyTorch custom operators (torch.ops.mlatune.*).

The ops are registered with torch.library.custom_op, each with a fake
implementation that only computes the output's metadata, so torch.compile
traces a model that calls them without a graph break, and CUDA graphs capture
their launch.  They run on PyTorch's current CUDA stream of cuda:0 through the
default dispatcher (mlatune.default_dispatcher()).  Inference only: no
autograd formula is registered.

Importing this module imports torch; `import mlatune` does so only when torch
is already imported, or on first use of mlatune.fused_mla_attention."""

# No "from __future__ import annotations": custom_op reads the annotations
# as types to infer the operator schema.
import atexit
import threading
from typing import Optional

import torch

from ._checks import check_mla_arguments
from .dispatcher import DEVICE_INDEX, Dispatcher

if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
    raise ImportError(f"mlatune's PyTorch op needs torch.library.custom_op (PyTorch 2.4 or later); "
                      f"this is torch {torch.__version__}")

_default_lock = threading.Lock()
_default: Optional[Dispatcher] = None


def default_dispatcher() -> Dispatcher:
    """The dispatcher the ops launch through: opened on first use on the fused
    MLA space and the database $MLATUNE_DB (else ./mlatune.db), unless
    set_default_dispatcher gave one."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Dispatcher()
        return _default


def set_default_dispatcher(dispatcher: Optional[Dispatcher]) -> None:
    """Makes the ops launch through `dispatcher` (opened on the fused MLA
    space); None reopens the default on next use."""
    global _default
    if dispatcher is not None and not isinstance(dispatcher, Dispatcher):
        raise TypeError(f"expected an mlatune.Dispatcher, got {type(dispatcher).__name__}")
    with _default_lock:
        _default = dispatcher


@atexit.register
def _close_default() -> None:
    # Python's exit handlers run before the C ones that tear down the CUDA
    # runtime, so the dispatcher's kernels are unloaded while that still works.
    global _default
    with _default_lock:
        if _default is not None:
            _default.close()
            _default = None


def _launch(q, kv_latent, w_up_k, w_up_v, out) -> None:
    shape = check_mla_arguments(q, kv_latent, w_up_k, w_up_v, out, DEVICE_INDEX)
    if out.numel() == 0:
        return  # nothing to compute; the C ABI takes positive sizes only
    stream = torch.cuda.current_stream(out.device).cuda_stream
    pointers = [t.data_ptr() for t in (q, kv_latent, w_up_k, w_up_v, out)]
    default_dispatcher().launch_fused_mla_attention(pointers, shape, stream)


# No device_types: the one implementation serves every device, so that a CPU
# tensor meets check_mla_arguments' ValueError rather than a missing kernel.
@torch.library.custom_op("mlatune::fused_mla_attention", mutates_args=())
def _fused_mla_attention(q: torch.Tensor, kv_latent: torch.Tensor, w_up_k: torch.Tensor,
                         w_up_v: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    _launch(q, kv_latent, w_up_k, w_up_v, out)
    return out


@_fused_mla_attention.register_fake
def _fused_mla_attention_fake(q, kv_latent, w_up_k, w_up_v):
    check_mla_arguments(q, kv_latent, w_up_k, w_up_v, None, DEVICE_INDEX, check_memory=False)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


@torch.library.custom_op("mlatune::fused_mla_attention_out", mutates_args=("out",))
def _fused_mla_attention_out(q: torch.Tensor, kv_latent: torch.Tensor, w_up_k: torch.Tensor,
                             w_up_v: torch.Tensor, out: torch.Tensor) -> None:
    _launch(q, kv_latent, w_up_k, w_up_v, out)


@_fused_mla_attention_out.register_fake
def _fused_mla_attention_out_fake(q, kv_latent, w_up_k, w_up_v, out):
    check_mla_arguments(q, kv_latent, w_up_k, w_up_v, out, DEVICE_INDEX, check_memory=False)


def fused_mla_attention(q: torch.Tensor, kv_latent: torch.Tensor, w_up_k: torch.Tensor, w_up_v: torch.Tensor,
                        out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Causal fused MLA attention on contiguous float32 CUDA tensors:
    q [B,T,H,D], kv_latent [B,T,R], w_up_k and w_up_v [R,H,D]; returns a new
    [B,T,H,D] tensor, or writes into `out` and returns it.  Runs
    asynchronously on the current CUDA stream.  TypeError for a wrong type or
    dtype, ValueError for a wrong device, layout or shape."""
    if out is None:
        return torch.ops.mlatune.fused_mla_attention(q, kv_latent, w_up_k, w_up_v)
    torch.ops.mlatune.fused_mla_attention_out(q, kv_latent, w_up_k, w_up_v, out)
    return out
