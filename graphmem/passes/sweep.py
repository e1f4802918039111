"""Sweep one dim over values: peak memory, fit, roofline latency and throughput at each.

`--sweep batch=1,2,4,...,256` binds the dim to each value in turn and computes what
`graphmem analyze --batch N` would (the peak of the bound analysis; the roofline latency when
a GPU is given). Throughput is batch / latency, so it grows while the model is memory-bound
(weights are read once per batch, whatever its size) and flattens once the big nodes are
compute-bound: the sweep says where, as the smallest value reaching SATURATION_SHARE of the
best throughput in the sweep.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from graphmem.core.conventions import MAX_DIM_VALUE
from graphmem.core.progress import steps
from graphmem.errors import GraphmemError

SATURATION_SHARE = 0.9
MAX_SWEEP_POINTS = 64


@dataclass(frozen=True)
class SweepPoint:
    value: int
    peak_bytes: int  # the live-tensor peak
    fits: bool | None  # None without a GPU; with one, the GPU's verdict at this value
    est_latency_s: float | None  # roofline lower bound; None without a GPU
    est_throughput_per_s: float | None  # batch / latency; None without a batch
    device_total_bytes: int | None = None  # the runtime model's, where the verdict reads one


@dataclass(frozen=True)
class SweepResult:
    dim: str
    points: tuple[SweepPoint, ...]
    saturates_at: int | None  # smallest value with >= SATURATION_SHARE of the best throughput


def run_sweep(dim: str, values: Sequence[int], peak_at: Callable[[int], int],
              latency_at: Callable[[int], float | None], usable_bytes: int | None,
              batch_at: Callable[[int], int | None]) -> SweepResult:
    """Evaluate each value; `batch_at(value)` is the batch at that point (None: no batch);
    `latency_at` gives None where there is no latency (no GPU, or costs not bound). `fits`
    here is the live peak against `usable_bytes`; `with_device_totals` replaces it by the
    GPU's verdict where a runtime model applies."""
    points = []
    with steps(f"sweep of {dim}", len(values)) as done:  # a re-analysis per value
        for value in values:
            peak = peak_at(value)
            latency = latency_at(value)
            batch = batch_at(value)
            throughput = batch / latency if batch is not None and latency else None
            fits = None if usable_bytes is None else peak <= usable_bytes
            points.append(SweepPoint(value, peak, fits, latency, throughput))
            done(len(points))
    return SweepResult(dim=dim, points=tuple(points), saturates_at=_saturation(points))


def with_device_totals(sweep: SweepResult, total_at: Callable[[int], int],
                       capacity_bytes: int) -> SweepResult:
    """The sweep with each point's device total and the verdict on it (total <= capacity)."""
    points = []
    with steps(f"device total per {sweep.dim}", len(sweep.points)) as done:
        for point in sweep.points:
            total = total_at(point.value)
            points.append(dataclasses.replace(point, device_total_bytes=total,
                                              fits=total <= capacity_bytes))
            done(len(points))
    return dataclasses.replace(sweep, points=tuple(points))


def _saturation(points: list[SweepPoint]) -> int | None:
    rated = [p for p in points if p.est_throughput_per_s is not None]
    if len(rated) < 2:
        return None
    best = max(p.est_throughput_per_s or 0.0 for p in rated)
    return min(p.value for p in rated if (p.est_throughput_per_s or 0.0) >= SATURATION_SHARE * best)


def parse_sweep(text: str) -> tuple[str, tuple[int, ...]]:
    """`batch=1,2,4,...,256` -> ("batch", (1, 2, 4, 8, 16, 32, 64, 128, 256)).

    `...` continues the progression of the values before it up to the value after it:
    geometric when they have a whole ratio of 2 or more (1,2,4 or 1,2), or arithmetic
    (8,16,24 or 10,20,30), whichever reaches the value after `...` exactly.
    """
    name, sep, listing = text.partition("=")
    name = name.strip()
    if not sep or not name or not listing.strip():
        raise GraphmemError(f"--sweep '{text}': give NAME=VALUES, e.g. --sweep batch=1,2,4,...,256")
    items = [item.strip() for item in listing.split(",")]
    if items.count("...") > 1 or (items.count("...") == 1 and (
            items.index("...") < 2 or items.index("...") != len(items) - 2)):
        raise GraphmemError(f"--sweep '{text}': write '...' once, after two or more values and"
                            " before the last one, e.g. 1,2,4,...,256")
    numbers = [_parse_value(text, item) for item in items if item != "..."]
    values = _expand(text, numbers[:-1], numbers[-1]) if "..." in items else numbers
    if len(values) > MAX_SWEEP_POINTS:
        raise GraphmemError(f"--sweep '{text}': {len(values)} values; give at most"
                            f" {MAX_SWEEP_POINTS}")
    if len(set(values)) != len(values):
        raise GraphmemError(f"--sweep '{text}': a value is repeated")
    return name, tuple(values)


def _parse_value(text: str, item: str) -> int:
    if not re.fullmatch(r"\d+", item):
        raise GraphmemError(f"--sweep '{text}': '{item}' is not a positive integer")
    value = int(item)
    if not 1 <= value <= MAX_DIM_VALUE:
        raise GraphmemError(f"--sweep '{text}': {value} is outside 1..{MAX_DIM_VALUE}")
    return value


def _expand(text: str, head: list[int], last: int) -> list[int]:
    first, second = head[-2], head[-1]
    ratio, rest = divmod(second, first)
    step = second - first
    pairs = list(itertools.pairwise(head))
    progressions: list[Callable[[int], int]] = []
    if rest == 0 and ratio >= 2 and all(b == a * ratio for a, b in pairs):
        progressions.append(lambda value: value * ratio)
    if step > 0 and all(b - a == step for a, b in pairs):
        progressions.append(lambda value: value + step)
    if not progressions:
        raise GraphmemError(f"--sweep '{text}': the values before '...' are neither a doubling"
                            " (1,2,4) nor an even step (8,16,24)")
    for advance in progressions:
        values = list(head)
        while advance(values[-1]) <= last:
            values.append(advance(values[-1]))
            if len(values) > MAX_SWEEP_POINTS:
                raise GraphmemError(f"--sweep '{text}': more than {MAX_SWEEP_POINTS} values")
        if values[-1] == last:
            return values
    raise GraphmemError(f"--sweep '{text}': {last} is not on the progression"
                        f" {', '.join(map(str, head))}, ...")
