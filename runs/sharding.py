"""Shard planning: estimate each test's duration and balance the tests onto shards.

Pure logic over plain data (no Django, no torch), so the planner runs the same in a
Celery task, a management command, the test suite and `bench/sharding.py`.

The plan, as DESIGN §2.6 describes it:

1. group the tests by function: an *area* derived from the file path (ops, eager,
   inductor, nn, distributed, dynamo, …) plus the test's config labels;
2. estimate every test: crcr's own history for the test id on this device; else the
   median of the known tests of its file; else a file-level seed from PyTorch's
   `test-times.json` divided over the file's tests; else the median of its group;
   else a default;
3. cut each group into indivisible pieces: a serial file is one piece, any other
   file is cut, in test order, into pieces of at most `piece_seconds`;
4. balance the pieces with longest-processing-time-first (LPT) onto the fewest shards
   whose estimated duration stays under the cap (or onto a fixed shard count), then
   refine with a move/swap local search that only ever lowers the longest shard.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import json
import math
import os
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

DEFAULT_MAX_SHARD_SECONDS = 1800.0
DEFAULT_TEST_SECONDS = 1.0
# Refinement stops once the longest shard is this close to the lower bound (the
# estimates themselves are far noisier than 0.1 %), after 2 moves per shard, or
# when none of the REFINE_PARTNERS shortest shards can take work from the longest
# (looking further costs quadratic time for little gain).
REFINE_TOLERANCE = 1e-3
REFINE_PARTNERS = 16
_EPS = 1e-9


class Source(StrEnum):
    """How a test's duration was estimated, most trusted first."""

    HISTORY = "history"
    FILE_MEDIAN = "file_median"
    SEED = "seed"
    GROUP_MEDIAN = "group_median"
    DEFAULT = "default"


@dataclass(frozen=True)
class TestItem:
    """One test to plan: its id, the file it lives in and its config labels."""

    __test__ = False  # not a pytest test class

    test_id: str
    file: str
    labels: tuple[str, ...] = ()


class Estimate(NamedTuple):
    seconds: float
    source: Source


@dataclass
class Shard:
    index: int
    groups: tuple[str, ...]
    test_ids: list[str]
    seconds: float
    over_cap: bool = False


@dataclass
class ShardPlan:
    shards: list[Shard]
    estimates: dict[str, Estimate]
    max_shard_seconds: float | None
    shard_count: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return max((shard.seconds for shard in self.shards), default=0.0)


# --- areas -------------------------------------------------------------------------

# Sub-folders of PyTorch's test/ that belong to another area than their own name.
_FOLDER_AREAS = {"cpython": "dynamo", "higher_order_ops": "dynamo", "torch_np": "numpy"}
# Top-level test files by name prefix; anything else at the top level is "eager".
_FILE_AREAS = {
    "ops": ("test_ops",),
    "nn": ("test_nn", "test_modules", "test_native_mha", "test_transformers"),
    "autograd": ("test_autograd", "test_functional_autograd"),
    "jit": ("test_jit", "test_tensorexpr"),
    "inductor": ("test_inductor", "test_compile"),
    "dynamo": ("test_dynamo", "test_dynamic_shapes"),
    "distributed": ("test_distributed", "test_multiprocessing"),
    "linalg": ("test_linalg", "test_matmul"),
    "optim": ("test_optim", "test_functional_optim"),
    "cuda": ("test_cuda",),
    "fx": ("test_fx",),
    "sparse": ("test_sparse",),
    "quantization": ("test_quantization",),
    "mps": ("test_mps",),
}


@functools.cache
def file_key(path: str) -> str:
    """Normalise a test file path to PyTorch's `test-times.json` key.

    `test/inductor/test_torchinductor.py`, `/src/pytorch/test/test_ops.py` and
    `inductor/test_torchinductor` all become keys relative to `test/`, without `.py`.
    """
    parts = [part for part in path.replace("\\", "/").split("/") if part not in ("", ".")]
    if "test" in parts:
        parts = parts[parts.index("test") + 1 :]
    key = "/".join(parts)
    return key.removesuffix(".py")


@functools.cache
def area_for(path: str) -> str:
    """The functional area of a test file (ops, eager, inductor, nn, distributed, …)."""
    key = file_key(path)
    if "/" in key:
        folder = key.split("/", 1)[0]
        return _FOLDER_AREAS.get(folder, folder)
    for area, prefixes in _FILE_AREAS.items():
        if key.startswith(prefixes):
            return area
    return "eager"


def group_for(item: TestItem) -> str:
    """The planning group: the area, qualified by config labels (`nn[serial]`)."""
    return _group(item.file, item.labels)


@functools.cache
def _group(path: str, labels: tuple[str, ...]) -> str:
    area = area_for(path)
    if not labels:
        return area
    return f"{area}[{','.join(sorted(set(labels)))}]"


# --- duration history ---------------------------------------------------------------


@dataclass(frozen=True)
class DurationStats:
    """Per test id and device: a robust running estimate of its duration."""

    mean: float
    spread: float
    count: int

    def to_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "spread": self.spread, "count": self.count}

    @classmethod
    def from_dict(cls, data: Mapping[str, float | int]) -> DurationStats:
        return cls(float(data["mean"]), float(data["spread"]), int(data["count"]))


HISTORY_ALPHA = 0.2  # weight of a new observation
HISTORY_CLIP = 2.5  # an observation counts at most this many spreads from the mean
HISTORY_REL_FLOOR = 0.1  # the spread is never taken below 10 % of the mean …
HISTORY_ABS_FLOOR = 0.05  # … nor below 50 ms


def update_duration(previous: DurationStats | None, seconds: float) -> DurationStats:
    """Fold one observed duration into the history, robust to outliers.

    1. The first observation is the estimate.
    2. Later ones are clipped to `mean ± HISTORY_CLIP × spread` (the spread floored
       at 10 % of the mean), then enter an exponentially decayed mean.
    3. The spread is a decayed mean absolute deviation whose input is capped at
       twice the clip band: one wild run widens the band a little, a lasting change
       widens it run after run until the mean follows.
    """
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"a duration must be a finite number of seconds >= 0, got {seconds!r}")
    if previous is None:
        return DurationStats(mean=seconds, spread=0.0, count=1)
    mean = previous.mean
    band = HISTORY_CLIP * max(previous.spread, HISTORY_REL_FLOOR * mean, HISTORY_ABS_FLOOR)
    clipped = min(max(seconds, mean - band), mean + band)
    deviation = min(abs(seconds - mean), 2 * band)
    return DurationStats(
        mean=mean + HISTORY_ALPHA * (clipped - mean),
        spread=previous.spread + HISTORY_ALPHA * (deviation - previous.spread),
        count=previous.count + 1,
    )


# --- seeds from PyTorch's test-times.json -------------------------------------------


def shared_data_dir() -> Path:
    """The shared data folder: `$CRCR_SHARED_DATA`, else `<repo>/../shared/data`."""
    configured = os.environ.get("CRCR_SHARED_DATA")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / "shared" / "data"


TestTimes = dict[str, dict[str, dict[str, float]]]


def load_test_times(path: Path) -> TestTimes:
    """Read a `test-times.json` file: `{job: {config: {test_file: seconds}}}`."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of jobs")
    for job, configs in data.items():
        if not isinstance(configs, dict):
            raise ValueError(f"{path}: job {job!r} must map configs to files")
        for config, files in configs.items():
            if not isinstance(files, dict) or not all(
                isinstance(s, int | float) and s >= 0 for s in files.values()
            ):
                raise ValueError(f"{path}: {job!r}/{config!r} must map files to seconds >= 0")
    return data


def file_seeds(test_times: TestTimes, job: str, config: str) -> dict[str, float]:
    """Seconds per file key for one job and config (empty when either is unknown)."""
    return {file_key(name): float(s) for name, s in test_times.get(job, {}).get(config, {}).items()}


# --- estimates ----------------------------------------------------------------------


@dataclass
class _Bucket:
    """The tests of one file in one group, in input order."""

    key: str
    group: str
    first: int  # input position of its first test, to keep shards in input order
    test_ids: list[str] = field(default_factory=list)


def _buckets(items: Sequence[TestItem]) -> list[_Bucket]:
    buckets: dict[tuple[str, tuple[str, ...]], _Bucket] = {}
    for position, item in enumerate(items):
        bucket = buckets.get((item.file, item.labels))
        if bucket is None:
            bucket = _Bucket(file_key(item.file), group_for(item), position)
            buckets[(item.file, item.labels)] = bucket
        bucket.test_ids.append(item.test_id)
    return list(buckets.values())


def estimate_durations(
    items: Sequence[TestItem],
    history: Mapping[str, float],
    seeds: Mapping[str, float] | None = None,
    default_seconds: float = DEFAULT_TEST_SECONDS,
) -> dict[str, Estimate]:
    """Estimate every test: history, file median, seed, group median, default."""
    return _estimate(_buckets(items), history, seeds, default_seconds)


def _estimate(
    buckets: Sequence[_Bucket],
    history: Mapping[str, float],
    seeds: Mapping[str, float] | None,
    default_seconds: float,
) -> dict[str, Estimate]:
    seeds = {file_key(name): s for name, s in (seeds or {}).items()}
    known_by_file: dict[str, list[float]] = {}
    known_by_group: dict[str, list[float]] = {}
    tests_per_file: dict[str, int] = {}
    observed = []
    for bucket in buckets:
        times = [history.get(test_id) for test_id in bucket.test_ids]
        known = [t for t in times if t is not None]
        known_by_file.setdefault(bucket.key, []).extend(known)
        known_by_group.setdefault(bucket.group, []).extend(known)
        tests_per_file[bucket.key] = tests_per_file.get(bucket.key, 0) + len(times)
        observed.append(times)

    estimates: dict[str, Estimate] = {}
    for bucket, times in zip(buckets, observed, strict=True):
        # One fallback per bucket, shared by its tests that have no history.
        if known_by_file[bucket.key]:
            fallback = Estimate(statistics.median(known_by_file[bucket.key]), Source.FILE_MEDIAN)
        elif bucket.key in seeds:
            # The seed is the whole file's time; spread it over the tests planned here.
            fallback = Estimate(seeds[bucket.key] / tests_per_file[bucket.key], Source.SEED)
        elif known_by_group[bucket.group]:
            fallback = Estimate(
                statistics.median(known_by_group[bucket.group]), Source.GROUP_MEDIAN
            )
        else:
            fallback = Estimate(default_seconds, Source.DEFAULT)
        for test_id, seconds in zip(bucket.test_ids, times, strict=True):
            estimates[test_id] = fallback if seconds is None else Estimate(seconds, Source.HISTORY)
    return estimates


# --- pieces -------------------------------------------------------------------------


@dataclass
class _Piece:
    group: str
    order: tuple[int, int]  # (its bucket's first input position, piece number)
    test_ids: list[str]
    seconds: float


def _cut_pieces(
    buckets: Sequence[_Bucket],
    estimates: Mapping[str, Estimate],
    serial_keys: set[str],
    piece_seconds: float,
) -> dict[str, list[_Piece]]:
    """Cut each group's files into pieces in test order; a serial file is one piece."""
    groups: dict[str, list[_Piece]] = {}
    for bucket in buckets:
        pieces = groups.setdefault(bucket.group, [])
        piece = _Piece(bucket.group, (bucket.first, 0), [], 0.0)
        pieces.append(piece)
        limit = math.inf if bucket.key in serial_keys else piece_seconds
        for test_id in bucket.test_ids:
            seconds = estimates[test_id].seconds
            if piece.test_ids and piece.seconds + seconds > limit:
                piece = _Piece(bucket.group, (bucket.first, piece.order[1] + 1), [], 0.0)
                pieces.append(piece)
            piece.test_ids.append(test_id)
            piece.seconds += seconds
    return groups


# --- balancing ----------------------------------------------------------------------


def lower_bound(durations: Sequence[float], shards: int) -> float:
    """No schedule on `shards` shards beats max(total / shards, longest item)."""
    return max(sum(durations) / shards, max(durations, default=0.0))


def balance(durations: Sequence[float], shards: int, good_enough: float = 0.0) -> list[list[int]]:
    """Assign item indices to `shards` bins, minimising the longest bin.

    1. LPT: items by decreasing duration (ties by index), each onto the least
       loaded bin (ties by bin number).
    2. Local search, while the longest bin is above `good_enough` and the lower
       bound: take the best move of one of its items, or swap with a shorter item,
       into one of the shortest bins that leaves both below the old longest; stop
       when none exists. Each step strictly shrinks the sorted load vector, so the
       result is never worse than LPT's.
    """
    if shards < 1:
        raise ValueError("need at least one shard")
    bins: list[list[int]] = [[] for _ in range(shards)]
    heap = [(0.0, b) for b in range(shards)]
    for index in sorted(range(len(durations)), key=lambda i: (-durations[i], i)):
        load, b = heapq.heappop(heap)
        bins[b].append(index)
        heapq.heappush(heap, (load + durations[index], b))
    if durations:
        target = max(good_enough, lower_bound(durations, shards) * (1 + REFINE_TOLERANCE))
        _refine(durations, bins, target)
    return bins


def _refine(durations: Sequence[float], bins: list[list[int]], target: float) -> None:
    loads = [sum(durations[i] for i in b) for b in bins]
    # Each bin as a sorted list of (duration, index), for bisecting.
    ordered = [sorted((durations[i], i) for i in b) for b in bins]
    for _ in range(2 * len(bins) + 64):
        top = max(range(len(bins)), key=lambda b: (loads[b], -b))
        if loads[top] <= target:
            return
        step = _best_step(ordered, loads, top)
        if step is None:
            return
        other, give, take = step
        for bin_from, bin_to, entry in ((top, other, give), (other, top, take)):
            if entry is None:
                continue
            ordered[bin_from].remove(entry)
            bisect.insort(ordered[bin_to], entry)
            bins[bin_from].remove(entry[1])
            bins[bin_to].append(entry[1])
            loads[bin_from] -= entry[0]
            loads[bin_to] += entry[0]


Entry = tuple[float, int]


def _best_step(
    ordered: list[list[Entry]], loads: list[float], top: int
) -> tuple[int, Entry, Entry | None] | None:
    """The move or swap out of bin `top` that best evens it with a shorter bin."""
    for other in heapq.nsmallest(REFINE_PARTNERS, range(len(loads)), key=loads.__getitem__):
        gap = loads[top] - loads[other]
        if gap <= _EPS:
            return None  # bins are visited shortest first: no later one has room
        best: tuple[float, Entry, Entry | None] | None = None
        mine, theirs = ordered[top], ordered[other]
        # Moving `delta` seconds across leaves max(top - delta, other + delta); the
        # ideal is delta = gap / 2 and any 0 < delta < gap lowers the top bin.
        at = bisect.bisect_left(mine, (gap / 2, -1))
        for entry in mine[max(at - 1, 0) : at + 1]:
            if _EPS < entry[0] < gap - _EPS:
                cost = abs(gap / 2 - entry[0])
                if best is None or cost < best[0]:
                    best = (cost, entry, None)
        for entry in mine:
            at = bisect.bisect_left(theirs, (entry[0] - gap / 2, -1))
            for swap in theirs[max(at - 1, 0) : at + 1]:
                delta = entry[0] - swap[0]
                if _EPS < delta < gap - _EPS:
                    cost = abs(gap / 2 - delta)
                    if best is None or cost < best[0]:
                        best = (cost, entry, swap)
        if best is not None:
            return other, best[1], best[2]
    return None


def _fewest_shards(durations: Sequence[float], cap: float) -> list[list[int]]:
    """Balance onto the fewest shards whose longest stays within `cap` (every
    duration fits the cap).

    1. Start from a lower bound: total / cap, and one shard per item longer than
       half the cap (no two of those fit together).
    2. Grow the count in doubling steps until the balanced plan fits, then
       bisect between the last count that did not fit and the first that did.
    """

    def attempt(shards: int) -> list[list[int]] | None:
        bins = balance(durations, shards, good_enough=cap)
        longest = max(sum(durations[i] for i in b) for b in bins)
        return bins if longest <= cap * (1 + _EPS) else None

    most = len(durations)  # one item per shard always fits
    low = min(
        most,
        max(1, math.ceil(sum(durations) / cap - _EPS), sum(d > cap / 2 for d in durations)),
    )
    if found := attempt(low):
        return found
    step, high = 1, low
    while found is None:
        low, high = high, min(high + step, most)
        found = attempt(high) if high < most else balance(durations, most)
        step *= 2
    while high - low > 1:
        middle = (low + high) // 2
        if fits := attempt(middle):
            high, found = middle, fits
        else:
            low = middle
    return found


def _apportion(groups: Mapping[str, list[float]], shard_count: int) -> dict[str, int]:
    """Share a fixed shard count between groups: each next shard goes to the group
    with the highest lower bound (then the highest mean load) that has a piece to
    spare for it."""
    counts = dict.fromkeys(groups, 1)
    for _ in range(shard_count - len(groups)):
        candidates = [
            (lower_bound(d, counts[g]), sum(d) / counts[g], g)
            for g, d in groups.items()
            if counts[g] < len(d)
        ]
        if not candidates:
            break
        counts[max(candidates)[2]] += 1
    return counts


# --- the plan -----------------------------------------------------------------------


def plan_shards(
    items: Sequence[TestItem],
    history: Mapping[str, float],
    *,
    seeds: Mapping[str, float] | None = None,
    serial_files: Iterable[str] = (),
    max_shard_seconds: float | None = DEFAULT_MAX_SHARD_SECONDS,
    shard_count: int | None = None,
    isolate_groups: bool = True,
    piece_seconds: float | None = None,
    default_seconds: float = DEFAULT_TEST_SECONDS,
) -> ShardPlan:
    """Plan the shards of a run.

    With `shard_count` the tests go onto at most that many shards (empty ones are
    dropped) and the cap is not used; otherwise onto the fewest shards within
    `max_shard_seconds`, where a piece longer than the cap (a long serial file)
    gets a shard of its own, flagged `over_cap`. With `isolate_groups` each shard
    holds one group; when a fixed count is below the number of groups, they share.
    """
    cap = None if shard_count is not None else max_shard_seconds
    if shard_count is None and (cap is None or cap <= 0):
        raise ValueError("give a positive max_shard_seconds or a shard_count")
    if shard_count is not None and shard_count < 1:
        raise ValueError("shard_count must be at least 1")
    if len({item.test_id for item in items}) != len(items):
        twice = Counter(item.test_id for item in items).most_common(1)[0][0]
        raise ValueError(f"test id {twice!r} is listed twice")

    buckets = _buckets(items)
    estimates = _estimate(buckets, history, seeds, default_seconds)
    if piece_seconds is None:
        total = sum(e.seconds for e in estimates.values())
        piece_seconds = max((total / shard_count if shard_count else float(cap or 0)) / 6, _EPS)
    pieces = _cut_pieces(buckets, estimates, {file_key(f) for f in serial_files}, piece_seconds)
    notes: list[str] = []
    if shard_count is not None and isolate_groups and shard_count < len(pieces):
        notes.append(f"{len(pieces)} groups share {shard_count} shards")
        isolate_groups = False
    if not isolate_groups:
        pieces = {"*": [p for group in pieces.values() for p in group]}
    counts: dict[str, int] = {}
    if shard_count is not None:
        counts = _apportion({g: [p.seconds for p in ps] for g, ps in pieces.items()}, shard_count)

    shards = [
        _shard(group_pieces, members, cap)
        for group, group_pieces in pieces.items()
        for members in _balance_group(group_pieces, counts.get(group), cap)
    ]
    shards.sort(key=lambda s: (s.groups, -s.seconds))
    for index, shard in enumerate(shards):
        shard.index = index
    if any(s.over_cap for s in shards):
        notes.append("some shards exceed the cap: each holds one indivisible piece")
    return ShardPlan(shards, estimates, cap, shard_count, notes)


def _shard(pieces: Sequence[_Piece], members: Iterable[int], cap: float | None) -> Shard:
    chosen = sorted((pieces[i] for i in members), key=lambda p: p.order)
    seconds = sum(p.seconds for p in chosen)
    return Shard(
        index=0,
        groups=tuple(dict.fromkeys(p.group for p in chosen)),
        test_ids=[test_id for p in chosen for test_id in p.test_ids],
        seconds=seconds,
        over_cap=cap is not None and seconds > cap,
    )


def _balance_group(
    pieces: Sequence[_Piece], shard_count: int | None, cap: float | None
) -> list[list[int]]:
    durations = [p.seconds for p in pieces]
    if shard_count is not None:
        bins = balance(durations, min(shard_count, max(len(pieces), 1)))
        return [b for b in bins if b]
    assert cap is not None
    # Pieces longer than the cap cannot share a shard without making it longer still.
    oversized = [i for i, d in enumerate(durations) if d > cap]
    rest = [i for i, d in enumerate(durations) if d <= cap]
    bins = [[i] for i in oversized]
    if rest:
        sub = _fewest_shards([durations[i] for i in rest], cap)
        bins += [[rest[j] for j in b] for b in sub if b]
    return bins
