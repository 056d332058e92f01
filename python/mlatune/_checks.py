"""Checks of tensors before they reach the C library, written against what a
tensor has (dtype, device, shape, is_contiguous, data_ptr) without importing
torch: the kernels read raw pointers, so a wrong dtype, device or layout would
otherwise give wrong numbers rather than an error."""

from __future__ import annotations

from typing import NamedTuple, Optional

INT32_MAX = 2**31 - 1

# Element types of cache/c_api.h, by the name torch gives the matching dtype.
ELEMENT_TYPE_NAMES = {0: "float32", 1: "float64", 2: "int32", 3: "int64"}


class MlaShape(NamedTuple):
    """The sizes of one fused MLA attention call."""
    B: int
    T: int
    H: int
    D: int
    R: int


def is_tensor(value) -> bool:
    """A torch.Tensor, recognised without importing torch."""
    return any(cls.__module__.startswith("torch") and cls.__name__ == "Tensor" for cls in type(value).__mro__)


def dtype_name(tensor) -> str:
    """"float32" for torch.float32."""
    return str(tensor.dtype).replace("torch.", "")


def _require_tensor(name: str, tensor) -> None:
    if not is_tensor(tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")


def check_cuda_tensor(name: str, tensor, dtype: str, device_index: int) -> None:
    """TypeError/ValueError unless `tensor` is a contiguous `dtype` tensor on
    CUDA device `device_index`."""
    _require_tensor(name, tensor)
    if dtype_name(tensor) != dtype:
        raise TypeError(f"{name} must be {dtype}, got {dtype_name(tensor)}")
    device = tensor.device
    if device.type != "cuda":
        raise ValueError(f"{name} must be on a CUDA device, got {device}")
    index = device.index if device.index is not None else 0
    if index != device_index:
        raise ValueError(f"{name} is on cuda:{index}, but mlatune launches on cuda:{device_index} "
                         f"(select the GPU with CUDA_VISIBLE_DEVICES)")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous (call .contiguous() first); its strides are "
                         f"{tuple(tensor.stride())} for shape {tuple(tensor.shape)}")


def _dims(name: str, tensor, rank: int, letters: str) -> tuple:
    if tensor.dim() != rank:
        raise ValueError(f"{name} must have {rank} dimensions [{','.join(letters)}], got shape {tuple(tensor.shape)}")
    return tuple(tensor.shape)


def check_mla_arguments(q, kv_latent, w_up_k, w_up_v, out=None, device_index: int = 0,
                        check_memory: bool = True) -> MlaShape:
    """The sizes of a fused MLA call after checking every tensor: float32,
    contiguous, on cuda:`device_index`, with shapes q [B,T,H,D],
    kv_latent [B,T,R], w_up_k and w_up_v [R,H,D] (and out [B,T,H,D], not
    overlapping an input; that check reads addresses, so fake tensors skip it
    with check_memory=False)."""
    tensors = [("q", q), ("kv_latent", kv_latent), ("w_up_k", w_up_k), ("w_up_v", w_up_v)]
    if out is not None:
        tensors.append(("out", out))
    for name, tensor in tensors:
        check_cuda_tensor(name, tensor, "float32", device_index)
    B, T, H, D = _dims("q", q, 4, "BTHD")
    lB, lT, R = _dims("kv_latent", kv_latent, 3, "BTR")
    if (lB, lT) != (B, T):
        raise ValueError(f"kv_latent {tuple(kv_latent.shape)} must be [B,T,R] with B={B}, T={T} of q "
                         f"{tuple(q.shape)}")
    for name, tensor in (("w_up_k", w_up_k), ("w_up_v", w_up_v)):
        if tuple(_dims(name, tensor, 3, "RHD")) != (R, H, D):
            raise ValueError(f"{name} {tuple(tensor.shape)} must be [R,H,D] = [{R},{H},{D}] "
                             f"(R of kv_latent, H and D of q)")
    if out is not None and tuple(_dims("out", out, 4, "BTHD")) != (B, T, H, D):
        raise ValueError(f"out {tuple(out.shape)} must have the shape of q {tuple(q.shape)}")
    shape = MlaShape(B, T, H, D, R)
    for letter, value in zip(MlaShape._fields, shape):
        if value > INT32_MAX:
            raise ValueError(f"{letter}={value} is larger than the kernels' int32 sizes allow")
    if R == 0 and B * T * H * D != 0:
        raise ValueError(f"R must be positive: kv_latent {tuple(kv_latent.shape)} has no latent features")
    if out is not None and check_memory:
        _check_no_overlap(out, tensors[:4])
    return shape


def _byte_range(tensor) -> tuple[int, int]:
    start = tensor.data_ptr()
    return start, start + tensor.numel() * tensor.element_size()


def _check_no_overlap(out, inputs) -> None:
    """The kernels read their inputs while writing out, so out may not share
    memory with any of them."""
    out_start, out_end = _byte_range(out)
    for name, tensor in inputs:
        start, end = _byte_range(tensor)
        if out_start < end and start < out_end:
            raise ValueError(f"out overlaps {name} in memory; the kernel reads {name} while writing out, "
                             f"so pass a separate tensor")
