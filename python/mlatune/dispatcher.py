"""mlatune.Dispatcher: the runtime dispatcher of libmlatune_c.so for any kernel
family of a search-space file (cache/c_api.h), from Python.

A dispatcher opens a tuned database and a space file on CUDA device 0 (the C
ABI's device; pick another GPU with CUDA_VISIBLE_DEVICES), tells what the
family takes (shape variables, buffers), says which config a shape gets and
why, and launches the family on device pointers or CUDA tensors."""

from __future__ import annotations

import ctypes
import numbers
import os
import sys
from collections.abc import Mapping
from typing import NamedTuple, Optional, Sequence

from . import _errors, _library
from ._checks import ELEMENT_TYPE_NAMES, check_cuda_tensor, is_tensor

DEFAULT_SPACE = "fused_mla_attention.yaml"
DEFAULT_DATABASE = "mlatune.db"  # the CLI's default too
DEVICE_INDEX = 0                 # mlatune_open opens CUDA device 0


class Buffer(NamedTuple):
    """One buffer a family takes, as the space file declares it."""
    name: str
    dtype: str          # "float32", "float64", "int32" or "int64"
    role: str           # "input" or "output"
    element_bytes: int


class Choice(NamedTuple):
    """What the dispatcher runs at a shape, and why."""
    reason: str                    # hit, nearest, default, first_valid or none
    config: Optional[str]          # "NAME=value,..."; None when no config can run the shape
    parameters: dict               # config as {name: value text}
    explanation: str               # where the config came from, what was changed and why
    text: str                      # the C library's whole line


def parse_choice(text: str) -> Choice:
    """Splits mlatune_choice_for's "<reason> <config> (<explanation>)"."""
    reason, _, rest = text.partition(" ")
    config_text, _, explanation = rest.partition(" (")
    if explanation.endswith(")"):
        explanation = explanation[:-1]
    config = None if config_text in ("", "-") else config_text
    parameters = {}
    if config:
        for item in config.split(","):
            name, _, value = item.partition("=")
            parameters[name] = value
    return Choice(reason, config, parameters, explanation, text)


def resolve_database(db) -> str:
    """The database path: the argument, else $MLATUNE_DB, else ./mlatune.db."""
    if db is not None:
        return os.fspath(db)
    return os.environ.get("MLATUNE_DB") or DEFAULT_DATABASE


def resolve_space(space) -> str:
    """The space file: a path as given when it exists (or names a folder);
    otherwise a name such as "rms_norm" or "rms_norm.yaml" of a space shipped
    with mlatune, looked up in the recorded search_spaces/ folder, else left to
    the library, which has the shipped spaces compiled in."""
    path = os.fspath(space) if space is not None else DEFAULT_SPACE
    if os.path.exists(path) or os.sep in path:
        return path
    name = path if path.endswith((".yaml", ".yml")) else path + ".yaml"
    recorded = _library.recorded_paths()
    spaces_dir = getattr(recorded, "SPACES_DIR", None) if recorded else None
    if spaces_dir and os.path.isfile(os.path.join(spaces_dir, name)):
        return os.path.join(spaces_dir, name)
    return name


def check_device(device) -> None:
    """ValueError unless `device` names CUDA device 0 (or is None)."""
    if device is None:
        return
    if isinstance(device, numbers.Integral) and not isinstance(device, bool):
        index, kind = int(device), "cuda"
    elif isinstance(device, str):
        kind, _, number = device.partition(":")
        index = int(number) if number.isdigit() else (0 if not number else -1)
    elif hasattr(device, "type"):
        kind, index = device.type, device.index if device.index is not None else 0
    else:
        raise TypeError(f"device must be an int, a string such as 'cuda:0' or a torch.device, got {device!r}")
    if kind != "cuda" or index != DEVICE_INDEX:
        raise ValueError(f"device {device!r}: mlatune's C library launches on CUDA device {DEVICE_INDEX}; "
                         f"select another GPU with CUDA_VISIBLE_DEVICES")


def shape_values(shape, variables: Sequence[str]) -> list[int]:
    """One positive int per shape variable, from a mapping {name: value} or a
    sequence in the order of `variables`."""
    if isinstance(shape, Mapping):
        missing = [v for v in variables if v not in shape]
        unknown = [k for k in shape if k not in variables]
        if missing or unknown:
            raise ValueError(f"shape {dict(shape)}: expected exactly the variables {', '.join(variables)}"
                             + (f"; missing {', '.join(missing)}" if missing else "")
                             + (f"; unknown {', '.join(map(str, unknown))}" if unknown else ""))
        values = [shape[v] for v in variables]
    elif isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise TypeError(f"shape must be a mapping {{name: value}} or a sequence of {len(variables)} ints, "
                        f"got {type(shape).__name__}")
    else:
        values = list(shape)
        if len(values) != len(variables):
            raise ValueError(f"shape {tuple(values)} has {len(values)} values; expected {len(variables)} "
                             f"({', '.join(variables)})")
    for name, value in zip(variables, values):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"shape variable {name} must be an int, got {value!r}")
        if value <= 0:
            raise ValueError(f"shape variable {name} must be positive, got {value}")
    return [int(v) for v in values]


def buffer_pointers(buffers, infos: Sequence[Buffer]) -> tuple[list[int], Optional[list[int]], bool]:
    """(device pointers, their sizes in bytes or None when any is unknown,
    whether any buffer is a torch tensor).  A buffer is a CUDA tensor (checked
    against the space's element type; its size known), an int device pointer,
    or a (pointer, bytes) pair."""
    if isinstance(buffers, (str, bytes)) or not isinstance(buffers, Sequence):
        raise TypeError(f"buffers must be a sequence of {len(infos)} tensors or device pointers")
    if len(buffers) != len(infos):
        raise ValueError(f"{len(buffers)} buffers given; the family takes {len(infos)}: "
                         + ", ".join(f"{b.name} ({b.dtype} {b.role})" for b in infos))
    pointers, sizes, any_tensor = [], [], False
    for info, buffer in zip(infos, buffers):
        if is_tensor(buffer):
            check_cuda_tensor(info.name, buffer, info.dtype, DEVICE_INDEX)
            pointer, size, any_tensor = buffer.data_ptr(), buffer.numel() * buffer.element_size(), True
        elif isinstance(buffer, tuple) and len(buffer) == 2:
            pointer, size = buffer
        elif isinstance(buffer, numbers.Integral) and not isinstance(buffer, bool):
            pointer, size = int(buffer), None
        else:
            raise TypeError(f"buffer {info.name}: expected a CUDA tensor, a device pointer (int) or a "
                            f"(pointer, bytes) pair, got {type(buffer).__name__}")
        if not pointer:
            raise ValueError(f"buffer {info.name} is a null pointer")
        pointers.append(int(pointer))
        sizes.append(None if size is None else int(size))
    return pointers, (None if None in sizes else sizes), any_tensor


def stream_handle(stream, any_tensor: bool) -> int:
    """A cudaStream_t as an int: `stream` itself (an int, or an object with
    .cuda_stream such as torch.cuda.Stream); when None, PyTorch's current
    stream if the buffers are tensors, else 0 (the default stream)."""
    if stream is None:
        if not any_tensor:
            return 0
        torch = sys.modules["torch"]  # loaded, since a buffer is a tensor
        return torch.cuda.current_stream(DEVICE_INDEX).cuda_stream
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    if isinstance(stream, numbers.Integral) and not isinstance(stream, bool):
        return int(stream)
    raise TypeError(f"stream must be None, a cudaStream_t (int) or a torch.cuda.Stream, got {stream!r}")


class Dispatcher:
    """A dispatcher of libmlatune_c.so opened on a database and a space file.

    db: path of the tuned database (default $MLATUNE_DB, else ./mlatune.db);
    space: a space file, or the name of a shipped space (default the fused
    MLA attention space); device: None or CUDA device 0."""

    def __init__(self, db=None, space=None, device=None):
        check_device(device)
        self.database = resolve_database(db)
        self.space_file = resolve_space(space)
        self._lib, self.library_path = _library.load()
        handle = ctypes.c_void_p()
        self._check("mlatune_open", self._lib.mlatune_open(os.fsencode(self.database),
                                                           os.fsencode(self.space_file), ctypes.byref(handle)))
        self._handle = handle
        try:
            self._read_signature()
        except BaseException:
            self.close()
            raise

    # ---- what the family takes ----------------------------------------------------

    def _read_signature(self) -> None:
        lib, h = self._lib, self._handle
        text, count = ctypes.c_char_p(), ctypes.c_size_t()
        self._check("mlatune_kernel_name", lib.mlatune_kernel_name(h, ctypes.byref(text)))
        self.kernel_name = text.value.decode()
        self._check("mlatune_shape_variable_count", lib.mlatune_shape_variable_count(h, ctypes.byref(count)))
        names = []
        for i in range(count.value):
            self._check("mlatune_shape_variable_name", lib.mlatune_shape_variable_name(h, i, ctypes.byref(text)))
            names.append(text.value.decode())
        self.shape_variables = tuple(names)
        self._check("mlatune_buffer_count", lib.mlatune_buffer_count(h, ctypes.byref(count)))
        self.buffers = tuple(self._buffer_info(i) for i in range(count.value))

    def _buffer_info(self, index: int) -> Buffer:
        name, kind, role, size = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()
        self._check("mlatune_buffer_info", self._lib.mlatune_buffer_info(
            self._handle, index, ctypes.byref(name), ctypes.byref(kind), ctypes.byref(role), ctypes.byref(size)))
        return Buffer(name.value.decode(), ELEMENT_TYPE_NAMES.get(kind.value, f"type{kind.value}"),
                      "output" if role.value == 1 else "input", size.value)

    def buffer_elements(self, index: int, shape) -> int:
        """Elements buffer `index` holds at `shape`."""
        values = self._shape_array(shape)
        elements = ctypes.c_uint64()
        self._check("mlatune_buffer_elements", self._lib.mlatune_buffer_elements(
            self._live(), index, values, len(values), ctypes.byref(elements)))
        return elements.value

    def compile_count(self) -> int:
        """NVRTC compilations this dispatcher has done."""
        count = ctypes.c_ulonglong()
        self._check("mlatune_compile_count", self._lib.mlatune_compile_count(self._live(), ctypes.byref(count)))
        return count.value

    # cache/c_api.h's MLATUNE_PHASE_* in order, lower case.
    FIRST_USE_PHASES = ("choose", "store_read", "load", "ready", "miss", "rank", "queue", "first_launch",
                        "workspace", "lock_wait")

    def first_use_ms(self) -> dict:
        """Host time callers spent in first uses of shapes so far, by phase
        (FIRST_USE_PHASES), in ms (mlatune_first_use_ns): take it before and
        after a call to see where that call's first use went."""
        phases = (ctypes.c_ulonglong * len(self.FIRST_USE_PHASES))()
        self._check("mlatune_first_use_ns", self._lib.mlatune_first_use_ns(self._live(), phases))
        return {name: value * 1e-6 for name, value in zip(self.FIRST_USE_PHASES, phases)}

    # ---- choosing and launching ---------------------------------------------------

    def choice(self, shape) -> Choice:
        """The config the dispatcher runs at `shape` (a mapping or a sequence of
        the shape variables), its reason and explanation."""
        values = self._shape_array(shape)
        size = 1024
        while True:
            text = ctypes.create_string_buffer(size)
            status = self._lib.mlatune_choice_for(self._live(), values, len(values), text, size)
            if status != _errors.BUFFER_TOO_SMALL or size >= 1 << 24:
                break
            size *= 16
        self._check("mlatune_choice_for", status)
        return parse_choice(text.value.decode("utf-8", "replace"))

    def race_state(self, shape) -> str:
        """"none", "racing" or "settled": how the race at an untuned `shape`
        stands (a tuned shape, one not launched yet, or racing turned off by
        MLATUNE_RACE=0 has none; see the C ABI's mlatune_race_state)."""
        values = self._shape_array(shape)
        state = ctypes.c_int()
        self._check("mlatune_race_state",
                    self._lib.mlatune_race_state(self._live(), values, len(values), ctypes.byref(state)))
        return {0: "none", 1: "racing", 2: "settled"}[state.value]

    def wait_compiles(self) -> None:
        """Blocks until the background compiles and race preparations queued so
        far, and the preload (MLATUNE_PRELOAD=1), are done (mlatune_wait_compiles)."""
        self._check("mlatune_wait_compiles", self._lib.mlatune_wait_compiles(self._live()))

    def preloaded(self) -> tuple:
        """(loaded, failed): the stored binaries the preload has loaded so far
        and those it could not (MLATUNE_PRELOAD=1 at open; mlatune_preloaded)."""
        loaded, failed = ctypes.c_ulonglong(), ctypes.c_ulonglong()
        self._check("mlatune_preloaded",
                    self._lib.mlatune_preloaded(self._live(), ctypes.byref(loaded), ctypes.byref(failed)))
        return loaded.value, failed.value

    def launch(self, shape, buffers, stream=None) -> None:
        """Launches the family at `shape` on `buffers` (in the order of
        .buffers: CUDA tensors, device pointers, or (pointer, bytes) pairs),
        asynchronously on `stream` (default: PyTorch's current stream when the
        buffers are tensors, else the default stream).  When every buffer's
        size is known, a buffer too small for the shape is refused."""
        values = self._shape_array(shape)
        pointers, sizes, any_tensor = buffer_pointers(buffers, self.buffers)
        handle = stream_handle(stream, any_tensor)
        array = (ctypes.c_void_p * len(pointers))(*pointers)
        if sizes is None:
            status = self._lib.mlatune_launch(self._live(), array, len(pointers), values, len(values), handle)
            self._check("mlatune_launch", status)
        else:
            byte_sizes = (ctypes.c_size_t * len(sizes))(*sizes)
            status = self._lib.mlatune_launch_checked(self._live(), array, byte_sizes, len(pointers), values,
                                                      len(values), handle)
            self._check("mlatune_launch_checked", status)

    def launch_fused_mla_attention(self, pointers: Sequence[int], shape: Sequence[int], stream: int) -> None:
        """mlatune_fused_mla_attention on checked device pointers (q, kv_latent,
        w_up_k, w_up_v, out) and sizes (B, T, H, D, R); what
        mlatune.fused_mla_attention calls after its checks."""
        status = self._lib.mlatune_fused_mla_attention(self._live(), *pointers, *shape, stream)
        self._check("mlatune_fused_mla_attention", status)

    # ---- lifetime -----------------------------------------------------------------

    def close(self) -> None:
        """Frees the dispatcher and unloads its kernels (launches already
        queued keep running).  Idempotent."""
        handle = getattr(self, "_handle", None)
        if handle:
            self._handle = None
            self._lib.mlatune_close(handle)

    def __enter__(self) -> "Dispatcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if getattr(self, "_handle", None) else "closed"
        return f"mlatune.Dispatcher({self.kernel_name!r}, db={self.database!r}, space={self.space_file!r}, {state})"

    def _live(self) -> ctypes.c_void_p:
        if not self._handle:
            raise ValueError("this mlatune.Dispatcher is closed")
        return self._handle

    def _shape_array(self, shape):
        values = shape_values(shape, self.shape_variables)
        return (ctypes.c_int64 * len(values))(*values)

    def _check(self, function: str, status: int) -> None:
        if status != _errors.OK:
            raise _errors.error_for_status(function, status, _library.last_error(self._lib))
