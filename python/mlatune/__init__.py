"""mlatune from Python: the runtime dispatcher of libmlatune_c.so through ctypes.

    import mlatune
    d = mlatune.Dispatcher(db="mlatune.db", space="rms_norm")   # any kernel family
    d.choice({"ROWS": 4, "COLS": 4096})        # reason, config, explanation
    d.launch({"ROWS": 4, "COLS": 4096}, [x, w, out])

    out = mlatune.fused_mla_attention(q, kv_latent, w_up_k, w_up_v)  # torch.ops.mlatune

Importing the package needs neither torch nor a GPU; the PyTorch op module
(mlatune.torch_ops) is imported with the package when torch already is, and
otherwise on first use of fused_mla_attention, default_dispatcher or
set_default_dispatcher."""

from __future__ import annotations

import sys

from ._errors import (LibraryNotFoundError, MlatuneCudaError, MlatuneEnvironmentError, MlatuneError,
                      MlatuneInputError)
from ._library import library_path
from .dispatcher import Buffer, Choice, Dispatcher

__version__ = "0.1.0"

__all__ = ["Buffer", "Choice", "Dispatcher", "LibraryNotFoundError", "MlatuneCudaError",
           "MlatuneEnvironmentError", "MlatuneError", "MlatuneInputError", "default_dispatcher",
           "fused_mla_attention", "library_path", "set_default_dispatcher"]

_TORCH_NAMES = ("fused_mla_attention", "default_dispatcher", "set_default_dispatcher")


def _bind_torch_ops() -> None:
    """Imports mlatune.torch_ops (registering torch.ops.mlatune.*) and binds its
    functions here, so that torch.compile finds plain module attributes."""
    from . import torch_ops

    for name in _TORCH_NAMES:
        globals()[name] = getattr(torch_ops, name)


def __getattr__(name: str):
    # Only the names that need torch come through here, once: afterwards they
    # are ordinary attributes of the module.
    if name in _TORCH_NAMES:
        _bind_torch_ops()
        return globals()[name]
    raise AttributeError(f"module 'mlatune' has no attribute {name!r}")


if "torch" in sys.modules:
    try:
        _bind_torch_ops()
    except ImportError:
        pass  # a torch without custom_op: the same ImportError comes on first use
