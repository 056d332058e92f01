#!/usr/bin/env python3
"""Side-by-side benchmark: mlatune's dispatched RMSNorm against PyTorch.

    out[r, c] = x[r, c] * w[c] / sqrt(mean_c(x[r, :]^2) + eps)      (float32, eps = the space's)

One process, torch's current CUDA stream, one timing method for every implementation:

  mlatune             libmlatune_c.so through ctypes and its generic C ABI (cache/c_api.h):
                      the binding asks the dispatcher for the family's shape variables and
                      buffers and launches with mlatune_launch_checked, so nothing here is
                      specific to RMSNorm but the tensors it builds
  torch_rms_norm      torch.nn.functional.rms_norm
  eager_composite     x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
  compiled_composite  torch.compile (default mode) of eager_composite

Timing is that of bench/mla_vs_torch.py (its Timer): before each call a 256 MiB buffer is
zeroed (L2 flush) and the GPU kept busy by torch.cuda._sleep so the call is queued before
the GPU reaches it; CUDA events around the one call; median of the repetitions with its
spread.  TF32 is off.  Every output is checked against float64 computed on the GPU from
the same inputs: rel-L2 = ||out - ref|| / ||ref||; above 1e-5, or not finite, is flagged.
RMSNorm moves 2 * ROWS * COLS + COLS floats at least; GB/s is on that count.

`--self-test` checks what needs no GPU (shape parsing, byte counts, tables, CSV, and the
ctypes binding's error path on the real library) and needs only python3: torch is imported
only when a benchmark runs.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import dataclasses
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple, Optional, Sequence

sys.dont_write_bytecode = True  # importing the sibling script must not litter bench/ with __pycache__
sys.path.insert(0, str(Path(__file__).resolve().parent))
import mla_vs_torch as common  # noqa: E402  (Timer, torch set-up, C ABI statuses)

REPO_ROOT = Path(__file__).resolve().parent.parent
PEAK_BANDWIDTH_GBPS = 4800.0     # H200 HBM3e, nominal
REL_L2_TOLERANCE = 1e-5          # the project's strict-fp32 admission bound
IMPLEMENTATIONS = ("mlatune", "torch_rms_norm", "eager_composite", "compiled_composite")
TYPE_NAMES = {0: "float32", 1: "float64", 2: "int32", 3: "int64"}
ROLE_NAMES = {0: "input", 1: "output"}


class Shape(NamedTuple):
    """An RMSNorm problem size, with the label it is reported under."""

    label: str
    rows: int
    cols: int

    def describe(self) -> str:
        return f"{self.label} (ROWS={self.rows}, COLS={self.cols})"


# LLM-like: a decode step, small and large batches of tokens at common hidden sizes, and
# odd sizes (4095: no float4; 333 rows).
DEFAULT_SHAPES = (
    Shape("decode", 1, 4096),
    Shape("batch32", 32, 4096),
    Shape("small", 512, 512),
    Shape("odd", 333, 4095),
    Shape("mid", 2048, 4096),
    Shape("llm5120", 4096, 5120),
    Shape("wide", 8192, 8192),
    Shape("max", 32768, 8192),
)


def parse_shapes(text: str) -> list[Shape]:
    """Parses "ROWS,COLS;..." where an item may also be a label of DEFAULT_SHAPES.

    Raises ValueError naming the item that is wrong."""
    known = {shape.label.lower(): shape for shape in DEFAULT_SHAPES}
    shapes = []
    for item in (part.strip() for part in text.split(";")):
        if not item:
            continue
        if item.lower() in known:
            shapes.append(known[item.lower()])
            continue
        fields = [field.strip() for field in item.split(",")]
        if len(fields) != 2:
            raise ValueError(f"shape '{item}': expected ROWS,COLS (2 integers) or one of "
                             f"{', '.join(s.label for s in DEFAULT_SHAPES)}")
        try:
            rows, cols = (int(field) for field in fields)
        except ValueError:
            raise ValueError(f"shape '{item}': every size must be an integer") from None
        if rows <= 0 or cols <= 0:
            raise ValueError(f"shape '{item}': every size must be positive")
        label = next((s.label for s in DEFAULT_SHAPES if (s.rows, s.cols) == (rows, cols)), f"{rows}x{cols}")
        shapes.append(Shape(label, rows, cols))
    if not shapes:
        raise ValueError(f"no shape in '{text}'")
    return shapes


def minimum_bytes(shape: Shape) -> int:
    """x read once, out written once, w read once: (2 * ROWS * COLS + COLS) float32s."""
    return 4 * (2 * shape.rows * shape.cols + shape.cols)


# ---------------------------------------------------------------------------------------
# Results and their presentation (pure Python: exercised by --self-test)


@dataclasses.dataclass
class Row:
    """One implementation at one shape: its timing, its error, or why it has neither."""

    shape: Shape
    implementation: str
    status: str = "ok"  # "ok" or "failed"
    median_us: float = math.nan
    min_us: float = math.nan
    p90_us: float = math.nan
    samples: int = 0
    rel_l2: float = math.nan
    ratio_to_mlatune: float = math.nan  # this time / mlatune's time at the shape
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def accurate(self) -> bool:
        return self.rel_l2 <= REL_L2_TOLERANCE  # NaN fails

    @property
    def spread(self) -> float:
        return (self.p90_us - self.min_us) / self.median_us if self.ok else math.nan

    @property
    def gbps(self) -> float:
        return minimum_bytes(self.shape) / (self.median_us * 1e-6) / 1e9 if self.ok else math.nan

    @property
    def pct_of_bandwidth(self) -> float:
        return 100.0 * self.gbps / PEAK_BANDWIDTH_GBPS


def timed_row(shape: Shape, implementation: str, times_us: Sequence[float], rel_l2: float,
              note: str = "") -> Row:
    ordered = sorted(times_us)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    return Row(shape, implementation, "ok", statistics.median(ordered), ordered[0], p90, len(ordered), rel_l2,
               note=note)


def fill_ratios(rows: Sequence[Row]) -> None:
    reference = next((r for r in rows if r.implementation == "mlatune" and r.ok), None)
    for row in rows:
        row.ratio_to_mlatune = row.median_us / reference.median_us if reference and row.ok else math.nan


def _number(value: float, spec: str, suffix: str = "") -> str:
    return "n/a" if not math.isfinite(value) else format(value, spec) + suffix


def _error_text(row: Row) -> str:
    if not row.ok and math.isnan(row.rel_l2):
        return "n/a"
    text = _number(row.rel_l2, ".1e") if math.isfinite(row.rel_l2) else str(row.rel_l2)
    return text if row.accurate else f"**{text} > {REL_L2_TOLERANCE:.0e}**"


def format_table(rows: Sequence[Row]) -> str:
    lines = [f"| implementation | median µs | spread | time / mlatune | rel-L2 vs fp64 | GB/s "
             f"| % of {PEAK_BANDWIDTH_GBPS:g} GB/s | note |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        note = row.note.replace("|", "\\|").replace("\n", " ")
        if not row.ok:
            note = f"FAILED: {note}"
        lines.append(
            f"| {row.implementation} | {_number(row.median_us, '.1f')} | {_number(row.spread * 100, '.0f', '%')} "
            f"| {_number(row.ratio_to_mlatune, '.2f', '×')} | {_error_text(row)} "
            f"| {_number(row.gbps, '.0f')} | {_number(row.pct_of_bandwidth, '.1f', '%')} | {note} |")
    return "\n".join(lines)


CSV_COLUMNS = ("shape", "rows", "cols", "implementation", "status", "median_us", "min_us", "p90_us", "spread",
               "samples", "ratio_to_mlatune", "rel_l2", "within_tolerance", "minimum_bytes", "gbps",
               "pct_of_bandwidth", "note")


def write_csv(rows: Sequence[Row], path: Path) -> None:
    def cell(value: float, spec: str = ".6g") -> str:
        return format(value, spec) if math.isfinite(value) else ("" if math.isnan(value) else str(value))

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in rows:
            s = r.shape
            writer.writerow([s.label, s.rows, s.cols, r.implementation, r.status, cell(r.median_us),
                             cell(r.min_us), cell(r.p90_us), cell(r.spread, ".4f"), r.samples,
                             cell(r.ratio_to_mlatune, ".4f"), cell(r.rel_l2, ".3e"),
                             str(r.accurate).lower() if r.ok else "", minimum_bytes(s), cell(r.gbps, ".1f"),
                             cell(r.pct_of_bandwidth, ".2f"), r.note])


def _shapes_in_order(rows: Sequence[Row]) -> list[Shape]:
    return list(dict.fromkeys(r.shape for r in rows))


def summary_lines(rows: Sequence[Row]) -> list[str]:
    """Per shape: mlatune against the fastest accurate PyTorch implementation."""
    lines = []
    for shape in _shapes_in_order(rows):
        shape_rows = [r for r in rows if r.shape == shape]
        ours = next((r for r in shape_rows if r.implementation == "mlatune" and r.ok), None)
        theirs = [r for r in shape_rows if r.implementation != "mlatune" and r.ok and r.accurate]
        best = min(theirs, key=lambda r: r.median_us) if theirs else None
        if ours is None:
            lines.append(f"{shape.label}: mlatune failed" + (
                f"; fastest accurate PyTorch: {best.implementation} {best.median_us:.1f} µs" if best else ""))
        elif best is None:
            lines.append(f"{shape.label}: mlatune {ours.median_us:.1f} µs; no accurate PyTorch result")
        else:
            factor = best.median_us / ours.median_us
            verdict = f"{factor:.2f}× faster" if factor >= 1 else f"{1 / factor:.2f}× slower"
            lines.append(f"{shape.label}: mlatune {ours.median_us:.1f} µs vs {best.implementation} "
                         f"{best.median_us:.1f} µs: mlatune {verdict}"
                         + ("" if ours.accurate else " (but outside the error tolerance)"))
    return lines


def format_report(rows: Sequence[Row], choices: dict[str, str], method: str, environment: str) -> str:
    parts = ["# mlatune RMSNorm vs PyTorch, side by side", "", f"Environment: {environment}", "",
             f"Method: {method}", ""]
    for shape in _shapes_in_order(rows):
        parts += [f"## {shape.describe()}", "",
                  f"Minimum traffic {minimum_bytes(shape):,} bytes; at {PEAK_BANDWIDTH_GBPS:g} GB/s: "
                  f"{minimum_bytes(shape) / PEAK_BANDWIDTH_GBPS / 1e3:.3g} µs "
                  f"(the cold launch floor is {common.LAUNCH_FLOOR_US} µs).", ""]
        if shape.label in choices:
            parts += [f"mlatune's choice: `{choices[shape.label]}`", ""]
        parts += [format_table([r for r in rows if r.shape == shape]), ""]
    parts += ["## Summary", ""] + [f"- {line}" for line in summary_lines(rows)]
    flagged = [r for r in rows if r.ok and not r.accurate]
    failed = [r for r in rows if not r.ok]
    if flagged:
        parts += ["", f"Outside the rel-L2 tolerance of {REL_L2_TOLERANCE:.0e}: " +
                  ", ".join(f"{r.implementation} at {r.shape.label}" for r in flagged) + "."]
    if failed:
        parts += ["", "Failed: " + ", ".join(f"{r.implementation} at {r.shape.label}" for r in failed) + "."]
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------
# Any kernel family through the generic C ABI (cache/c_api.h)


class BufferInfo(NamedTuple):
    name: str
    element_type: str  # "float32", ...
    role: str          # "input" or "output"
    element_bytes: int


class Family:
    """libmlatune_c.so loaded with ctypes and one dispatcher on a database and space.

    Knows no family: the kernel name, shape variables and buffers come from the library."""

    def __init__(self, library: Path, database: Path, space: Path):
        try:
            self._lib = ctypes.CDLL(str(library))
        except OSError as e:
            raise common.MlatuneError("dlopen", 2, f"{library}: {e}") from None
        self._declare(self._lib)
        self._handle = ctypes.c_void_p()
        self._check("mlatune_open", self._lib.mlatune_open(os.fsencode(database), os.fsencode(space),
                                                           ctypes.byref(self._handle)))
        self.kernel = self._string("mlatune_kernel_name", self._lib.mlatune_kernel_name)
        self.shape_variables = [self._string("mlatune_shape_variable_name", self._lib.mlatune_shape_variable_name, i)
                                for i in range(self._count(self._lib.mlatune_shape_variable_count))]
        self.buffers = [self._buffer(i) for i in range(self._count(self._lib.mlatune_buffer_count))]

    @staticmethod
    def _declare(lib) -> None:
        h, size_p, char_pp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_char_p)
        i64_p, int_p = ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int)
        prototypes = {
            "mlatune_open": [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(h)],
            "mlatune_close": [h],
            "mlatune_last_error": [h],
            "mlatune_compile_count": [h, ctypes.POINTER(ctypes.c_ulonglong)],
            "mlatune_kernel_name": [h, char_pp],
            "mlatune_shape_variable_count": [h, size_p],
            "mlatune_shape_variable_name": [h, ctypes.c_size_t, char_pp],
            "mlatune_buffer_count": [h, size_p],
            "mlatune_buffer_info": [h, ctypes.c_size_t, char_pp, int_p, int_p, size_p],
            "mlatune_buffer_elements": [h, ctypes.c_size_t, i64_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64)],
            "mlatune_launch_checked": [h, ctypes.POINTER(ctypes.c_void_p), size_p, ctypes.c_size_t, i64_p,
                                       ctypes.c_size_t, ctypes.c_void_p],
            "mlatune_choice_for": [h, i64_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t],
        }
        for name, arguments in prototypes.items():
            function = getattr(lib, name)
            function.argtypes = arguments
            function.restype = None if name == "mlatune_close" else (
                ctypes.c_char_p if name == "mlatune_last_error" else ctypes.c_int)

    def _check(self, function: str, status: int) -> None:
        if status != 0:
            raise common.MlatuneError(function, status, self.last_error())

    def last_error(self) -> str:
        text = self._lib.mlatune_last_error(None)
        return text.decode("utf-8", "replace") if text else ""

    def _count(self, function) -> int:
        count = ctypes.c_size_t(0)
        self._check(function.__name__, function(self._handle, ctypes.byref(count)))
        return count.value

    def _string(self, name: str, function, *index) -> str:
        text = ctypes.c_char_p()
        self._check(name, function(self._handle, *index, ctypes.byref(text)))
        return text.value.decode()

    def _buffer(self, index: int) -> BufferInfo:
        name, element_type, role, size = ctypes.c_char_p(), ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()
        self._check("mlatune_buffer_info", self._lib.mlatune_buffer_info(
            self._handle, index, ctypes.byref(name), ctypes.byref(element_type), ctypes.byref(role),
            ctypes.byref(size)))
        return BufferInfo(name.value.decode(), TYPE_NAMES[element_type.value], ROLE_NAMES[role.value], size.value)

    def _shape_array(self, shape: dict[str, int]):
        if set(shape) != set(self.shape_variables):
            raise ValueError(f"{self.kernel} takes shape variables {self.shape_variables}; given {sorted(shape)}")
        return (ctypes.c_int64 * len(self.shape_variables))(*(shape[v] for v in self.shape_variables))

    def elements(self, buffer: str, shape: dict[str, int]) -> int:
        """Elements of a buffer at a shape."""
        index = [b.name for b in self.buffers].index(buffer)
        values, count = self._shape_array(shape), ctypes.c_uint64(0)
        self._check("mlatune_buffer_elements", self._lib.mlatune_buffer_elements(
            self._handle, index, values, len(values), ctypes.byref(count)))
        return count.value

    def choice(self, shape: dict[str, int]) -> str:
        """"<hit|nearest|default|first_valid|none> <config> (<why>)" for the shape."""
        values, size = self._shape_array(shape), 1024
        while True:
            text = ctypes.create_string_buffer(size)
            status = self._lib.mlatune_choice_for(self._handle, values, len(values), text, size)
            if status != common.BUFFER_TOO_SMALL or size >= 1 << 20:
                break
            size *= 16
        self._check("mlatune_choice_for", status)
        return text.value.decode("utf-8", "replace")

    def compile_count(self) -> int:
        count = ctypes.c_ulonglong(0)
        self._check("mlatune_compile_count", self._lib.mlatune_compile_count(self._handle, ctypes.byref(count)))
        return count.value

    def launcher(self, tensors: dict, shape: dict[str, int]) -> Callable[[int], None]:
        """A launch of the family on contiguous CUDA tensors named like its buffers, built once:
        the returned function takes a cudaStream_t (an integer) and launches asynchronously,
        the library checking every buffer's size against the shape."""
        missing = [b.name for b in self.buffers if b.name not in tensors]
        if missing:
            raise ValueError(f"{self.kernel} needs buffers {missing}")
        for b in self.buffers:
            t = tensors[b.name]
            if not t.is_contiguous() or t.element_size() != b.element_bytes or str(t.dtype) != f"torch.{b.element_type}":
                raise ValueError(f"{b.name}: a contiguous {b.element_type} tensor is needed, not {t.dtype}")
        n = len(self.buffers)
        pointers = (ctypes.c_void_p * n)(*(tensors[b.name].data_ptr() for b in self.buffers))
        sizes = (ctypes.c_size_t * n)(*(tensors[b.name].numel() * b.element_bytes for b in self.buffers))
        values = self._shape_array(shape)
        launch = self._lib.mlatune_launch_checked

        def run(stream: int) -> None:
            self._check("mlatune_launch_checked", launch(self._handle, pointers, sizes, n, values, len(values),
                                                        stream))

        return run

    def close(self) -> None:
        if self._handle:
            self._lib.mlatune_close(self._handle)
            self._handle = ctypes.c_void_p()


# ---------------------------------------------------------------------------------------
# The PyTorch implementations and the float64 reference


def eager_composite(x, w, eps: float):
    """x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w, in tensor methods only
    (so that torch.compile traces no import)."""
    return x * (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w


def reference_fp64(x, w, eps: float):
    """The definition in float64 on the GPU, from the same float32 inputs."""
    x64, w64 = x.double(), w.double()
    return x64 * (x64.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w64


def space_eps(space: Path) -> float:
    """The float32 eps the space passes the kernel (its `eps` argument's value)."""
    for line in space.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("- {name: eps,") and "value:" in stripped:
            return float(stripped.split("value:")[1].strip(" }"))
    raise ValueError(f"{space}: no eps argument with a value")


def measure(shape: Shape, name: str, fn: Callable[[], object], reference, timer, warmup: int,
            poison: Optional[Callable[[], None]] = None, note: str = "") -> Row:
    """Warms up, checks the output against the reference, then times; a failure is a row."""
    try:
        for _ in range(warmup):
            fn()
        timer.stream.synchronize()
        if poison:
            poison()
        error = common.relative_l2(fn(), reference)  # synchronizes
        return timed_row(shape, name, timer.time(fn), error, note)
    except Exception as e:  # noqa: BLE001 - a failing implementation is reported, not fatal
        return Row(shape, name, "failed", note=common._failure_text(e))


def mlatune_row(shape: Shape, family: Family, x, w, reference, timer, args, choices) -> Row:
    import torch

    sizes = {"ROWS": shape.rows, "COLS": shape.cols}
    try:
        choices[shape.label] = family.choice(sizes)
    except common.MlatuneError as e:
        choices[shape.label] = f"unknown ({e})"
    print(f"  mlatune choice: {choices[shape.label]}")
    out = torch.empty_like(x)
    launch = family.launcher({"x": x, "w": w, "out": out}, sizes)
    compiles_before = family.compile_count()

    def run():
        launch(torch.cuda.current_stream().cuda_stream)
        return out

    row = measure(shape, "mlatune", run, reference, timer, args.warmup, poison=lambda: out.fill_(float("nan")))
    compiled = family.compile_count() - compiles_before
    if compiled:
        row.note = (row.note + "; " if row.note else "") + f"{compiled} NVRTC compile(s) on first use (warm-up)"
    return row


def compiled_row(shape: Shape, x, w, eps: float, reference, timer, args) -> Row:
    import torch

    if args.skip_compile:
        return Row(shape, "compiled_composite", "failed", note="skipped (--skip-compile)")
    torch._dynamo.reset()  # one specialization per shape, never the recompile limit
    try:
        compiled = torch.compile(eager_composite, dynamic=False)
        started = time.monotonic()
        compiled(x, w, eps)  # compiles; failures surface here
        timer.stream.synchronize()
        note = f"compiled in {time.monotonic() - started:.1f} s (not timed)"
        return measure(shape, "compiled_composite", lambda: compiled(x, w, eps), reference, timer, args.warmup,
                       note=note)
    except Exception as e:  # noqa: BLE001 - a compiler failure is a result to report
        return Row(shape, "compiled_composite", "failed", note=f"torch.compile: {common._failure_text(e)}")


def benchmark_shape(shape: Shape, index: int, args, timer, family: Optional[Family], family_failure: str,
                    eps: float, choices: dict[str, str]) -> list[Row]:
    import torch
    import torch.nn.functional as F

    generator = torch.Generator(device="cuda").manual_seed(args.seed + index)
    x = torch.randn(shape.rows, shape.cols, generator=generator, device="cuda", dtype=torch.float32)
    w = torch.randn(shape.cols, generator=generator, device="cuda", dtype=torch.float32)
    reference = reference_fp64(x, w, eps)
    rows = [mlatune_row(shape, family, x, w, reference, timer, args, choices) if family is not None
            else Row(shape, "mlatune", "failed", note=family_failure)]
    rows.append(measure(shape, "torch_rms_norm", lambda: F.rms_norm(x, (shape.cols,), w, eps), reference, timer,
                        args.warmup))
    rows.append(measure(shape, "eager_composite", lambda: eager_composite(x, w, eps), reference, timer,
                        args.warmup))
    rows.append(compiled_row(shape, x, w, eps, reference, timer, args))
    fill_ratios(rows)
    del x, w, reference
    torch.cuda.empty_cache()
    return rows


def open_family(args) -> tuple[Optional[Family], str]:
    try:
        family = Family(args.lib, args.db, args.space)
    except common.MlatuneError as e:
        print(f"mlatune unavailable, PyTorch only: {e}", file=sys.stderr)
        return None, str(e)
    names = [b.name for b in family.buffers]
    print(f"# mlatune family {family.kernel}: shape {family.shape_variables}, buffers "
          + ", ".join(f"{b.name} ({b.element_type} {b.role})" for b in family.buffers))
    if family.kernel != "rms_norm" or names != ["x", "w", "out"]:
        family.close()
        return None, f"{args.space} is {family.kernel} with buffers {names}, not rms_norm(x, w, out)"
    return family, ""


def run_benchmark(args) -> int:
    try:
        torch = common.load_torch()
    except ImportError as e:
        print(f"error: PyTorch is needed for the benchmark ({e}); --self-test runs without it", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 1
    eps = space_eps(args.space)
    family, family_failure = open_family(args)
    environment = common.environment_text(torch)
    print(f"# {environment}")
    rows: list[Row] = []
    choices: dict[str, str] = {}
    with torch.cuda.stream(torch.cuda.Stream()):
        timer = common.Timer(torch.cuda.current_stream(),
                             torch.empty(common.FLUSH_BYTES, dtype=torch.uint8, device="cuda"),
                             args.busy_cycles, args.reps, args.budget_s)
        method = (timer.method(args.warmup).replace("TFLOP/s on the materialized FLOP count",
                                                    "GB/s on the minimum traffic")
                  + f" Inputs: fresh N(0,1) float32 x and w per shape (seed {args.seed} + shape index); "
                  f"eps = {eps:g}.")
        print(f"# {method}")
        for index, shape in enumerate(args.shapes):
            print(f"\n== {shape.describe()}: {minimum_bytes(shape) / 1e6:.3f} MB minimum traffic")
            try:
                shape_rows = benchmark_shape(shape, index, args, timer, family, family_failure, eps, choices)
            except Exception as e:  # noqa: BLE001 - e.g. the inputs or the reference do not fit
                shape_rows = [Row(shape, name, "failed", note=f"shape not run: {common._failure_text(e)}")
                              for name in IMPLEMENTATIONS]
                torch.cuda.empty_cache()
            print(format_table(shape_rows))
            rows += shape_rows
    if family is not None:
        print(f"\nmlatune NVRTC compilations in this process: {family.compile_count()}")
        family.close()
    print("\n" + "\n".join(summary_lines(rows)))
    write_csv(rows, args.out_dir / f"{args.stem}.csv")
    (args.out_dir / f"{args.stem}.md").write_text(format_report(rows, choices, method, environment))
    print(f"wrote {args.out_dir / (args.stem + '.csv')}, {args.out_dir / (args.stem + '.md')}")
    for r in rows:
        if r.ok and not r.accurate:
            print(f"FLAGGED: {r.implementation} at {r.shape.label}: rel-L2 {r.rel_l2:.2e} > {REL_L2_TOLERANCE:g}")
    return 0


# ---------------------------------------------------------------------------------------
# --self-test: everything above that needs no GPU


def self_test(library: Optional[Path]) -> int:
    failures: list[str] = []
    checks = 0

    def check(condition: bool, what: str) -> None:
        nonlocal checks
        checks += 1
        if not condition:
            failures.append(what)

    def raises_value_error(text: str, fragment: str) -> None:
        try:
            parse_shapes(text)
        except ValueError as e:
            check(fragment in str(e), f"parse_shapes({text!r}) message {str(e)!r} lacks {fragment!r}")
            return
        check(False, f"parse_shapes({text!r}) accepted bad input")

    parsed = parse_shapes(" decode ; 333,4095;; 7, 5 ;MAX")
    check([(s.rows, s.cols) for s in parsed] == [(1, 4096), (333, 4095), (7, 5), (32768, 8192)], f"{parsed}")
    check([s.label for s in parsed] == ["decode", "odd", "7x5", "max"], f"labels {parsed}")
    raises_value_error("1,2,3", "expected ROWS,COLS")
    raises_value_error("1,x", "must be an integer")
    raises_value_error("0,5", "must be positive")
    raises_value_error(" ; ", "no shape")
    raises_value_error("huge", "one of decode")

    # Minimum traffic by hand: 4 * (2 * 333 * 4095 + 4095) and 4 * (2 + 4096) * 4096 / 4096...
    by_label = {s.label: s for s in DEFAULT_SHAPES}
    check(minimum_bytes(by_label["odd"]) == 4 * (2 * 333 * 4095 + 4095) == 10_925_460, "odd bytes")
    check(minimum_bytes(by_label["decode"]) == 3 * 4 * 4096, "decode bytes")

    odd = by_label["odd"]
    rows = [timed_row(odd, "mlatune", [12.0, 10.0, 11.0, 10.0, 30.0], 1e-7),
            timed_row(odd, "torch_rms_norm", [22.0] * 5, 2e-7),
            timed_row(odd, "eager_composite", [40.0, 41.0, 39.0], 2e-5),
            Row(odd, "compiled_composite", "failed", note="torch.compile: no | cc")]
    fill_ratios(rows)
    check(rows[0].median_us == 11.0 and rows[0].p90_us == 30.0 and rows[0].samples == 5, f"stats {rows[0]}")
    check(abs(rows[1].ratio_to_mlatune - 2.0) < 1e-12, f"ratio {rows[1].ratio_to_mlatune}")
    check(math.isnan(rows[3].ratio_to_mlatune), "a failed row has no ratio")
    check(abs(rows[1].gbps - 10_925_460 / 22e-6 / 1e9) < 1e-9, f"GB/s {rows[1].gbps}")
    check(abs(rows[1].pct_of_bandwidth - 100 * 496.6118181818 / 4800) < 1e-6, f"% {rows[1].pct_of_bandwidth}")
    check(rows[1].accurate and not rows[2].accurate, "tolerance flags")
    check(not Row(odd, "x", rel_l2=math.nan).accurate, "NaN error must not pass")

    table = format_table(rows).splitlines()
    check(len(table) == 2 + len(rows), f"table has {len(table)} lines")
    check(all(line.count(" | ") == table[0].count(" | ") for line in table[2:]), "table columns")
    check("| torch_rms_norm | 22.0 | 0% | 2.00× | 2.0e-07 | 497 | 10.3% |" in table[3], table[3])
    check("**2.0e-05 > 1e-05**" in table[4], f"flag missing: {table[4]}")
    check("FAILED: torch.compile" in table[5], table[5])

    report = format_report(rows, {"odd": "hit ALGORITHM=reread"}, "events", "test GPU")
    check("## odd (ROWS=333, COLS=4095)" in report and "`hit ALGORITHM=reread`" in report, "report heading")
    check("odd: mlatune 11.0 µs vs torch_rms_norm 22.0 µs: mlatune 2.00× faster" in report, "report summary")
    check("Outside the rel-L2 tolerance of 1e-05: eager_composite at odd." in report, "report flags")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nested" / "rows.csv"
        write_csv(rows, path)
        with path.open(newline="") as f:
            read = list(csv.DictReader(f))
        check(tuple(read[0].keys()) == CSV_COLUMNS, f"CSV columns {tuple(read[0].keys())}")
        check(read[1]["ratio_to_mlatune"] == "2.0000" and read[1]["minimum_bytes"] == "10925460", f"{read[1]}")
        check(read[3]["status"] == "failed" and read[3]["median_us"] == "", f"CSV failed row {read[3]}")

    check(space_eps(REPO_ROOT / "search_spaces" / "rms_norm.yaml") == 1e-6, "the space's eps")

    if library is not None:
        missing = Path(tempfile.gettempdir()) / f"mlatune_self_test_{os.getpid()}" / "none.db"
        try:
            Family(library, missing, REPO_ROOT / "search_spaces" / "rms_norm.yaml")
            check(False, "mlatune_open succeeded on a missing database")
        except common.MlatuneError as e:
            expected = ("mlatune_open: ENVIRONMENT: no GPU", "mlatune_open: INVALID_ARGUMENT: no database")
            check(str(e).startswith(expected), f"mlatune_open error: {e}")
        try:
            Family(Path(tempfile.gettempdir()) / "no_such_libmlatune_c.so", missing, missing)
            check(False, "loading a missing library succeeded")
        except common.MlatuneError as e:
            check(str(e).startswith("dlopen: ENVIRONMENT:"), f"missing library error: {e}")

    for name in ("torch", "numpy", "matplotlib"):
        check(name not in sys.modules, f"{name} was imported by the self-test")
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    print(f"self-test: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


# ---------------------------------------------------------------------------------------


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark mlatune's RMSNorm against PyTorch, side by side.")
    parser.add_argument("--lib", type=Path,
                        help="libmlatune_c.so (default: build/libmlatune_c.so; --self-test loads it only if given)")
    parser.add_argument("--db", type=Path, default=Path(os.environ.get("MLATUNE_DB", "mlatune.db")),
                        help="the tuned database (default: $MLATUNE_DB, else ./mlatune.db)")
    parser.add_argument("--space", type=Path, default=REPO_ROOT / "search_spaces" / "rms_norm.yaml",
                        help="the RMSNorm search space the database was tuned with")
    parser.add_argument("--shapes", type=_shapes_argument, default=list(DEFAULT_SHAPES),
                        help='"ROWS,COLS;..." or labels (' + ", ".join(s.label for s in DEFAULT_SHAPES)
                        + "); default: all of them")
    parser.add_argument("--reps", type=common._positive_int, default=50, help="timed calls per implementation")
    parser.add_argument("--budget-s", type=float, default=10.0,
                        help=f"wall seconds per implementation and shape after which timing stops "
                             f"(at least {common.MIN_SAMPLES} calls)")
    parser.add_argument("--warmup", type=common._positive_int, default=5, help="untimed calls first")
    parser.add_argument("--busy-cycles", type=common._positive_int, default=common.DEFAULT_BUSY_CYCLES,
                        help="torch.cuda._sleep cycles before each timed call")
    parser.add_argument("--seed", type=int, default=0, help="input seed (plus the shape's index)")
    parser.add_argument("--out-dir", type=Path, default=REPO_ROOT / "docs" / "performance",
                        help="where the CSV and markdown go")
    parser.add_argument("--stem", default="rms_norm_side_by_side", help="their file name without extension")
    parser.add_argument("--skip-compile", action="store_true", help="leave out torch.compile")
    parser.add_argument("--self-test", action="store_true",
                        help="check the GPU-free parts and exit (with --lib: also the ctypes binding)")
    return parser.parse_args(argv)


def _shapes_argument(text: str) -> list[Shape]:
    try:
        return parse_shapes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: Sequence[str]) -> int:
    args = parse_arguments(argv)
    if args.self_test:
        return self_test(args.lib)
    if args.lib is None:
        args.lib = REPO_ROOT / "build" / "libmlatune_c.so"
    return run_benchmark(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
