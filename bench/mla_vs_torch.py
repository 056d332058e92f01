#!/usr/bin/env python3
"""Side-by-side benchmark: mlatune's dispatched fused MLA attention against PyTorch.

One process, one CUDA stream, one timing method for every implementation:

  mlatune             libmlatune_c.so through ctypes: the runtime dispatcher picks the
                      tuned config for the shape (or the nearest / the default) and launches it
  triton_tf32x3       K and V by the same two strict-fp32 matmuls, then a causal flash-attention
                      kernel in Triton with tl.dot(input_precision="tf32x3")
                      (bench/triton_flash_attention.py), autotuned at the shape before timing
                      over bench/triton_peer.py's grid; its binaries are compiled first by a
                      pool of processes into Triton's cache, then everything runs here
  sdpa_materialized   K = latent·W_k and V = latent·W_v by two strict-fp32 matmuls, then
                      F.scaled_dot_product_attention(is_causal=True)
  absorbed_eager      the absorbed form in eager PyTorch: q·W_k^T into latent space, causal
                      softmax over latent logits, the weighted latents ·W_v
  absorbed_compiled   torch.compile (default mode) of absorbed_eager

Timing ("cold", as in TARGETS.md): before each call a 256 MiB buffer is zeroed, which
evicts the L2, and the GPU is kept busy by torch.cuda._sleep so that the call's launches
are queued before the GPU reaches them; CUDA events are recorded around the one call, so
the figure is the GPU time of the call, every kernel and gap inside it included.  The
median over the repetitions is reported with its spread.  TF32 is off (strict fp32).

Every output is checked against a float64 reference (the materialized form computed in
float64 on the GPU): rel-L2 = ||out - ref|| / ||ref||; above 1e-5, or not finite, is flagged.

The report opens with the target table: mlatune, Triton tf32x3 and SDPA per shape, issue 15's
target, both ratios, and their geomean and worst over the shapes.  Where Triton is missing or
fails, its cells read n/a and the report says why; the column is never dropped.

`--random-shapes N --seed S` benchmarks N unseen shapes instead (mlatune through its dispatcher,
triton_tf32x3 and sdpa_materialized), drawn from RANDOM_DISTRIBUTION (see draw_random_shapes);
per shape it also reports mlatune's choice and the host time of its first call there, and ends
with one summary line (geomean and worst ratio against SDPA and against Triton, shapes where
mlatune is slower, largest rel-L2).  `--dry-run` prints the shapes and the Triton peer's
autotuning plan and exits (no GPU, no torch, no Triton).

`--self-test` checks the parts that need no GPU (shape parsing, FLOP counts, tables, the
ctypes binding's error path) and runs where torch, numpy and matplotlib are absent: they
are imported only when a benchmark runs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import ctypes
import dataclasses
import datetime
import math
import multiprocessing
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, NamedTuple, Optional, Sequence

from triton_peer import (H200_SHARED_MEMORY_PER_BLOCK, SEARCHES, SearchSpace, TuneRecord,
                         compile_jobs, first_line, format_plan, plan_shape, search_for)

REPO_ROOT = Path(__file__).resolve().parent.parent

PEAK_FP32_TFLOPS = 63.7          # H200 fp32 FMA rate measured in TARGETS.md
REL_L2_TOLERANCE = 1e-5          # the project's strict-fp32 admission bound
FLUSH_BYTES = 256 * 1024 * 1024  # written before each call: over 4x the H200's 60 MiB L2
# About 0.5 ms at the H200's 1.98 GHz: longer than the host needs to queue any of the
# implementations here (a handful of launches), so no host gap lands inside the events.
DEFAULT_BUSY_CYCLES = 1_000_000
LAUNCH_FLOOR_US = 3.42           # TARGETS.md: an empty kernel, events around one cold launch
MIN_SAMPLES = 5                  # a wall budget never cuts the repetitions below this
TIMING_BATCH = 10                # calls queued between two host synchronizations

TRITON = "triton_tf32x3"
IMPLEMENTATIONS = ("mlatune", TRITON, "sdpa_materialized", "absorbed_eager", "absorbed_compiled")
# Issue 15's targets (strict fp32, cold, H200), µs; the odd shape's target is to lead Triton.
TARGETS_US = {"S0": 5.0, "S1": 12.0, "S2": 150.0, "S3": 500.0, "S4": 800.0}
DEFAULT_TRITON_WORKERS = 16  # the H200 machine's cores; capped by os.cpu_count()


class Shape(NamedTuple):
    """A fused MLA problem size, with the label it is reported under."""

    label: str
    B: int
    T: int
    H: int
    D: int
    R: int

    def dims(self) -> tuple[int, int, int, int, int]:
        return (self.B, self.T, self.H, self.D, self.R)

    def describe(self) -> str:
        return f"{self.label} (B={self.B}, T={self.T}, H={self.H}, D={self.D}, R={self.R})"


# S0..S4 of TARGETS.md, then a decode step (T = 1), an odd T with R not a multiple of 8
# (100 = 4·25), and a mid-sized shape between S1 and S2.
DEFAULT_SHAPES = (
    Shape("S0", 2, 32, 4, 16, 24),
    Shape("S1", 4, 256, 8, 32, 64),
    Shape("S2", 4, 1024, 16, 64, 128),
    Shape("S3", 2, 2048, 32, 64, 256),
    Shape("S4", 1, 4096, 16, 128, 512),
    Shape("decode", 16, 1, 16, 64, 512),
    Shape("odd", 2, 333, 8, 64, 100),
    Shape("mid", 8, 128, 16, 64, 256),
)


def parse_shapes(text: str) -> list[Shape]:
    """Parses "B,T,H,D,R;..." where an item may also be a label of DEFAULT_SHAPES.

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
        if len(fields) != 5:
            raise ValueError(f"shape '{item}': expected B,T,H,D,R (5 integers) or one of "
                             f"{', '.join(s.label for s in DEFAULT_SHAPES)}")
        try:
            dims = [int(field) for field in fields]
        except ValueError:
            raise ValueError(f"shape '{item}': every size must be an integer") from None
        if any(d <= 0 for d in dims):
            raise ValueError(f"shape '{item}': every size must be positive")
        label = next((s.label for s in DEFAULT_SHAPES if list(s.dims()) == dims), ",".join(fields))
        shapes.append(Shape(label, *dims))
    if not shapes:
        raise ValueError(f"no shape in '{text}'")
    return shapes


def materialized_flops(shape: Shape) -> int:
    """TARGETS.md: B·H·T(T+1)/2·4D + 4·B·T·H·R·D (causal QK^T and PV, plus expanding K, V)."""
    B, T, H, D, R = shape.dims()
    return B * H * (T * (T + 1) // 2) * 4 * D + 4 * B * T * H * R * D


def absorbed_flops(shape: Shape) -> int:
    """DESIGN.md: B·H·(T(T+1)/2·4R + T·4RD)."""
    B, T, H, D, R = shape.dims()
    return B * H * ((T * (T + 1) // 2) * 4 * R + T * 4 * R * D)


# ---------------------------------------------------------------------------------------
# Unseen shapes (--random-shapes)

RANDOM_DISTRIBUTION = ("B uniform in 1..8; T log-uniform in 1..4096 (T = floor(exp(u)), u uniform in "
                       "[ln 1, ln 4097)); H uniform in 1..64; D uniform in 8..256 and R uniform in 16..1024 "
                       "(every residue possible); shapes whose estimated peak memory exceeds the budget, "
                       "shapes tuned in the database and repeats are drawn again")
DEFAULT_MEMORY_BUDGET_GIB = 100.0  # of the H200's 141 GB, leaving room for PyTorch's allocator


def estimated_peak_bytes(shape: Shape) -> int:
    """The largest footprint of one shape's run: the float64 reference's three [B,H,T,T] tensors
    (logits, masked logits, softmax) and its K and V, plus the fp32 inputs, K/V and outputs."""
    B, T, H, D, R = shape.dims()
    reference = 3 * B * H * T * T * 8 + 2 * B * T * H * D * 8
    fp32 = 4 * (B * T * H * D * 4 + B * T * R + 2 * R * H * D)
    return reference + fp32


def tuned_shapes(database: Path) -> set[tuple[int, int, int, int, int]]:
    """(B,T,H,D,R) of every fused_mla_attention shape with a best entry; empty without a database."""
    if not database.exists():
        return set()
    shapes = set()
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT DISTINCT b.shape FROM best b JOIN kernels k ON k.id = b.kernel_id "
                          "WHERE k.name = 'fused_mla_attention'").fetchall()
    for (text,) in rows:
        values = dict(part.split("=") for part in text.split(","))
        shapes.add(tuple(int(values[name]) for name in "BTHDR"))
    return shapes


def draw_random_shapes(count: int, seed: int, budget_bytes: float,
                       exclude: set[tuple[int, int, int, int, int]]) -> list[Shape]:
    """`count` distinct shapes from RANDOM_DISTRIBUTION, deterministic for a seed."""
    rng = random.Random(seed)
    shapes: list[Shape] = []
    seen = set(exclude)
    for _ in range(1000 * (count + 1)):
        if len(shapes) == count:
            break
        T = min(4096, int(math.exp(rng.uniform(0.0, math.log(4097)))))
        dims = (rng.randint(1, 8), max(1, T), rng.randint(1, 64), rng.randint(8, 256), rng.randint(16, 1024))
        shape = Shape("r" + ",".join(map(str, dims)), *dims)
        if dims in seen or estimated_peak_bytes(shape) > budget_bytes:
            continue
        seen.add(dims)
        shapes.append(shape)
    if len(shapes) < count:
        raise ValueError(f"only {len(shapes)} of {count} shapes fit the memory budget outside the database")
    return shapes


class RatioSummary(NamedTuple):
    """Geomean and worst of one peer's time / mlatune's time over shapes (above 1: mlatune faster)."""

    count: int
    geomean: float
    worst: float
    worst_key: str
    below_one: int


def summarize_ratios(ratios: Sequence[tuple[str, float]]) -> Optional[RatioSummary]:
    """Over the finite ratios of (shape key, ratio); None when there is none."""
    finite = [(key, r) for key, r in ratios if math.isfinite(r) and r > 0]
    if not finite:
        return None
    geomean = math.exp(sum(math.log(r) for _, r in finite) / len(finite))
    worst_key, worst = min(finite, key=lambda item: item[1])
    return RatioSummary(len(finite), geomean, worst, worst_key, sum(1 for _, r in finite if r < 1.0))


def peer_ratio(peer: Optional[Row], ours: Optional[Row]) -> float:
    """peer time / mlatune time, NaN unless both ran."""
    if peer is None or ours is None or not (peer.ok and ours.ok):
        return math.nan
    return peer.median_us / ours.median_us


@dataclasses.dataclass
class RandomResult:
    """mlatune against SDPA and Triton at one unseen shape."""

    shape: Shape
    choice: str = ""              # mlatune_choice's text: reason, config, why
    first_call_ms: float = math.nan  # host time of mlatune's first call at the shape
    first_call_compiles: int = 0
    mlatune: Optional[Row] = None
    sdpa: Optional[Row] = None
    first_call_stand_in: bool = False  # the first call ran a stand-in while its choice compiled
    triton: Optional[Row] = None
    race_launches: int = 0        # launches until the dispatcher's race settled (0: no race)
    first_call_phases: str = ""   # where the first call's host time went (Mlatune.FIRST_USE_PHASES), ms

    @property
    def reason(self) -> str:
        return self.choice.split(" ", 1)[0] if self.choice else "unknown"

    @property
    def ratio(self) -> float:
        """SDPA's time / mlatune's: above 1, mlatune is faster."""
        return peer_ratio(self.sdpa, self.mlatune)

    @property
    def triton_ratio(self) -> float:
        """Triton's time / mlatune's: above 1, mlatune is faster."""
        return peer_ratio(self.triton, self.mlatune)


def _triton_random_summary(results: Sequence[RandomResult]) -> str:
    summary = summarize_ratios([(",".join(map(str, r.shape.dims())), r.triton_ratio) for r in results])
    if summary is None:
        why = next((r.triton.note for r in results if r.triton is not None and r.triton.note), "no Triton row")
        return f"Triton/mlatune n/a ({why})"
    return (f"Triton/mlatune geomean {summary.geomean:.3f}, worst {summary.worst:.3f} at {summary.worst_key}; "
            f"below 1.0: {summary.below_one} of {summary.count}")


def random_summary(results: Sequence[RandomResult]) -> str:
    """One line: geomean and worst ratio against SDPA (with the worst shape and choice) and
    against Triton, shapes below 1.0, max rel-L2, first calls."""
    ratios = [r for r in results if math.isfinite(r.ratio)]
    errors = [row.rel_l2 for r in results for row in (r.mlatune, r.sdpa, r.triton) if row is not None and row.ok]
    first_calls = sorted(r.first_call_ms for r in results if math.isfinite(r.first_call_ms))
    if not ratios:
        return f"random shapes: {len(results)} drawn, no shape with both times"
    geomean = math.exp(sum(math.log(r.ratio) for r in ratios) / len(ratios))
    worst = min(ratios, key=lambda r: r.ratio)
    below = sum(1 for r in ratios if r.ratio < 1.0)
    max_error = max(errors) if errors else math.nan
    first = (f"; first call ms median {first_calls[len(first_calls) // 2]:.3f} max {first_calls[-1]:.3f}"
             if first_calls else "")
    raced = [r for r in results if r.race_launches]
    if raced:
        overturned = sum(1 for r in raced if "faster than the selector's choice" in r.choice)
        first += (f"; races {len(raced)} (median {sorted(r.race_launches for r in raced)[len(raced) // 2]} launches), "
                  f"{overturned} won by another config than the selector's choice")
    return (f"random shapes: {len(ratios)} of {len(results)} timed; SDPA/mlatune geomean {geomean:.3f}, "
            f"worst {worst.ratio:.3f} at {','.join(map(str, worst.shape.dims()))} ({worst.choice}); "
            f"below 1.0: {below}; {_triton_random_summary(results)}; max rel-L2 {max_error:.2e}{first}")


RANDOM_CSV_COLUMNS = ("B", "T", "H", "D", "R", "reason", "choice", "mlatune_us", "sdpa_us", "ratio_sdpa_over_mlatune",
                      "triton_us", "ratio_triton_over_mlatune", "mlatune_rel_l2", "sdpa_rel_l2", "triton_rel_l2",
                      "first_call_ms", "first_call_compiles", "first_call_stand_in", "race_launches",
                      "first_call_phases", "note")


def _median(row: Optional[Row]) -> float:
    return row.median_us if row is not None else math.nan


def _rel_l2(row: Optional[Row]) -> float:
    return row.rel_l2 if row is not None else math.nan


def write_random_csv(results: Sequence[RandomResult], path: Path) -> None:
    def cell(value: float, spec: str = ".6g") -> str:
        return format(value, spec) if math.isfinite(value) else ""

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(RANDOM_CSV_COLUMNS)
        for r in results:
            notes = "; ".join(f"{row.implementation}: {row.note}" for row in (r.mlatune, r.triton, r.sdpa)
                              if row is not None and row.note)
            writer.writerow([*r.shape.dims(), r.reason, r.choice, cell(_median(r.mlatune)), cell(_median(r.sdpa)),
                             cell(r.ratio, ".4f"), cell(_median(r.triton)), cell(r.triton_ratio, ".4f"),
                             cell(_rel_l2(r.mlatune), ".3e"), cell(_rel_l2(r.sdpa), ".3e"),
                             cell(_rel_l2(r.triton), ".3e"), cell(r.first_call_ms, ".4f"),
                             r.first_call_compiles, int(r.first_call_stand_in), r.race_launches,
                             r.first_call_phases, notes])


def format_random_report(results: Sequence[RandomResult], method: str, environment: str) -> str:
    lines = ["# mlatune vs SDPA and Triton tf32x3 on materialized K/V at unseen shapes", "",
             f"Environment: {environment}", "", f"Shapes: {RANDOM_DISTRIBUTION}.", "", f"Method: {method}", "",
             "| B,T,H,D,R | choice | mlatune µs | Triton tf32x3 µs | SDPA µs | Triton / mlatune | SDPA / mlatune "
             "| rel-L2 mlatune | rel-L2 Triton | rel-L2 SDPA | first call ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {','.join(map(str, r.shape.dims()))} | {r.choice.replace('|', '/')} "
                     f"| {_number(_median(r.mlatune), '.1f')} | {_number(_median(r.triton), '.1f')} "
                     f"| {_number(_median(r.sdpa), '.1f')} | {_number(r.triton_ratio, '.2f')} "
                     f"| {_number(r.ratio, '.2f')} | {_optional_error_text(r.mlatune)} "
                     f"| {_optional_error_text(r.triton)} | {_optional_error_text(r.sdpa)} "
                     f"| {_number(r.first_call_ms, '.3f')}{' (stand-in)' if r.first_call_stand_in else ''} |")
    triton_notes = [f"- {','.join(map(str, r.shape.dims()))}: {r.triton.note.replace('|', '/')}"
                    for r in results if r.triton is not None and r.triton.note]
    if triton_notes:
        lines += ["", "Triton tf32x3 per shape (autotuning, not timed; or why there is no time):", ""] + triton_notes
    return "\n".join(lines + ["", random_summary(results)]) + "\n"


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
        # Written so that NaN fails: an output with a NaN never passes.
        return self.rel_l2 <= REL_L2_TOLERANCE

    @property
    def spread(self) -> float:
        """(p90 - min) / median, as the tuner reports it."""
        return (self.p90_us - self.min_us) / self.median_us if self.ok else math.nan

    @property
    def tflops(self) -> float:
        return materialized_flops(self.shape) / (self.median_us * 1e-6) / 1e12 if self.ok else math.nan

    @property
    def pct_of_peak(self) -> float:
        return 100.0 * self.tflops / PEAK_FP32_TFLOPS


def timed_row(shape: Shape, implementation: str, times_us: Sequence[float], rel_l2: float,
              note: str = "") -> Row:
    """A successful row from per-call times (µs)."""
    ordered = sorted(times_us)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    return Row(shape, implementation, "ok", statistics.median(ordered), ordered[0], p90,
               len(ordered), rel_l2, note=note)


def fill_ratios(rows: Sequence[Row]) -> None:
    """Sets ratio_to_mlatune on every row of one shape (NaN where either side failed)."""
    reference = next((r for r in rows if r.implementation == "mlatune" and r.ok), None)
    for row in rows:
        row.ratio_to_mlatune = row.median_us / reference.median_us if reference and row.ok else math.nan


def _number(value: float, spec: str, suffix: str = "") -> str:
    return "n/a" if not math.isfinite(value) else format(value, spec) + suffix


def _optional_error_text(row: Optional[Row]) -> str:
    return _error_text(row) if row is not None else "n/a"


def _error_text(row: Row) -> str:
    if not row.ok and math.isnan(row.rel_l2):
        return "n/a"
    text = _number(row.rel_l2, ".1e") if math.isfinite(row.rel_l2) else str(row.rel_l2)
    return text if row.accurate else f"**{text} > {REL_L2_TOLERANCE:.0e}**"


def format_table(rows: Sequence[Row]) -> str:
    """The markdown table of one shape's rows."""
    lines = [
        f"| implementation | median µs | spread | time / mlatune | rel-L2 vs fp64 | TFLOP/s "
        f"| % of {PEAK_FP32_TFLOPS} | note |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        note = row.note.replace("|", "\\|").replace("\n", " ")
        if not row.ok:
            note = f"FAILED: {note}"
        lines.append(
            f"| {row.implementation} | {_number(row.median_us, '.1f')} | {_number(row.spread * 100, '.0f', '%')} "
            f"| {_number(row.ratio_to_mlatune, '.2f', '×')} | {_error_text(row)} "
            f"| {_number(row.tflops, '.2f')} | {_number(row.pct_of_peak, '.1f', '%')} | {note} |")
    return "\n".join(lines)


CSV_COLUMNS = ("shape", "B", "T", "H", "D", "R", "implementation", "status", "median_us", "min_us",
               "p90_us", "spread", "samples", "ratio_to_mlatune", "rel_l2", "within_tolerance",
               "materialized_flop", "tflops", "pct_of_fp32_peak", "note")


def write_csv(rows: Sequence[Row], path: Path) -> None:
    """All rows; numbers in full precision, empty where there is none."""

    def cell(value: float, spec: str = ".6g") -> str:
        return format(value, spec) if math.isfinite(value) else ("" if math.isnan(value) else str(value))

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in rows:
            s = r.shape
            writer.writerow([s.label, s.B, s.T, s.H, s.D, s.R, r.implementation, r.status,
                             cell(r.median_us), cell(r.min_us), cell(r.p90_us), cell(r.spread, ".4f"),
                             r.samples, cell(r.ratio_to_mlatune, ".4f"), cell(r.rel_l2, ".3e"),
                             str(r.accurate).lower() if r.ok else "", materialized_flops(s),
                             cell(r.tflops, ".4f"), cell(r.pct_of_peak, ".2f"), r.note])


def _row(rows: Sequence[Row], shape: Shape, implementation: str) -> Optional[Row]:
    return next((r for r in rows if r.shape == shape and r.implementation == implementation), None)


def _target_cells(shape: Shape, ours: Optional[Row]) -> tuple[str, str]:
    """(target, whether mlatune meets it)."""
    target = TARGETS_US.get(shape.label)
    if target is None:
        return "—", "—"
    met = "n/a" if ours is None or not ours.ok else ("yes" if ours.median_us <= target else "no")
    return f"≤ {target:g}", met


def format_target_table(rows: Sequence[Row]) -> str:
    """Issue 15's table: per shape mlatune, Triton tf32x3 and SDPA (µs, cold medians of one
    run), the target, both ratios (above 1: mlatune faster) and the three errors."""
    lines = ["| shape (B,T,H,D,R) | mlatune µs | Triton tf32x3 µs | SDPA materialized µs | target µs | met "
             "| Triton / mlatune | SDPA / mlatune | rel-L2 mlatune | rel-L2 Triton | rel-L2 SDPA |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for shape in _shapes_in_order(rows):
        ours, triton, sdpa = (_row(rows, shape, name) for name in ("mlatune", TRITON, "sdpa_materialized"))
        target, met = _target_cells(shape, ours)
        dims = ",".join(map(str, shape.dims()))
        label = dims if shape.label == dims else f"{shape.label} {dims}"
        lines.append(f"| {label} | {_number(_median(ours), '.1f')} | {_number(_median(triton), '.1f')} "
                     f"| {_number(_median(sdpa), '.1f')} | {target} | {met} "
                     f"| {_number(peer_ratio(triton, ours), '.2f')} | {_number(peer_ratio(sdpa, ours), '.2f')} "
                     f"| {_optional_error_text(ours)} | {_optional_error_text(triton)} "
                     f"| {_optional_error_text(sdpa)} |")
    return "\n".join(lines)


def ratio_summary_lines(rows: Sequence[Row]) -> list[str]:
    """Geomean and worst of Triton / mlatune and of SDPA / mlatune over the shapes; a peer
    without any time says so (its reason from the first of its rows)."""
    lines = []
    for name, title in ((TRITON, "Triton tf32x3"), ("sdpa_materialized", "SDPA materialized")):
        pairs = [(shape.label, peer_ratio(_row(rows, shape, name), _row(rows, shape, "mlatune")))
                 for shape in _shapes_in_order(rows)]
        summary = summarize_ratios(pairs)
        if summary is None:
            why = next((r.note for r in rows if r.implementation == name and r.note), "not run")
            lines.append(f"{title} / mlatune: n/a ({why})")
            continue
        behind = [key for key, ratio in pairs if math.isfinite(ratio) and ratio < 1.0]
        lines.append(f"{title} / mlatune over {summary.count} shapes: geomean {summary.geomean:.2f}, "
                     f"worst {summary.worst:.2f} at {summary.worst_key}; mlatune behind at "
                     + (", ".join(behind) if behind else "none"))
    return lines


def format_report(rows: Sequence[Row], choices: dict[str, str], method: str, environment: str,
                  triton_notes: Optional[dict[str, str]] = None) -> str:
    """The markdown document: method and environment next to the numbers, the target table,
    then one table per shape."""
    parts = ["# mlatune vs Triton and PyTorch, side by side", "", f"Environment: {environment}", "",
             f"Method: {method}", "", "## Against the targets (issue 15)", "", format_target_table(rows), ""]
    parts += [f"- {line}" for line in ratio_summary_lines(rows)] + [""]
    if triton_notes:
        parts += ["## Triton tf32x3 autotuning (before timing, not in the times)", ""]
        parts += [f"- {label}: {note}" for label, note in triton_notes.items()] + [""]
    for shape in _shapes_in_order(rows):
        shape_rows = [r for r in rows if r.shape == shape]
        parts += [f"## {shape.describe()}", "",
                  f"Materialized FLOPs {materialized_flops(shape):,}; floor at {PEAK_FP32_TFLOPS} TFLOP/s: "
                  f"{materialized_flops(shape) / PEAK_FP32_TFLOPS / 1e6:.3g} µs "
                  f"(the cold launch floor is {LAUNCH_FLOOR_US} µs).", ""]
        if shape.label in choices:
            parts += [f"mlatune's choice: `{choices[shape.label]}`", ""]
        parts += [format_table(shape_rows), ""]
    flagged = [r for r in rows if r.ok and not r.accurate]
    failed = [r for r in rows if not r.ok]
    parts += ["## Summary", ""] + [f"- {line}" for line in summary_lines(rows)]
    if flagged:
        parts += ["", "Outside the rel-L2 tolerance of 1e-5: " +
                  ", ".join(f"{r.implementation} at {r.shape.label}" for r in flagged) + "."]
    if failed:
        parts += ["", "Failed: " + ", ".join(f"{r.implementation} at {r.shape.label}" for r in failed) + "."]
    return "\n".join(parts) + "\n"


def summary_lines(rows: Sequence[Row]) -> list[str]:
    """Per shape: mlatune against the fastest accurate peer (Triton or PyTorch)."""
    lines = []
    for shape in _shapes_in_order(rows):
        shape_rows = [r for r in rows if r.shape == shape]
        ours = next((r for r in shape_rows if r.implementation == "mlatune" and r.ok), None)
        theirs = [r for r in shape_rows if r.implementation != "mlatune" and r.ok and r.accurate]
        best = min(theirs, key=lambda r: r.median_us) if theirs else None
        if ours is None:
            lines.append(f"{shape.label}: mlatune failed" + (
                f"; fastest accurate peer: {best.implementation} {best.median_us:.1f} µs" if best else ""))
        elif best is None:
            lines.append(f"{shape.label}: mlatune {ours.median_us:.1f} µs; no accurate peer result")
        else:
            factor = best.median_us / ours.median_us
            verdict = f"{factor:.2f}× faster" if factor >= 1 else f"{1 / factor:.2f}× slower"
            lines.append(f"{shape.label}: mlatune {ours.median_us:.1f} µs vs {best.implementation} "
                         f"{best.median_us:.1f} µs: mlatune {verdict}"
                         + ("" if ours.accurate else " (but outside the error tolerance)"))
    return lines


def _shapes_in_order(rows: Sequence[Row]) -> list[Shape]:
    return list(dict.fromkeys(r.shape for r in rows))


def write_plot(rows: Sequence[Row], path: Path, title: str) -> None:
    """Grouped bars: median time per shape and implementation, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    shapes = _shapes_in_order(rows)
    implementations = [name for name in IMPLEMENTATIONS if any(r.implementation == name for r in rows)]
    width = 0.8 / max(1, len(implementations))
    fig, ax = plt.subplots(figsize=(max(8.0, 1.4 * len(shapes)), 5.0))
    failed_label_position = blended_transform_factory(ax.transData, ax.transAxes)  # x: shape, y: axes
    for i, name in enumerate(implementations):
        xs, ys = [], []
        for j, shape in enumerate(shapes):
            row = next((r for r in rows if r.shape == shape and r.implementation == name), None)
            x = j + (i - (len(implementations) - 1) / 2) * width
            if row is not None and row.ok:
                xs.append(x)
                ys.append(row.median_us)
            elif row is not None:  # a missing bar says why
                ax.text(x, 0.02, "failed", rotation=90, ha="center", va="bottom", fontsize=7,
                        transform=failed_label_position)
        ax.bar(xs, ys, width, label=name)
    ax.set_yscale("log")
    ax.set_xticks(range(len(shapes)))
    dims = [",".join(map(str, s.dims())) for s in shapes]
    ax.set_xticklabels([d if s.label == d else f"{s.label}\n{d}" for s, d in zip(shapes, dims)], fontsize=8)
    ax.set_ylabel("median µs per call (cold L2; lower is better)")
    ax.set_xlabel("shape (B,T,H,D,R)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------
# mlatune through its C ABI (cache/mla_c_api.h)

STATUS_NAMES = {0: "OK", 1: "INVALID_ARGUMENT", 2: "ENVIRONMENT", 3: "CUDA_ERROR",
                4: "BUFFER_TOO_SMALL", 5: "INTERNAL", 6: "NOT_READY"}
BUFFER_TOO_SMALL = 4


class MlatuneError(Exception):
    """A non-OK status of the C ABI, with mlatune_last_error's text."""

    def __init__(self, function: str, status: int, message: str):
        super().__init__(f"{function}: {STATUS_NAMES.get(status, status)}: {message}")
        self.status = status


class Mlatune:
    """libmlatune_c.so loaded with ctypes, and one dispatcher opened on a database and space."""

    def __init__(self, library: Path, database: Path, space: Path):
        try:
            self._lib = ctypes.CDLL(str(library))
        except OSError as e:
            raise MlatuneError("dlopen", 2, f"{library}: {e}") from None
        lib = self._lib
        handle_p = ctypes.c_void_p
        lib.mlatune_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(handle_p)]
        lib.mlatune_open.restype = ctypes.c_int
        lib.mlatune_close.argtypes = [handle_p]
        lib.mlatune_close.restype = None
        lib.mlatune_fused_mla_attention.argtypes = [handle_p] + [ctypes.c_void_p] * 5 + [ctypes.c_int] * 5 + [
            ctypes.c_void_p]
        lib.mlatune_fused_mla_attention.restype = ctypes.c_int
        lib.mlatune_last_error.argtypes = [handle_p]
        lib.mlatune_last_error.restype = ctypes.c_char_p
        lib.mlatune_choice.argtypes = [handle_p] + [ctypes.c_int] * 5 + [ctypes.c_char_p, ctypes.c_size_t]
        lib.mlatune_choice.restype = ctypes.c_int
        lib.mlatune_compile_count.argtypes = [handle_p, ctypes.POINTER(ctypes.c_ulonglong)]
        lib.mlatune_compile_count.restype = ctypes.c_int
        lib.mlatune_preloaded.argtypes = [handle_p] + [ctypes.POINTER(ctypes.c_ulonglong)] * 2
        lib.mlatune_preloaded.restype = ctypes.c_int
        lib.mlatune_wait_compiles.argtypes = [handle_p]
        lib.mlatune_wait_compiles.restype = ctypes.c_int
        lib.mlatune_runs_stand_in.argtypes = [handle_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t,
                                              ctypes.POINTER(ctypes.c_int)]
        lib.mlatune_runs_stand_in.restype = ctypes.c_int
        lib.mlatune_race_state.argtypes = lib.mlatune_runs_stand_in.argtypes
        lib.mlatune_race_state.restype = ctypes.c_int
        lib.mlatune_first_use_ns.argtypes = [handle_p, ctypes.POINTER(ctypes.c_ulonglong)]
        lib.mlatune_first_use_ns.restype = ctypes.c_int

        self._handle = handle_p()
        self._check("mlatune_open", lib.mlatune_open(os.fsencode(database), os.fsencode(space),
                                                     ctypes.byref(self._handle)))

    def _check(self, function: str, status: int) -> None:
        if status != 0:
            raise MlatuneError(function, status, self.last_error())

    def last_error(self) -> str:
        text = self._lib.mlatune_last_error(None)
        return text.decode("utf-8", "replace") if text else ""

    def choice(self, shape: Shape) -> str:
        """"<hit|nearest|default|first_valid|none> <config> (<why>)" for the shape."""
        size = 1024
        while True:
            buffer = ctypes.create_string_buffer(size)
            status = self._lib.mlatune_choice(self._handle, *shape.dims(), buffer, size)
            if status != BUFFER_TOO_SMALL or size >= 1 << 20:
                break
            size *= 16
        self._check("mlatune_choice", status)
        return buffer.value.decode("utf-8", "replace")

    # cache/c_api.h's MLATUNE_PHASE_* in order, lower case: where a first use's host time goes.
    FIRST_USE_PHASES = ("choose", "store_read", "load", "ready", "miss", "rank", "queue", "first_launch",
                        "workspace", "lock_wait")

    def first_use_ns(self) -> list[int]:
        """The dispatcher's first-use host time so far, by phase (FIRST_USE_PHASES), in ns."""
        phases = (ctypes.c_ulonglong * len(self.FIRST_USE_PHASES))()
        self._check("mlatune_first_use_ns", self._lib.mlatune_first_use_ns(self._handle, phases))
        return list(phases)

    def compile_count(self) -> int:
        count = ctypes.c_ulonglong(0)
        self._check("mlatune_compile_count", self._lib.mlatune_compile_count(self._handle, ctypes.byref(count)))
        return count.value

    def runs_stand_in(self, shape: Shape) -> bool:
        dims = (ctypes.c_int64 * 5)(*shape.dims())
        flag = ctypes.c_int(0)
        self._check("mlatune_runs_stand_in", self._lib.mlatune_runs_stand_in(self._handle, dims, 5, ctypes.byref(flag)))
        return bool(flag.value)

    def wait_compiles(self) -> None:
        """Until the background compiles queued so far are done and their shapes switched."""
        self._check("mlatune_wait_compiles", self._lib.mlatune_wait_compiles(self._handle))

    def preloaded(self) -> tuple[int, int]:
        """Stored binaries the preload (MLATUNE_PRELOAD=1) loaded so far, and those it could not."""
        loaded, failed = ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)
        self._check("mlatune_preloaded", self._lib.mlatune_preloaded(self._handle, ctypes.byref(loaded),
                                                                     ctypes.byref(failed)))
        return loaded.value, failed.value

    def race_state(self, shape: Shape) -> int:
        """0: no race at the shape (tuned, or racing off), 1: racing, 2: settled."""
        dims = (ctypes.c_int64 * 5)(*shape.dims())
        state = ctypes.c_int(0)
        self._check("mlatune_race_state", self._lib.mlatune_race_state(self._handle, dims, 5, ctypes.byref(state)))
        return state.value

    def attention(self, q, kv_latent, w_up_k, w_up_v, out, stream_handle: int) -> None:
        """Launches on the stream (a cudaStream_t as an integer; asynchronous).  The tensors
        must be contiguous float32 on the GPU (make_inputs and empty_like give such)."""
        B, T, H, D = q.shape
        R = kv_latent.shape[-1]
        self._check("mlatune_fused_mla_attention", self._lib.mlatune_fused_mla_attention(
            self._handle, q.data_ptr(), kv_latent.data_ptr(), w_up_k.data_ptr(), w_up_v.data_ptr(),
            out.data_ptr(), B, T, H, D, R, stream_handle))

    def close(self) -> None:
        if self._handle:
            self._lib.mlatune_close(self._handle)
            self._handle = ctypes.c_void_p()


# ---------------------------------------------------------------------------------------
# The PyTorch implementations (tensors: q [B,T,H,D], latent [B,T,R], w_k and w_v [R,H,D])


def materialize_kv(q, latent, w_k, w_v):
    """K and V expanded by two strict-fp32 matmuls: contiguous [B,T,H,D] each."""
    B, T, H, D = q.shape
    R = latent.shape[-1]
    flat = latent.reshape(B * T, R)
    k = (flat @ w_k.reshape(R, H * D)).view(B, T, H, D)
    v = (flat @ w_v.reshape(R, H * D)).view(B, T, H, D)
    return k, v


def materialized_sdpa(q, latent, w_k, w_v):
    """K and V expanded by two matmuls, then SDPA; returns [B,T,H,D] (a transposed view)."""
    import torch.nn.functional as F

    k, v = materialize_kv(q, latent, w_k, w_v)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return out.transpose(1, 2)


def absorbed(q, latent, w_k, w_v, future, scale: float):
    """The absorbed form: multi-query attention with head size R over the shared latents.

    `future` is the boolean [T,T] mask of positions s > t (made once per shape, as a module
    would keep it in a buffer)."""
    qa = (q.transpose(1, 2) @ w_k.permute(1, 2, 0)) * scale           # [B,H,T,R] = q · W_k^T / sqrt(D)
    logits = qa @ latent.transpose(1, 2).unsqueeze(1)                 # [B,H,T,T]
    p = logits.masked_fill(future, float("-inf")).softmax(dim=-1)
    weighted = p @ latent.unsqueeze(1)                                # [B,H,T,R]
    return (weighted @ w_v.permute(1, 0, 2)).transpose(1, 2)          # [B,T,H,D]


def reference_fp64(q, latent, w_k, w_v):
    """The operation in float64, materialized (the seed's semantics, vectorized)."""
    import torch

    q, latent, w_k, w_v = (t.double() for t in (q, latent, w_k, w_v))
    B, T, H, D = q.shape
    R = latent.shape[-1]
    flat = latent.reshape(B * T, R)
    k = (flat @ w_k.reshape(R, H * D)).view(B, T, H, D).transpose(1, 2)
    v = (flat @ w_v.reshape(R, H * D)).view(B, T, H, D).transpose(1, 2)
    logits = (q.transpose(1, 2) @ k.transpose(-1, -2)) / math.sqrt(D)
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    p = logits.masked_fill_(future, float("-inf")).softmax(dim=-1)
    return (p @ v).transpose(1, 2)


def relative_l2(out, reference) -> float:
    """||out - ref|| / ||ref|| in float64; NaN or inf when the output has them."""
    return ((out.double() - reference).norm() / reference.norm()).item()


def make_inputs(shape: Shape, seed: int, weights: str, device):
    """Fresh standard-normal float32 inputs, as the tuner's workload draws them
    (tuner/workload.cpp: every input N(0,1), so logits have a standard deviation near
    sqrt(R)); `weights` == "rsqrt_r" scales W_k and W_v by 1/sqrt(R) instead."""
    import torch

    B, T, H, D, R = shape.dims()
    generator = torch.Generator(device=device).manual_seed(seed)

    def draw(*size):
        return torch.randn(*size, generator=generator, device=device, dtype=torch.float32)

    q, latent, w_k, w_v = draw(B, T, H, D), draw(B, T, R), draw(R, H, D), draw(R, H, D)
    if weights == "rsqrt_r":
        w_k.mul_(R ** -0.5)
        w_v.mul_(R ** -0.5)
    return q, latent, w_k, w_v


# ---------------------------------------------------------------------------------------
# The Triton peer on the GPU (bench/triton_flash_attention.py; its plan in bench/triton_peer.py)


@dataclasses.dataclass
class TritonPeer:
    """The Triton peer of one run: its kernel module, or why there is none."""

    space: SearchSpace
    shared_memory_limit: int = H200_SHARED_MEMORY_PER_BLOCK
    module: object = None
    unavailable: str = ""
    version: str = ""
    precompile: str = ""  # what the compiler pool did, for the method text
    tune_reps: int = 5
    isolate: bool = True  # autotune in child processes (see _tune_in_children)


def load_triton_peer(args, torch) -> TritonPeer:
    """Imports the kernel module; without Triton the peer stays, with its reason, so that
    its column reads n/a instead of disappearing."""
    peer = TritonPeer(search_for(args.triton_search, args.random_shapes is not None), tune_reps=args.triton_tune_reps)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    peer.shared_memory_limit = getattr(props, "shared_memory_per_block_optin", H200_SHARED_MEMORY_PER_BLOCK)
    if args.skip_triton:
        peer.unavailable = "skipped (--skip-triton)"
        return peer
    try:
        import triton

        import triton_flash_attention
    except Exception as e:  # noqa: BLE001 - ImportError, or a Triton too old for the kernel's API
        peer.unavailable = f"Triton unavailable: {first_line(e)}"
        print(f"WARNING: {peer.unavailable}; the {TRITON} column reads n/a", file=sys.stderr, flush=True)
        return peer
    peer.module = triton_flash_attention
    peer.version = getattr(triton, "__version__", "unknown")
    return peer


def precompile_triton(peer: TritonPeer, shapes: Sequence[Shape], workers: int) -> None:
    """Compiles every binary the run's autotuning will launch, in a pool of processes, into
    Triton's on-disk cache, before anything is timed: one process compiles one config at a
    time (0.5 to 9.5 s each on the H200 machine), which would make autotuning the run's
    bottleneck.  The benchmark process then loads each binary at its first launch; whatever
    a worker could not compile, it compiles there itself."""
    if peer.module is None:
        return
    jobs = compile_jobs(plan_shape(s.T, s.D, peer.space, peer.shared_memory_limit) for s in shapes)
    if workers == 0:
        peer.precompile = f"{len(jobs)} binaries compiled at their first launch (--triton-workers 0)"
        return
    workers = min(workers, len(jobs), os.cpu_count() or 1)
    print(f"# Triton: compiling {len(jobs)} binaries on {workers} processes before any timing", flush=True)
    started = time.monotonic()
    failures: list[str] = []
    compile_seconds = 0.0
    try:
        context = multiprocessing.get_context("spawn")  # never fork a process that holds a CUDA context
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            for done, (job, seconds, error) in enumerate(pool.map(peer.module.precompile, jobs), 1):
                compile_seconds += seconds
                if error:
                    failures.append(f"D={job.head_dim} {job.config.text()}: {error}")
                if done % 50 == 0:
                    print(f"#   {done}/{len(jobs)} in {time.monotonic() - started:.0f} s", flush=True)
    except Exception as e:  # noqa: BLE001 - e.g. a worker died: the benchmark compiles what is missing
        failures.append(f"compiler pool stopped: {first_line(e)}")
    wall = time.monotonic() - started
    peer.precompile = (f"{len(jobs)} binaries compiled before timing by {workers} processes in {wall:.1f} s "
                       f"({compile_seconds:.0f} s of compilation)"
                       + (f"; {len(failures)} failed there (first: {failures[0]})" if failures else ""))
    print(f"# Triton: {peer.precompile}", flush=True)


# A config that faults (an illegal address, say) leaves its CUDA context unusable, so every
# config tried after it in the same process would fail too.  Autotuning therefore runs in a
# child process that is replaced after each such fault; the fault is the config's result.
CONFIG_DEADLINE_S = 120.0   # a config whose launch, check and timing take longer has hung
MAX_CHILD_FAULTS = 8        # children replaced per shape before the rest is left untried


def _context_alive(torch) -> bool:
    """Whether the CUDA context still runs work after an exception (a fault is sticky)."""
    try:
        torch.cuda.synchronize()
        return torch.ones(1, device="cuda").add_(1).item() == 2.0
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return False


def tune_configs(peer: TritonPeer, configs, q, k, v, reference, timer: Timer, report,
                 context_alive: Callable[[], bool]) -> None:
    """Tries `configs` in order: each is launched, checked against the reference and, when
    accurate, timed on the attention kernel alone (cold, --triton-tune-reps calls).  Calls
    report(kind, config, value) with kind "start" (value None) before a config, then one of
    "timed" (µs), "rejected" (why), "inaccurate" (rel-L2) or "faulted" (why; the context is
    lost, so nothing more is tried here)."""
    tune_timer = dataclasses.replace(timer, reps=peer.tune_reps, budget_s=min(timer.budget_s, 5.0))
    out = q.new_empty(q.shape)
    for config in configs:
        report("start", config, None)
        try:
            out.fill_(float("nan"))
            peer.module.launch(q, k, v, out, config)  # loads (or compiles) the binary
            error = relative_l2(out, reference)  # synchronizes, so a launch failure surfaces here
        except Exception as e:  # noqa: BLE001 - e.g. OutOfResources: a config that cannot run
            if not context_alive():
                report("faulted", config, first_line(e))
                return
            report("rejected", config, first_line(e))
            continue
        if not error <= REL_L2_TOLERANCE:
            report("inaccurate", config, error)
            continue
        try:
            samples = tune_timer.time(lambda config=config: peer.module.launch(q, k, v, out, config))
        except Exception as e:  # noqa: BLE001 - a fault can surface at timing too
            alive = context_alive()
            report("rejected" if alive else "faulted", config, first_line(e))
            if not alive:
                return
            continue
        report("timed", config, statistics.median(samples))


def _tune_child(conn, configs, q, k, v, reference, settings) -> None:
    """Entry point of an autotuning child (spawned): the tensors arrive through CUDA IPC,
    every report goes back over `conn`."""
    import torch

    import triton_flash_attention

    busy_cycles, reps, budget_s, tune_reps = settings
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        timer = Timer(stream, torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda"), busy_cycles, reps,
                      budget_s)
        peer = TritonPeer(SEARCHES["full"], module=triton_flash_attention, tune_reps=tune_reps)
        tune_configs(peer, configs, q, k, v, reference, timer, lambda *m: conn.send(m),
                     lambda: _context_alive(torch))
    conn.send(("done", None, None))
    conn.close()


def _apply_report(record: TuneRecord, kind: str, config, value) -> None:
    if kind == "timed":
        record.times_us[config] = value
    elif kind == "rejected":
        record.rejected[config] = value
    elif kind == "inaccurate":
        record.inaccurate[config] = value
    elif kind == "faulted":
        record.faulted[config] = value


def _tune_in_children(peer: TritonPeer, record: TuneRecord, q, k, v, reference, timer: Timer) -> None:
    """Runs tune_configs in spawned children until every candidate has a result; a child
    that faults, dies or hangs is replaced, its current config recorded as faulted."""
    import torch.multiprocessing as torch_mp

    context = torch_mp.get_context("spawn")
    settings = (timer.busy_cycles, timer.reps, timer.budget_s, peer.tune_reps)
    remaining = list(record.plan.candidates)
    while remaining and len(record.faulted) < MAX_CHILD_FAULTS:
        parent, child = context.Pipe()
        process = context.Process(target=_tune_child, args=(child, remaining, q, k, v, reference, settings))
        process.start()
        child.close()
        current = None
        while True:
            if not parent.poll(CONFIG_DEADLINE_S):
                process.kill()
                why = f"no result within {CONFIG_DEADLINE_S:g} s (hung); its process was killed"
                break
            try:
                kind, config, value = parent.recv()
            except EOFError:
                process.join()
                why = f"its process died (exit code {process.exitcode})"
                break
            if kind == "done":
                why = None
                break
            if kind == "start":
                current = config
                continue
            _apply_report(record, kind, config, value)
            remaining.remove(config)
            current = None
            if kind == "faulted":
                why = None
                break
        process.join()
        parent.close()
        if current is not None:  # died or hung inside a config: that config is the cause
            record.faulted[current] = why
            remaining.remove(current)
        elif why is not None and remaining:
            record.faulted[remaining.pop(0)] = why  # died before starting one: never loop forever
    for config in remaining:
        record.rejected[config] = f"not tried: {MAX_CHILD_FAULTS} configs faulted before it"


def autotune_triton(peer: TritonPeer, shape: Shape, q, k, v, reference, timer: Timer) -> TuneRecord:
    """Times every candidate of the shape's plan on the attention kernel alone (K and V made
    once), the same cold way as the benchmark with fewer calls, and drops configs that
    Triton rejects, that fault or that miss the accuracy bound: the record's best is the
    fastest accurate config.  With peer.isolate (the default) the candidates run in child
    processes (see MAX_CHILD_FAULTS); otherwise here, stopping at the first fault."""
    record = TuneRecord(plan_shape(shape.T, shape.D, peer.space, peer.shared_memory_limit))
    started = time.monotonic()
    if peer.isolate:
        _tune_in_children(peer, record, q, k, v, reference, timer)
    else:
        import torch

        tune_configs(peer, record.plan.candidates, q, k, v, reference, timer,
                     lambda kind, config, value: _apply_report(record, kind, config, value),
                     lambda: _context_alive(torch))
        tried = set(record.times_us) | set(record.rejected) | set(record.inaccurate) | set(record.faulted)
        for config in record.plan.candidates:
            if config not in tried:
                record.rejected[config] = "not tried: an earlier config faulted in this process"
    record.tuning_s = time.monotonic() - started
    return record


def triton_row(peer: TritonPeer, shape: Shape, inputs, reference, timer: Timer, warmup: int,
               notes: dict[str, str]) -> Row:
    """The peer at one shape: autotuned first, then timed whole (both matmuls and the
    attention kernel with the best config) like every other implementation."""
    if peer.module is None:
        return Row(shape, TRITON, "failed", note=peer.unavailable)
    try:
        k, v = materialize_kv(*inputs)
        record = autotune_triton(peer, shape, inputs[0], k, v, reference, timer)
        del k, v
    except Exception as e:  # noqa: BLE001 - e.g. out of memory at a large shape
        return Row(shape, TRITON, "failed", note=f"autotuning failed: {_failure_text(e)}")
    notes[shape.label] = record.summary()
    print(f"  Triton {record.summary()}", flush=True)
    best = record.best
    if best is None:
        return Row(shape, TRITON, "failed", note=f"no config ran: {record.summary()}")
    q = inputs[0]
    out = q.new_empty(q.shape)

    def run_triton():
        k, v = materialize_kv(*inputs)
        peer.module.launch(q, k, v, out, best)
        return out

    note = f"{best.text()}; autotuned over {len(record.plan.candidates)} configs in " \
           f"{record.tuning_s:.1f} s (not timed)"
    return measure(shape, TRITON, run_triton, reference, timer, warmup, poison=lambda: out.fill_(float("nan")),
                   note=note)


# ---------------------------------------------------------------------------------------
# Timing


@dataclasses.dataclass
class Timer:
    """The one timing method used for every implementation (see the module docstring)."""

    stream: object           # torch.cuda.Stream; everything runs on it
    flush: object            # FLUSH_BYTES of device memory, zeroed before each call
    busy_cycles: int
    reps: int
    budget_s: float

    def method(self, warmup: int) -> str:
        return (f"CUDA events around one call; before each call a {FLUSH_BYTES >> 20} MiB buffer is zeroed "
                f"(L2 flush) and the GPU kept busy by torch.cuda._sleep({self.busy_cycles}) so the call is "
                f"queued before the GPU reaches it; median of {self.reps} calls (fewer, at least {MIN_SAMPLES}, "
                f"if {self.budget_s:g} s of wall time per implementation run out) after {warmup} warm-up calls; "
                f"one process, one stream; TF32 off; spread = (p90 - min) / median; TFLOP/s on the "
                f"materialized FLOP count.")

    def time(self, fn: Callable[[], object]) -> list[float]:
        """Per-call GPU times in µs."""
        import torch

        samples: list[float] = []
        deadline = time.monotonic() + self.budget_s
        while len(samples) < self.reps:
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(min(TIMING_BATCH, self.reps - len(samples)))]
            for start, end in events:
                self.flush.zero_()
                torch.cuda._sleep(self.busy_cycles)
                start.record(self.stream)
                fn()
                end.record(self.stream)
            events[-1][1].synchronize()
            samples += [1000.0 * start.elapsed_time(end) for start, end in events]
            if len(samples) >= MIN_SAMPLES and time.monotonic() > deadline:
                break
        return samples


def _failure_text(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return first if isinstance(error, MlatuneError) else f"{type(error).__name__}: {first}"


def measure(shape: Shape, name: str, fn: Callable[[], object], reference, timer: Timer, warmup: int,
            poison: Optional[Callable[[], None]] = None, note: str = "") -> Row:
    """Warms up, checks the output against the reference, then times; a failure is a row."""
    try:
        for _ in range(warmup):
            fn()
        timer.stream.synchronize()
        if poison:
            poison()
        error = relative_l2(fn(), reference)  # synchronizes
        return timed_row(shape, name, timer.time(fn), error, note)
    except Exception as e:  # noqa: BLE001 - a failing implementation is reported, not fatal
        return Row(shape, name, "failed", note=_failure_text(e))


@dataclasses.dataclass
class GpuRun:
    """What both benchmark modes start with and share across shapes."""

    torch: object
    args: argparse.Namespace
    mlatune: Optional[Mlatune]
    mlatune_failure: str      # why mlatune is None
    triton: TritonPeer
    environment: str
    timer: Optional[Timer] = None
    choices: dict[str, str] = dataclasses.field(default_factory=dict)        # mlatune's, per shape label
    triton_notes: dict[str, str] = dataclasses.field(default_factory=dict)   # autotuning, per shape label

    def make_timer(self, stream) -> Timer:
        args = self.args
        self.timer = Timer(stream, self.torch.empty(FLUSH_BYTES, dtype=self.torch.uint8, device="cuda"),
                           args.busy_cycles, args.reps, args.budget_s)
        return self.timer

    def triton_method(self) -> str:
        peer = self.triton
        if peer.module is None:
            return f" Triton tf32x3: n/a ({peer.unavailable})."
        return (f" Triton {peer.version} tf32x3: autotuned per shape before timing over {peer.space.describe()}, "
                f"less configs pruned as bench/triton_peer.py says; each candidate timed on the attention kernel "
                f"alone, cold, median of {peer.tune_reps} calls, after its output passed rel-L2 <= "
                f"{REL_L2_TOLERANCE:g}; {peer.precompile}.")


def mlatune_row(run: GpuRun, shape: Shape, inputs, reference) -> Row:
    import torch

    mlatune, timer = run.mlatune, run.timer
    if mlatune is None:
        return Row(shape, "mlatune", "failed", note=run.mlatune_failure)
    try:
        run.choices[shape.label] = mlatune.choice(shape)
    except MlatuneError as e:
        run.choices[shape.label] = f"unknown ({e})"
    print(f"  mlatune choice: {run.choices[shape.label]}")
    out = torch.empty_like(inputs[0])
    stream_handle = timer.stream.cuda_stream
    compiles_before = mlatune.compile_count()

    def run_mlatune():
        mlatune.attention(*inputs, out, stream_handle)
        return out

    # The first call may run a stand-in while the choice compiles in the background (a
    # binary nobody warmed): what is timed is the steady state, the choice itself.
    stand_in, first_ms = False, math.nan
    try:
        first_ms, _, first_phases = first_call(mlatune, inputs, out, stream_handle)
        print(f"  mlatune first call: {first_ms:.3f} ms host ({first_phases})")
        stand_in = mlatune.runs_stand_in(shape)
        mlatune.wait_compiles()
        if settle_race(mlatune, shape, run_mlatune, timer.stream):
            run.choices[shape.label] = mlatune.choice(shape)
    except MlatuneError:
        pass  # measure() below reports the failure as the row
    row = measure(shape, "mlatune", run_mlatune, reference, timer, run.args.warmup,
                  poison=lambda: out.fill_(float("nan")))
    if math.isfinite(first_ms):
        row.note = (row.note + "; " if row.note else "") + f"first call {first_ms:.3f} ms host"
    compiled = mlatune.compile_count() - compiles_before
    if compiled:
        row.note = (row.note + "; " if row.note else "") + \
            f"{compiled} NVRTC compile(s) on first use{' (first call ran a stand-in meanwhile)' if stand_in else ''}"
    if not row.ok:
        print(f"  mlatune failed: {row.note}")
    return row


def absorbed_rows(run: GpuRun, shape: Shape, inputs, reference) -> list[Row]:
    """The absorbed form, eager and (unless --skip-compile) through torch.compile."""
    import torch

    args, timer = run.args, run.timer
    future = torch.ones(shape.T, shape.T, dtype=torch.bool, device="cuda").triu(1)
    scale = 1.0 / math.sqrt(shape.D)
    rows = [measure(shape, "absorbed_eager", lambda: absorbed(*inputs, future, scale), reference, timer,
                    args.warmup)]
    if args.skip_compile:
        return rows + [Row(shape, "absorbed_compiled", "failed", note="skipped (--skip-compile)")]
    torch._dynamo.reset()  # one specialization per shape, never the recompile limit
    try:
        compiled_fn = torch.compile(absorbed, dynamic=False)
        started = time.monotonic()
        compiled_fn(*inputs, future, scale)  # compiles; failures surface here
        timer.stream.synchronize()
        note = f"compiled in {time.monotonic() - started:.1f} s (not timed)"
        rows.append(measure(shape, "absorbed_compiled", lambda: compiled_fn(*inputs, future, scale),
                            reference, timer, args.warmup, note=note))
    except Exception as e:  # noqa: BLE001 - a compiler failure is a result to report
        rows.append(Row(shape, "absorbed_compiled", "failed", note=f"torch.compile: {_failure_text(e)}"))
    return rows


def benchmark_shape(run: GpuRun, shape: Shape, index: int) -> list[Row]:
    import torch

    args, timer = run.args, run.timer
    inputs = make_inputs(shape, args.seed + index, args.weights, "cuda")
    reference = reference_fp64(*inputs)
    rows = [mlatune_row(run, shape, inputs, reference),
            triton_row(run.triton, shape, inputs, reference, timer, args.warmup, run.triton_notes),
            measure(shape, "sdpa_materialized", lambda: materialized_sdpa(*inputs), reference, timer, args.warmup)]
    rows += absorbed_rows(run, shape, inputs, reference)
    fill_ratios(rows)
    del inputs, reference
    torch.cuda.empty_cache()
    return rows


def load_torch():
    """Imports torch and makes fp32 strict before anything runs.

    Only the legacy flags are written: torch 2.9+ raises when legacy and new
    (fp32_precision) TF32 settings are mixed, and Inductor still reads the legacy ones."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


# Environment variables that change what mlatune's dispatcher does (cache/dispatcher.h).
DISPATCHER_SETTINGS = ("MLATUNE_RACE", "MLATUNE_RACE_FILL", "MLATUNE_WORKSPACE_RESERVE", "MLATUNE_PRELOAD")


def dispatcher_settings_text(environ) -> str:
    """The dispatcher's settings from `environ` that are set, for a report's environment line."""
    settings = [f"{name}={environ[name]}" for name in DISPATCHER_SETTINGS if environ.get(name)]
    return "; mlatune " + ", ".join(settings) if settings else ""


def environment_text(torch, triton_version: str) -> str:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = getattr(props, "L2_cache_size", 0)
    return (f"{props.name}, {props.multi_processor_count} SMs" + (f", {l2 >> 20} MiB L2" if l2 else "")
            + f"; torch {torch.__version__} (CUDA {torch.version.cuda}), TF32 matmul "
            f"{'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}; "
            f"Triton {triton_version or 'n/a'}; Python {sys.version.split()[0]}"
            f"{dispatcher_settings_text(os.environ)}; "
            f"{datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")


def start_gpu_run(args, offline_option: str, without_mlatune: str):
    """PyTorch on a GPU, mlatune's dispatcher and the Triton peer (its binaries compiled for
    every shape of the run), as both benchmark modes start: a GpuRun, or an exit code when
    PyTorch or a GPU is missing (`offline_option` names what runs without)."""
    try:
        torch = load_torch()
    except ImportError as e:
        print(f"error: PyTorch is needed for the benchmark ({e}); {offline_option} runs without it", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 1
    if args.race is not None:  # read by mlatune_open
        os.environ["MLATUNE_RACE"] = str(args.race)
    free_before = torch.cuda.mem_get_info()[0]
    try:
        opened = time.perf_counter()
        mlatune, mlatune_failure = Mlatune(args.lib, args.db, args.space), ""
        if os.environ.get("MLATUNE_PRELOAD") == "1":
            # As a server would at start: the preload done before the first call.
            mlatune.wait_compiles()
            loaded, failed = mlatune.preloaded()
            print(f"# preload: {loaded} stored binaries loaded ({failed} failed) {time.perf_counter() - opened:.2f} s "
                  f"after open; device memory used by open and preload "
                  f"{(free_before - torch.cuda.mem_get_info()[0]) / 2**20:.0f} MiB", flush=True)
    except MlatuneError as e:
        print(f"mlatune unavailable, {without_mlatune} only: {e}", file=sys.stderr)
        mlatune, mlatune_failure = None, str(e)
    peer = load_triton_peer(args, torch)
    run = GpuRun(torch, args, mlatune, mlatune_failure, peer, environment_text(torch, peer.version))
    print(f"# {run.environment}", flush=True)
    precompile_triton(peer, args.shapes, args.triton_workers)
    return run


def run_benchmark(args) -> int:
    run = start_gpu_run(args, "--self-test or --dry-run", "Triton and PyTorch")
    if isinstance(run, int):
        return run
    torch = run.torch
    stream = torch.cuda.Stream()
    rows: list[Row] = []
    with torch.cuda.stream(stream):
        timer = run.make_timer(stream)
        weights = "N(0,1) as the tuner draws them" if args.weights == "unit" else "N(0,1)/sqrt(R)"
        method = (timer.method(args.warmup) + f" Inputs: fresh N(0,1) float32 per shape (seed {args.seed} "
                  f"+ shape index), weights {weights}." + run.triton_method())
        print(f"# {method}")
        for index, shape in enumerate(args.shapes):
            print(f"\n== {shape.describe()}: {materialized_flops(shape) / 1e9:.3f} GFLOP materialized", flush=True)
            try:
                shape_rows = benchmark_shape(run, shape, index)
            except Exception as e:  # noqa: BLE001 - e.g. the inputs or the reference do not fit
                failure = f"shape not run: {_failure_text(e)}"
                shape_rows = [Row(shape, name, "failed", note=failure) for name in IMPLEMENTATIONS]
                torch.cuda.empty_cache()
            print(format_table(shape_rows), flush=True)
            rows += shape_rows
    if run.mlatune is not None:
        print(f"\nmlatune NVRTC compilations in this process: {run.mlatune.compile_count()}")
        run.mlatune.close()

    print("\n" + format_target_table(rows) + "\n\n" + "\n".join(ratio_summary_lines(rows) + summary_lines(rows)))
    write_outputs(rows, run, method)
    return 0


def write_outputs(rows: Sequence[Row], run: GpuRun, method: str) -> None:
    """The CSV, the markdown report and the plot under --out-dir; flags on stdout."""
    args = run.args
    out_dir = args.out_dir
    write_csv(rows, out_dir / f"{args.stem}.csv")
    (out_dir / f"{args.stem}.md").write_text(format_report(rows, run.choices, method, run.environment,
                                                           run.triton_notes))
    written = [f"{args.stem}.csv", f"{args.stem}.md"]
    if not any(r.ok for r in rows):
        print("no plot: no implementation produced a time", file=sys.stderr)
    else:
        try:
            title = f"fused MLA attention, strict fp32, cold L2: {run.environment.split(';')[0]}"
            write_plot(rows, out_dir / f"{args.stem}.png", title)
            written.append(f"{args.stem}.png")
        except ImportError as e:
            print(f"no plot: {e}", file=sys.stderr)
    print(f"wrote {', '.join(str(out_dir / name) for name in written)}")
    flagged = [r for r in rows if r.ok and not r.accurate]
    for r in flagged:
        print(f"FLAGGED: {r.implementation} at {r.shape.label}: rel-L2 {r.rel_l2:.2e} > {REL_L2_TOLERANCE:g}")


def phase_text(before: Sequence[int], after: Sequence[int], host_ms: float) -> str:
    """Where a first call's host_ms went, from the dispatcher's first-use phases before and after
    it: "choose 0.310, store_read 0.570, ..., rest 0.120" in ms, the phases that took any time
    (workspace is part of first_launch; rest is what no phase covers: the C ABI, ctypes, Python)."""
    ms = [(a - b) * 1e-6 for a, b in zip(after, before)]
    named = dict(zip(Mlatune.FIRST_USE_PHASES, ms))
    rest = host_ms - sum(v for name, v in named.items() if name != "workspace")
    return ", ".join([f"{name} {v:.3f}" for name, v in named.items() if v > 0] + [f"rest {rest:.3f}"])


def first_call(mlatune: Mlatune, inputs, out, stream_handle: int) -> tuple[float, int, str]:
    """Host ms of mlatune's first call at a shape (choice, binary load or compile, enqueue), the
    NVRTC compilations it ran, and where its time went (phase_text); the GPU is idle before, and
    the call's work is waited for after, outside the timed region."""
    import torch

    torch.cuda.synchronize()
    compiles = mlatune.compile_count()
    phases = mlatune.first_use_ns()
    started = time.perf_counter()
    mlatune.attention(*inputs, out, stream_handle)
    host_ms = (time.perf_counter() - started) * 1e3
    torch.cuda.synchronize()
    return host_ms, mlatune.compile_count() - compiles, phase_text(phases, mlatune.first_use_ns(), host_ms)


RACE_LAUNCH_LIMIT = 200


def settle_race(mlatune: Mlatune, shape: Shape, run_once: Callable[[], object], stream) -> int:
    """With --race (MLATUNE_RACE), at an untuned shape the dispatcher races its first few configs
    over the next launches (cache/dispatcher.h): launch, each call waited for, until the race
    settles; the launches it took (0 where there is no race).  What is timed after this is the
    winner, as in a program that has called the shape a few dozen times."""
    launches = 0
    while mlatune.race_state(shape) == 1 and launches < RACE_LAUNCH_LIMIT:
        run_once()
        stream.synchronize()
        launches += 1
    return launches


def random_mlatune(run: GpuRun, result: RandomResult, inputs, reference) -> None:
    """mlatune's first call at the shape (host time, compiles, stand-in), then its steady state."""
    import torch

    mlatune, timer, shape = run.mlatune, run.timer, result.shape
    if mlatune is None:
        result.mlatune = Row(shape, "mlatune", "failed", note=run.mlatune_failure)
        return
    out = torch.empty_like(inputs[0])
    stream_handle = timer.stream.cuda_stream
    try:
        result.choice = mlatune.choice(shape)
        result.first_call_ms, result.first_call_compiles, result.first_call_phases = first_call(
            mlatune, inputs, out, stream_handle)
        # Timed from here is the steady state: the chosen binary, not a
        # stand-in still running while it compiles in the background.
        result.first_call_stand_in = mlatune.runs_stand_in(shape)
    except MlatuneError as e:
        result.choice = result.choice or f"unknown ({e})"

    def run_mlatune():
        mlatune.attention(*inputs, out, stream_handle)
        return out

    try:
        mlatune.wait_compiles()
        result.race_launches = settle_race(mlatune, shape, run_mlatune, timer.stream)
        result.choice = mlatune.choice(shape)
    except MlatuneError as e:
        result.choice = result.choice or f"unknown ({e})"

    result.mlatune = measure(shape, "mlatune", run_mlatune, reference, timer, run.args.warmup,
                             poison=lambda: out.fill_(float("nan")))


def random_shape_result(run: GpuRun, shape: Shape, index: int) -> RandomResult:
    import torch

    args, timer = run.args, run.timer
    inputs = make_inputs(shape, args.seed + index, args.weights, "cuda")
    reference = reference_fp64(*inputs)
    result = RandomResult(shape)
    random_mlatune(run, result, inputs, reference)
    result.triton = triton_row(run.triton, shape, inputs, reference, timer, args.warmup, run.triton_notes)
    result.sdpa = measure(shape, "sdpa_materialized", lambda: materialized_sdpa(*inputs), reference, timer,
                          args.warmup)
    del inputs, reference
    torch.cuda.empty_cache()
    return result


def run_random_benchmark(args) -> int:
    run = start_gpu_run(args, "--dry-run", "Triton and SDPA")
    if isinstance(run, int):
        return run
    torch = run.torch
    print(f"# shapes: {RANDOM_DISTRIBUTION} (seed {args.seed})")
    stream = torch.cuda.Stream()
    results: list[RandomResult] = []
    with torch.cuda.stream(stream):
        timer = run.make_timer(stream)
        method = (timer.method(args.warmup) + f" Inputs: fresh N(0,1) float32 per shape (seed {args.seed} + "
                  "shape index). First call: host time (perf_counter) of mlatune's first launch at the shape, "
                  "the GPU idle before it, before any warm-up." + run.triton_method())
        for index, shape in enumerate(args.shapes):
            try:
                result = random_shape_result(run, shape, index)
            except Exception as e:  # noqa: BLE001 - e.g. the inputs or the reference do not fit
                failure = f"shape not run: {_failure_text(e)}"
                result = RandomResult(shape, mlatune=Row(shape, "mlatune", "failed", note=failure),
                                      sdpa=Row(shape, "sdpa_materialized", "failed", note=failure),
                                      triton=Row(shape, TRITON, "failed", note=failure))
                torch.cuda.empty_cache()
            results.append(result)
            print(f"{','.join(map(str, shape.dims()))}: mlatune {_number(_median(result.mlatune), '.1f')} µs, "
                  f"Triton {_number(_median(result.triton), '.1f')} µs, SDPA {_number(_median(result.sdpa), '.1f')} "
                  f"µs, Triton/mlatune {_number(result.triton_ratio, '.2f')}, SDPA/mlatune "
                  f"{_number(result.ratio, '.2f')}, first call {_number(result.first_call_ms, '.3f')} ms; "
                  f"{result.choice}", flush=True)
    if run.mlatune is not None:
        run.mlatune.close()
    print("\n" + random_summary(results))
    write_random_csv(results, args.out_dir / f"{args.stem}.csv")
    (args.out_dir / f"{args.stem}.md").write_text(format_random_report(results, method, run.environment))
    print(f"wrote {args.out_dir / (args.stem + '.csv')}, {args.out_dir / (args.stem + '.md')}")
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

    # The dispatcher's settings named in a report's environment line.
    check(dispatcher_settings_text({}) == "", "no settings should add nothing")
    check(dispatcher_settings_text({"MLATUNE_WORKSPACE_RESERVE": "5G", "MLATUNE_RACE": "0", "PATH": "/bin",
                                    "MLATUNE_RACE_FILL": ""})
          == "; mlatune MLATUNE_RACE=0, MLATUNE_WORKSPACE_RESERVE=5G",
          f"settings text {dispatcher_settings_text({'MLATUNE_WORKSPACE_RESERVE': '5G', 'MLATUNE_RACE': '0'})!r}")
    check(dispatcher_settings_text({"MLATUNE_PRELOAD": "1"}) == "; mlatune MLATUNE_PRELOAD=1",
          f"settings text {dispatcher_settings_text({'MLATUNE_PRELOAD': '1'})!r}")

    # Shapes.
    parsed = parse_shapes(" S0 ; 2,333,8,64,100;; decode;4, 256 ,8,32,64 ;7,7,7,7,7")
    check([s.dims() for s in parsed] == [(2, 32, 4, 16, 24), (2, 333, 8, 64, 100), (16, 1, 16, 64, 512),
                                         (4, 256, 8, 32, 64), (7, 7, 7, 7, 7)], f"parsed dims {parsed}")
    check([s.label for s in parsed] == ["S0", "odd", "decode", "S1", "7,7,7,7,7"], f"parsed labels {parsed}")
    raises_value_error("1,2,3,4", "expected B,T,H,D,R")
    raises_value_error("1,2,x,4,5", "must be an integer")
    raises_value_error("1,0,3,4,5", "must be positive")
    raises_value_error(" ; ", "no shape")
    raises_value_error("S9", "one of S0")

    # FLOP counts, by hand from TARGETS.md's formula B·H·T(T+1)/2·4D + 4·B·T·H·R·D:
    # S0: 8·528·64 + 393,216; S1: 32·32,896·128 + 67,108,864; S2: 64·524,800·256 + 2,147,483,648;
    # S3: 64·2,098,176·256 + 8,589,934,592; S4: 16·8,390,656·512 + 17,179,869,184.
    by_label = {s.label: s for s in DEFAULT_SHAPES}
    expected = {"S0": 663_552, "S1": 201_850_880, "S2": 10_745_806_848, "S3": 42_966_450_176,
                "S4": 85_916_123_136}
    for label, flops in expected.items():
        check(materialized_flops(by_label[label]) == flops,
              f"{label}: {materialized_flops(by_label[label])} FLOPs, expected {flops}")
    # ... and they give TARGETS.md's floors at 63.7 TFLOP/s (µs, as rounded there).
    for label, floor_us in {"S1": 3.2, "S2": 169, "S3": 675, "S4": 1350}.items():
        ours = materialized_flops(by_label[label]) / PEAK_FP32_TFLOPS / 1e6
        check(abs(ours - floor_us) / floor_us < 0.015, f"{label}: floor {ours:.2f} µs vs TARGETS {floor_us}")
    # TARGETS.md: the absorbed algorithm's floor at S4 is 4.6 ms; 16·(8,390,656·2048 + 4096·262,144).
    check(absorbed_flops(by_label["S4"]) == 292_124_884_992, f"S4 absorbed {absorbed_flops(by_label['S4'])}")
    check(round(absorbed_flops(by_label["S4"]) / PEAK_FP32_TFLOPS / 1e9, 1) == 4.6, "S4 absorbed floor")

    # Rows, ratios and tables from synthetic measurements at S1.
    s1 = by_label["S1"]
    rows = [timed_row(s1, "mlatune", [12.0, 10.0, 11.0, 10.0, 30.0], 3e-7),
            timed_row(s1, "sdpa_materialized", [20.0] * 5, 2e-7),
            timed_row(s1, "absorbed_eager", [40.0, 41.0, 39.0], 2e-5),
            Row(s1, "absorbed_compiled", "failed", note="torch.compile: BackendCompilerFailed: no | cc")]
    fill_ratios(rows)
    check(rows[0].median_us == 11.0 and rows[0].min_us == 10.0 and rows[0].p90_us == 30.0,
          f"mlatune stats {rows[0]}")
    check(rows[0].samples == 5 and abs(rows[0].spread - 20.0 / 11.0) < 1e-12, "mlatune samples and spread")
    check(abs(rows[1].ratio_to_mlatune - 20.0 / 11.0) < 1e-12, f"ratio {rows[1].ratio_to_mlatune}")
    check(rows[0].ratio_to_mlatune == 1.0, "mlatune's own ratio")
    check(math.isnan(rows[3].ratio_to_mlatune), "a failed row has no ratio")
    check(abs(rows[1].tflops - 201_850_880 / 20e-6 / 1e12) < 1e-9, f"TFLOP/s {rows[1].tflops}")
    check(abs(rows[1].pct_of_peak - 100 * 10.092544 / 63.7) < 1e-6, f"% of peak {rows[1].pct_of_peak}")
    check(rows[1].accurate and not rows[2].accurate, "tolerance flags")
    check(not Row(s1, "x", rel_l2=math.nan).accurate, "NaN error must not pass")

    table = format_table(rows).splitlines()
    check(len(table) == 2 + len(rows), f"table has {len(table)} lines")
    check(table[0].startswith("| implementation | median µs |") and "% of 63.7" in table[0], table[0])
    check(all(line.count(" | ") == table[0].count(" | ") for line in table[2:]),
          "every table row has the header's columns (pipes in notes escaped)")
    check("| sdpa_materialized | 20.0 | 0% | 1.82× | 2.0e-07 | 10.09 | 15.8% |" in table[3], table[3])
    check("**2.0e-05 > 1e-05**" in table[4], f"flag missing: {table[4]}")
    check("FAILED: torch.compile" in table[5] and "n/a" in table[5], table[5])

    report = format_report(rows, {"S1": "hit ALGORITHM=expanded (tuned)"}, "events", "test GPU")
    check("## S1 (B=4, T=256, H=8, D=32, R=64)" in report and "`hit ALGORITHM=expanded (tuned)`" in report,
          "report headings and choice")
    check("S1: mlatune 11.0 µs vs sdpa_materialized 20.0 µs: mlatune 1.82× faster" in report, "report summary")
    check("Outside the rel-L2 tolerance of 1e-5: absorbed_eager at S1." in report, "report flags")
    check("floor at 63.7 TFLOP/s: 3.17 µs" in report, "report floor")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nested" / "rows.csv"
        write_csv(rows, path)
        with path.open(newline="") as f:
            read = list(csv.DictReader(f))
        check(tuple(read[0].keys()) == CSV_COLUMNS, f"CSV columns {tuple(read[0].keys())}")
        check(len(read) == 4, f"CSV has {len(read)} rows")
        check(read[1]["implementation"] == "sdpa_materialized" and read[1]["ratio_to_mlatune"] == "1.8182",
              f"CSV row {read[1]}")
        check(read[2]["within_tolerance"] == "false" and read[1]["within_tolerance"] == "true", "CSV flags")
        check(read[3]["status"] == "failed" and read[3]["median_us"] == "" and "no | cc" in read[3]["note"],
              f"CSV failed row {read[3]}")
        check(read[0]["materialized_flop"] == "201850880", "CSV FLOPs")

    # The ctypes binding against the real library, where it is built: without a GPU or
    # without the database, opening fails with the C ABI's status and message.
    if library is not None:
        missing = Path(tempfile.gettempdir()) / f"mlatune_self_test_{os.getpid()}" / "none.db"
        try:
            Mlatune(library, missing, REPO_ROOT / "search_spaces" / "fused_mla_attention.yaml")
            check(False, "mlatune_open succeeded on a missing database")
        except MlatuneError as e:
            expected_starts = ("mlatune_open: ENVIRONMENT: no GPU", "mlatune_open: INVALID_ARGUMENT: no database")
            check(str(e).startswith(expected_starts), f"mlatune_open error: {e}")
        try:
            Mlatune(Path(tempfile.gettempdir()) / "no_such_libmlatune_c.so", missing, missing)
            check(False, "loading a missing library succeeded")
        except MlatuneError as e:
            check(str(e).startswith("dlopen: ENVIRONMENT:"), f"missing library error: {e}")

    # Unseen shapes: deterministic per seed, inside the distribution's bounds, never a tuned
    # shape, never over the budget; a summary of synthetic results.
    drawn = draw_random_shapes(200, 7, DEFAULT_MEMORY_BUDGET_GIB * 2**30, set())
    check(drawn == draw_random_shapes(200, 7, DEFAULT_MEMORY_BUDGET_GIB * 2**30, set()), "same seed, same shapes")
    check(drawn != draw_random_shapes(200, 8, DEFAULT_MEMORY_BUDGET_GIB * 2**30, set()), "seeds differ")
    check(len(set(s.dims() for s in drawn)) == 200, "drawn shapes are distinct")
    check(all(1 <= s.B <= 8 and 1 <= s.T <= 4096 and 1 <= s.H <= 64 and 8 <= s.D <= 256 and 16 <= s.R <= 1024
              for s in drawn), "drawn shapes within the bounds")
    check(sum(1 for s in drawn if s.T <= 64) > 60, "T is log-uniform: about half of the draws at T <= 64")
    check(any(s.D % 4 and s.R % 4 for s in drawn), "residues of D and R are arbitrary")
    small_budget = 2**30
    check(all(estimated_peak_bytes(s) <= small_budget for s in draw_random_shapes(50, 1, small_budget, set())),
          "the memory budget is respected")
    excluded = {s.dims() for s in drawn[:10]}
    check(not excluded & {s.dims() for s in draw_random_shapes(200, 7, DEFAULT_MEMORY_BUDGET_GIB * 2**30, excluded)},
          "shapes in the database are never drawn")
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "tuned.db"
        with sqlite3.connect(db_path) as db:
            db.execute("CREATE TABLE kernels(id INTEGER PRIMARY KEY, name TEXT)")
            db.execute("CREATE TABLE best(kernel_id INTEGER, shape TEXT)")
            db.execute("INSERT INTO kernels VALUES (1, 'fused_mla_attention'), (2, 'rms_norm')")
            db.execute("INSERT INTO best VALUES (1, 'B=2,T=32,H=4,D=16,R=24'), (2, 'ROWS=4,COLS=8')")
        check(tuned_shapes(db_path) == {(2, 32, 4, 16, 24)}, f"tuned shapes {tuned_shapes(db_path)}")
    s_a, s_b = Shape("a", 1, 2, 3, 8, 16), Shape("b", 2, 2, 3, 8, 16)
    results = [RandomResult(s_a, "nearest X (why)", 0.5, 0, timed_row(s_a, "mlatune", [10.0] * 5, 1e-7),
                            timed_row(s_a, "sdpa_materialized", [40.0] * 5, 2e-7)),
               RandomResult(s_b, "default Y (why)", 3.0, 1, timed_row(s_b, "mlatune", [20.0] * 5, 3e-6),
                            timed_row(s_b, "sdpa_materialized", [10.0] * 5, 1e-7))]
    summary = random_summary(results)
    check("geomean 1.414" in summary and "worst 0.500 at 2,2,3,8,16 (default Y (why))" in summary
          and "below 1.0: 1" in summary and "max rel-L2 3.00e-06" in summary, summary)
    check("first call ms median 3.000 max 3.000" in summary, summary)

    for name in ("torch", "numpy", "matplotlib"):
        check(name not in sys.modules, f"{name} was imported by the self-test")

    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    print(f"self-test: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


# ---------------------------------------------------------------------------------------


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    default_db = Path(os.environ.get("MLATUNE_DB", "mlatune.db"))
    parser = argparse.ArgumentParser(
        description="Benchmark mlatune's fused MLA attention against Triton and PyTorch, side by side, in one process.")
    parser.add_argument("--lib", type=Path,
                        help="libmlatune_c.so (default: build/libmlatune_c.so; --self-test loads it only if given)")
    parser.add_argument("--db", type=Path, default=default_db,
                        help="the tuned database (default: $MLATUNE_DB, else ./mlatune.db)")
    parser.add_argument("--space", type=Path, default=REPO_ROOT / "search_spaces" / "fused_mla_attention.yaml",
                        help="the fused MLA search space the database was tuned with")
    parser.add_argument("--shapes", type=_shapes_argument, default=list(DEFAULT_SHAPES),
                        help='"B,T,H,D,R;..." or labels (' + ", ".join(s.label for s in DEFAULT_SHAPES)
                        + "); default: all of them")
    parser.add_argument("--reps", type=_positive_int, default=50, help="timed calls per implementation (median)")
    parser.add_argument("--budget-s", type=float, default=30.0,
                        help=f"wall seconds per implementation and shape after which timing stops "
                             f"(at least {MIN_SAMPLES} calls)")
    parser.add_argument("--warmup", type=_positive_int, default=5, help="untimed calls before checking and timing")
    parser.add_argument("--busy-cycles", type=_positive_int, default=DEFAULT_BUSY_CYCLES,
                        help="torch.cuda._sleep cycles before each timed call")
    parser.add_argument("--seed", type=int, default=0, help="input seed (plus the shape's index)")
    parser.add_argument("--weights", choices=("unit", "rsqrt_r"), default="unit",
                        help="W_k, W_v ~ N(0,1) as the tuner draws them, or N(0,1)/sqrt(R)")
    parser.add_argument("--out-dir", type=Path, default=REPO_ROOT / "docs" / "performance",
                        help="where the CSV, markdown and PNG go")
    parser.add_argument("--stem", default="side_by_side", help="their file name without extension")
    parser.add_argument("--skip-compile", action="store_true", help="leave out torch.compile")
    parser.add_argument("--race", type=_non_negative_int, metavar="N",
                        help="mlatune races N configs at each untuned shape before it is timed (MLATUNE_RACE; "
                             "0 or 1: no race; default: the environment's, else the dispatcher's 4)")
    # Triton's autotuning runs in child processes, so a config that faults
    # (three do in Triton 3.6 on the H200) is a result, not the end of the run.
    parser.add_argument("--skip-triton", action="store_true",
                        help="leave out the Triton peer (its column then reads n/a: skipped)")
    parser.add_argument("--with-triton", dest="skip_triton", action="store_false",
                        help="run the Triton peer (the default; kept for older command lines)")
    parser.add_argument("--triton-search", choices=sorted(SEARCHES),
                        help="the Triton peer's autotuning grid (default: full for --shapes, reduced for "
                             "--random-shapes, where every head size compiles anew); --dry-run prints it")
    parser.add_argument("--triton-workers", type=_non_negative_int,
                        default=min(DEFAULT_TRITON_WORKERS, os.cpu_count() or 1),
                        help="processes that compile the Triton binaries before timing (0: each compiles at its "
                             "first launch in the benchmark process); default: min(16, cores)")
    parser.add_argument("--triton-tune-reps", type=_positive_int, default=MIN_SAMPLES,
                        help="cold calls timed per Triton config while autotuning (median)")
    parser.add_argument("--random-shapes", type=_positive_int, metavar="N",
                        help="benchmark N unseen shapes instead of --shapes (mlatune, Triton and SDPA), drawn with "
                             "--seed from: " + RANDOM_DISTRIBUTION)
    parser.add_argument("--memory-budget-gib", type=float, default=DEFAULT_MEMORY_BUDGET_GIB,
                        help="--random-shapes: largest estimated peak memory of a shape (float64 reference's "
                             "three B*H*T*T tensors and K/V plus the fp32 tensors), GiB")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the shapes (drawn, with --random-shapes) and the Triton peer's autotuning plan, "
                             "and exit (no GPU, torch or Triton)")
    parser.add_argument("--out", type=Path, dest="out_dir", help="same as --out-dir")
    parser.add_argument("--self-test", action="store_true",
                        help="check the GPU-free parts and exit (with --lib: also the ctypes binding)")
    return parser.parse_args(argv)


def _shapes_argument(text: str) -> list[Shape]:
    try:
        return parse_shapes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def dry_run_text(args) -> str:
    """The shapes and the Triton peer's plan, for the H200's shared-memory limit."""
    space = search_for(args.triton_search, args.random_shapes is not None)
    plan = format_plan([(s.label, s.T, s.D) for s in args.shapes], space)
    if args.random_shapes is not None:
        shapes = "\n".join(",".join(map(str, s.dims())) for s in args.shapes)
        return (f"{shapes}\ndrew {len(args.shapes)} shapes (seed {args.seed}, none tuned in {args.db}): "
                f"{RANDOM_DISTRIBUTION}\n{plan}")
    return "\n".join(s.describe() for s in args.shapes) + "\n" + plan


def main(argv: Sequence[str]) -> int:
    args = parse_arguments(argv)
    if args.self_test:
        return self_test(args.lib)
    if args.lib is None:
        args.lib = REPO_ROOT / "build" / "libmlatune_c.so"
    if args.random_shapes is None:
        if args.dry_run:
            print(dry_run_text(args))
            return 0
        return run_benchmark(args)
    if args.stem == "side_by_side":
        args.stem = "random_shapes"
    try:
        args.shapes = draw_random_shapes(args.random_shapes, args.seed, args.memory_budget_gib * 2**30,
                                         tuned_shapes(args.db))
    except (ValueError, sqlite3.Error) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(dry_run_text(args))
        return 0
    return run_random_benchmark(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
