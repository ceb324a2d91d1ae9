"""Shard planning: balance a run's tests onto shards by their estimated durations.

Pure logic over plain data (no Django, no torch), so the planner runs the same in a
Celery task, a management command, the test suite and `bench/sharding.py`.

The plan, as DESIGN §2.6 describes it:

1. group the tests by function: an *area* derived from the file path (ops, eager,
   inductor, nn, distributed, dynamo, …) plus the test's config labels (`runs.areas`);
2. estimate every test: crcr's own history for the test id on this device; else the
   median of the known tests of its file; else a file-level seed from PyTorch's
   `test-times.json` divided over the file's tests; else the median of its group;
   else a default (`runs.durations`);
3. cut each group into indivisible pieces: a serial file is one piece, any other
   file is cut, in test order, into pieces of at most `piece_seconds`;
4. balance the pieces with longest-processing-time-first (LPT) onto the fewest shards
   whose estimated duration stays under the cap (or onto a fixed shard count), then
   refine with a move/swap local search that only ever lowers the longest shard.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from runs.areas import TestItem, file_key
from runs.durations import (
    DEFAULT_TEST_SECONDS,
    Bucket,
    Estimate,
    bucket_items,
    estimate_buckets,
)

DEFAULT_MAX_SHARD_SECONDS = 1800.0
# Refinement stops once the longest shard is this close to the lower bound (the
# estimates themselves are far noisier than 0.1 %), after 2 moves per shard, or
# when none of the REFINE_PARTNERS shortest shards can take work from the longest
# (looking further costs quadratic time for little gain).
REFINE_TOLERANCE = 1e-3
REFINE_PARTNERS = 16
_EPS = 1e-9


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


# --- pieces -------------------------------------------------------------------------


@dataclass
class _Piece:
    group: str
    order: tuple[int, int]  # (its bucket's first input position, piece number)
    test_ids: list[str]
    seconds: float


def _cut_pieces(
    buckets: Sequence[Bucket],
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

    buckets = bucket_items(items)
    estimates = estimate_buckets(buckets, history, seeds, default_seconds)
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
