"""The Triton peer's search space, its pruning and its autotuning record (pure Python).

The peer is what a Triton user writes for fused MLA attention: K and V materialized by two
strict-fp32 matmuls, then a causal flash-attention kernel (bench/triton_flash_attention.py)
whose dots use `input_precision="tf32x3"`, autotuned over tile sizes, warps and pipeline
stages.  Everything here runs without Triton, PyTorch or a GPU, so the plan of a run can be
printed (--dry-run) and tested anywhere; the kernel module is imported only on a GPU machine.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Iterable, NamedTuple, Optional, Sequence

# cudaDevAttrMaxSharedMemoryPerBlockOptin of the H200 (sm_90: 227 KiB); a GPU run reads
# its own device's value instead.
H200_SHARED_MEMORY_PER_BLOCK = 232_448
MAX_REGISTERS_PER_THREAD = 255  # the hardware limit of every architecture since sm_35
FP32_BYTES = 4
# The kernel computes offsets in 32-bit integers, as Triton does by default.
MAX_ELEMENTS = 2**31 - 1


class TritonConfig(NamedTuple):
    """One point of the autotuning grid: tile sizes and launch options."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    def text(self) -> str:
        return (f"BLOCK_M={self.block_m} BLOCK_N={self.block_n} num_warps={self.num_warps} "
                f"num_stages={self.num_stages}")


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """The values autotuning tries, as a cross product."""

    name: str
    block_m: tuple[int, ...]
    block_n: tuple[int, ...]
    num_warps: tuple[int, ...]
    num_stages: tuple[int, ...]

    def configs(self) -> list[TritonConfig]:
        return [TritonConfig(*values) for values in
                itertools.product(self.block_m, self.block_n, self.num_warps, self.num_stages)]

    def describe(self) -> str:
        def values(name: str, items: tuple[int, ...]) -> str:
            return f"{name} {{{', '.join(map(str, items))}}}"

        return (f"{self.name}: " + " x ".join([values("BLOCK_M", self.block_m), values("BLOCK_N", self.block_n),
                                              values("num_warps", self.num_warps),
                                              values("num_stages", self.num_stages)])
                + f" = {len(self.configs())} configs")


# Issue 15's grid: what the published Triton numbers were autotuned over.
FULL_SEARCH = SearchSpace("full", (16, 32, 64, 128), (16, 32, 64), (2, 4, 8), (1, 2, 3))
# For many unseen shapes, where every head size is a new set of compilations: the larger
# key tiles, the warp counts that fill a warpgroup, and the pipelined stage counts.
REDUCED_SEARCH = SearchSpace("reduced", (16, 32, 64, 128), (32, 64), (4, 8), (2, 3))
SEARCHES = {space.name: space for space in (FULL_SEARCH, REDUCED_SEARCH)}


def padded_head_dim(head_dim: int) -> int:
    """The power of two that tl.arange spans for a head size (tl.dot needs at least 16)."""
    if head_dim <= 0:
        raise ValueError(f"head size {head_dim} is not positive")
    return max(16, 1 << (head_dim - 1).bit_length())


def shared_memory_lower_bound(config: TritonConfig, d_pad: int) -> int:
    """Bytes that the K and V tiles alone need in shared memory.  Triton passes both dot
    operands through shared memory, and a loop pipelined over S stages keeps S - 1 copies of
    each in flight; Q, the probabilities and layout conversions come on top, so a config over
    the limit by this count can never launch."""
    return 2 * config.block_n * d_pad * FP32_BYTES * max(1, config.num_stages - 1)


def registers_lower_bound(config: TritonConfig, d_pad: int) -> int:
    """fp32 registers per thread that the output accumulator and the score tile alone
    occupy: both live in registers across the whole key loop."""
    values = config.block_m * d_pad + config.block_m * config.block_n
    return math.ceil(values / (32 * config.num_warps))


@dataclasses.dataclass(frozen=True)
class Pruned:
    """A config left out before compilation, and why."""

    config: TritonConfig
    reason: str  # one of PRUNE_REASONS
    detail: str


PRUNE_REASONS = ("tile over T", "shared memory", "registers")


def covering_tile(values: Sequence[int], seq_len: int) -> Optional[int]:
    """The smallest tile among `values` that holds all T rows, or None."""
    return min((v for v in values if v >= seq_len), default=None)


def prune_reason(config: TritonConfig, seq_len: int, head_dim: int, space: SearchSpace,
                 shared_memory_limit: int) -> Optional[Pruned]:
    """Why `config` is not worth compiling for (T, D), or None.

    A tile larger than the smallest one of the space that holds all T rows runs the same
    single block with more masked rows; the other two rules drop configs that cannot fit."""
    for name, tile, values in (("BLOCK_M", config.block_m, space.block_m), ("BLOCK_N", config.block_n, space.block_n)):
        cover = covering_tile(values, seq_len)
        if cover is not None and tile > cover:
            return Pruned(config, "tile over T", f"T={seq_len} fits in {name}={cover}")
    d_pad = padded_head_dim(head_dim)
    smem = shared_memory_lower_bound(config, d_pad)
    if smem > shared_memory_limit:
        return Pruned(config, "shared memory", f"K and V tiles need {smem} B > {shared_memory_limit} B")
    registers = registers_lower_bound(config, d_pad)
    if registers > MAX_REGISTERS_PER_THREAD:
        return Pruned(config, "registers",
                      f"accumulator and scores need {registers} > {MAX_REGISTERS_PER_THREAD} per thread")
    return None


@dataclasses.dataclass
class ShapePlan:
    """The configs autotuning runs at one (T, D), and those pruned."""

    seq_len: int
    head_dim: int
    space: SearchSpace
    candidates: list[TritonConfig]
    pruned: list[Pruned]

    def pruned_counts(self) -> dict[str, int]:
        return {reason: sum(1 for p in self.pruned if p.reason == reason) for reason in PRUNE_REASONS
                if any(p.reason == reason for p in self.pruned)}

    def describe(self) -> str:
        counts = self.pruned_counts()
        pruned = ", ".join(f"{n} {reason}" for reason, n in counts.items()) if counts else "none"
        return (f"{len(self.candidates)} of {len(self.space.configs())} {self.space.name}-grid configs "
                f"(D padded to {padded_head_dim(self.head_dim)}; pruned: {pruned})")


def plan_shape(seq_len: int, head_dim: int, space: SearchSpace,
               shared_memory_limit: int = H200_SHARED_MEMORY_PER_BLOCK) -> ShapePlan:
    candidates, pruned = [], []
    for config in space.configs():
        reason = prune_reason(config, seq_len, head_dim, space, shared_memory_limit)
        if reason is None:
            candidates.append(config)
        else:
            pruned.append(reason)
    return ShapePlan(seq_len, head_dim, space, candidates, pruned)


class CompileJob(NamedTuple):
    """One kernel binary: the kernel is specialized on the head size and the config only
    (T and H are not specialized), so shapes with the same D share their binaries."""

    head_dim: int
    config: TritonConfig

    def estimated_cost(self) -> int:
        # Larger tiles and more stages unroll into more code for ptxas.
        return self.config.block_m * self.config.block_n * padded_head_dim(self.head_dim) * self.config.num_stages


def compile_jobs(plans: Iterable[ShapePlan]) -> list[CompileJob]:
    """The distinct binaries of a run, the costliest first so that a pool of compiler
    processes ends together."""
    jobs = dict.fromkeys(CompileJob(plan.head_dim, config) for plan in plans for config in plan.candidates)
    return sorted(jobs, key=lambda job: -job.estimated_cost())


@dataclasses.dataclass
class TuneRecord:
    """What autotuning did at one shape: times per config (the attention kernel alone, µs,
    cold as in the benchmark), the configs Triton rejected, that faulted (lost their CUDA
    context: an illegal address, a trap, a hang) or that failed the accuracy bound, and the
    wall time of it all (first launches load or compile, then timing)."""

    plan: ShapePlan
    times_us: dict[TritonConfig, float] = dataclasses.field(default_factory=dict)
    rejected: dict[TritonConfig, str] = dataclasses.field(default_factory=dict)
    faulted: dict[TritonConfig, str] = dataclasses.field(default_factory=dict)
    inaccurate: dict[TritonConfig, float] = dataclasses.field(default_factory=dict)
    tuning_s: float = 0.0

    @property
    def best(self) -> Optional[TritonConfig]:
        return min(self.times_us, key=self.times_us.get) if self.times_us else None

    def summary(self) -> str:
        parts = [f"autotuned over {self.plan.describe()}", f"{len(self.times_us)} timed"]
        if self.rejected:
            reasons = sorted(set(self.rejected.values()))
            parts.append(f"{len(self.rejected)} rejected by Triton ({'; '.join(reasons[:2])}"
                         + (f"; {len(reasons) - 2} more reasons" if len(reasons) > 2 else "") + ")")
        if self.faulted:
            # Each one named: a faulting config is a finding about the kernel or the compiler.
            parts.append(f"{len(self.faulted)} faulted ("
                         + "; ".join(f"{config.text()}: {why}" for config, why in self.faulted.items()) + ")")
        if self.inaccurate:
            parts.append(f"{len(self.inaccurate)} over the rel-L2 bound")
        parts.append(f"{self.tuning_s:.1f} s")
        best = self.best
        parts.append(f"best {best.text()} ({self.times_us[best]:.1f} µs, kernel alone)" if best
                     else "no config ran")
        return "; ".join(parts)


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def search_for(name: Optional[str], random_shapes: bool) -> SearchSpace:
    """--triton-search, whose default is the full grid for named shapes and the reduced one
    for --random-shapes (each unseen head size is a new set of compilations)."""
    if name is None:
        return REDUCED_SEARCH if random_shapes else FULL_SEARCH
    return SEARCHES[name]


def format_plan(shapes: Sequence[tuple[str, int, int]], space: SearchSpace,
                shared_memory_limit: int = H200_SHARED_MEMORY_PER_BLOCK) -> str:
    """--dry-run's account of the Triton peer: per (label, T, D), the configs it will time,
    and the distinct binaries the run compiles."""
    plans = [plan_shape(T, D, space, shared_memory_limit) for _, T, D in shapes]
    lines = [f"Triton peer search: {space.describe()}"]
    lines += [f"  {label} (T={T}, D={D}): {plan.describe()}" for (label, T, D), plan in zip(shapes, plans)]
    lines.append(f"  {len(compile_jobs(plans))} distinct binaries to compile "
                 f"(shared-memory limit {shared_memory_limit} B)")
    return "\n".join(lines)
