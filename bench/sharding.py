"""Shard-planning benchmark: crcr's planner against other planners on PyTorch's CI times.

For every job/config of `test-times.json` (each test file one indivisible item) and
4, 8, 16 and 32 shards, it prints makespan ÷ lower bound, where the lower bound is
max(total / shards, longest file), for:

- crcr: `runs.sharding.plan_shards` with a fixed shard count, every file serial;
- round_robin: file i onto shard i mod n, in file order;
- duration_based_chunks and least_duration: pytest-split's two algorithms,
  re-implemented from their descriptions;
- calculate_shards: PyTorch's `tools/testing/test_selections.py` as it treats
  serial files, re-implemented from its description.

Then the planner's time for 100,000 synthetic test ids against sorting those ids.
Exits 1 when a target is missed. Run: `.venv/bin/python bench/sharding.py`.
"""

from __future__ import annotations

import heapq
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runs.areas import TestItem  # noqa: E402 (the repository root goes on the path first)
from runs.durations import load_test_times, shared_data_dir  # noqa: E402
from runs.sharding import lower_bound, plan_shards  # noqa: E402

SHARD_COUNTS = (4, 8, 16, 32)
TARGET_MEDIAN = 1.02
TARGET_WORST = 1.10
TARGET_SPEED_RATIO = 40.0  # planner time ÷ sorting the same ids
SYNTHETIC_IDS = 100_000

Files = list[tuple[str, float]]  # (file, seconds), in test-times.json order
Planner = Callable[[Files, int], list[float]]  # returns the load of each shard


def crcr(files: Files, shards: int) -> list[float]:
    items = [TestItem(name, name) for name, _ in files]
    history = dict(files)
    plan = plan_shards(
        items, history, serial_files=history, shard_count=shards, isolate_groups=False
    )
    return [shard.seconds for shard in plan.shards]


def round_robin(files: Files, shards: int) -> list[float]:
    loads = [0.0] * shards
    for n, (_, seconds) in enumerate(files):
        loads[n % shards] += seconds
    return loads


def duration_based_chunks(files: Files, shards: int) -> list[float]:
    """pytest-split: cut the list, in its order, into consecutive runs; move to the
    next group once the current one reaches total / shards."""
    target = sum(s for _, s in files) / shards
    loads = [0.0] * shards
    group = 0
    for _, seconds in files:
        if loads[group] >= target and group < shards - 1:
            group += 1
        loads[group] += seconds
    return loads


def least_duration(files: Files, shards: int) -> list[float]:
    """pytest-split: by name, then longest first (stable), each onto the group with
    the smallest sum (ties: lowest group index)."""
    ordered = sorted(sorted(files), key=lambda f: f[1], reverse=True)
    heap = [(0.0, g) for g in range(shards)]
    loads = [0.0] * shards
    for _, seconds in ordered:
        load, g = heapq.heappop(heap)
        loads[g] = load + seconds
        heapq.heappush(heap, (loads[g], g))
    return loads


def calculate_shards(files: Files, shards: int) -> list[float]:
    """PyTorch: longest first; every file is serial here, so all shards are serial
    shards; each file goes to the least loaded shard, except that the last shard
    leaves the race once it is over the per-shard estimate."""
    ordered = sorted(files, key=lambda f: f[1], reverse=True)
    total = sum(s for _, s in ordered)
    per_shard = total / shards
    limit = total % per_shard if per_shard else 0.0
    if limit <= 0.01:
        limit = per_shard
    loads = [0.0] * shards
    candidates = list(range(shards))
    for _, seconds in ordered:
        if shards > 1 and loads[-1] > limit:
            candidates = list(range(shards - 1))
        target = min(candidates, key=lambda g: loads[g])
        loads[target] += seconds
    return loads


PLANNERS: dict[str, Planner] = {
    "crcr": crcr,
    "round_robin": round_robin,
    "duration_based_chunks": duration_based_chunks,
    "least_duration": least_duration,
    "calculate_shards": calculate_shards,
}


def quality() -> tuple[dict[str, dict[int, list[float]]], list[str], int, int]:
    """Ratios per planner and shard count; the cases where crcr lost to and beat
    least_duration (plain LPT)."""
    data = shared_data_dir()
    if data is None:
        raise SystemExit(
            "bench/sharding.py measures on PyTorch CI's real test-times.json: "
            "set CRCR_SHARED_DATA or put shared/data beside the checkout"
        )
    test_times = load_test_times(data / "test-times.json")
    ratios: dict[str, dict[int, list[float]]] = {p: {m: [] for m in SHARD_COUNTS} for p in PLANNERS}
    losses, wins, balanced = [], 0, 0
    for job, configs in test_times.items():
        for config, times in configs.items():
            files = [(name, float(s)) for name, s in times.items()]
            if not files:
                continue
            for shards in SHARD_COUNTS:
                bound = lower_bound([s for _, s in files], shards)
                # Where the longest file is the bound, any longest-first planner is optimal.
                balanced += bound > max(s for _, s in files)
                spans = {name: max(plan(files, shards)) for name, plan in PLANNERS.items()}
                for name, span in spans.items():
                    ratios[name][shards].append(span / bound)
                if spans["crcr"] > spans["least_duration"] * (1 + 1e-12):
                    losses.append(f"{job} / {config or '(none)'} / {shards} shards")
                wins += spans["crcr"] < spans["least_duration"] * (1 - 1e-12)
    return ratios, losses, wins, balanced


def synthetic_items(count: int) -> tuple[list[TestItem], dict[str, float], dict[str, float]]:
    rng = random.Random(2026)
    folders = ["", "inductor/", "distributed/", "dynamo/", "nn/", "export/", "functorch/"]
    files = [f"test/{rng.choice(folders)}test_file_{n}.py" for n in range(1000)]
    items = [TestItem(f"{files[n % 1000]}::TestX::test_{n}", files[n % 1000]) for n in range(count)]
    history = {i.test_id: rng.lognormvariate(-1.0, 1.5) for i in items if rng.random() < 0.7}
    seeds = {f"test_file_{n}": rng.uniform(10, 600) for n in range(0, 1000, 3)}
    return items, history, seeds


def best_of(runs: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    ratios, losses, wins, balanced = quality()
    cases = len(ratios["crcr"][SHARD_COUNTS[0]])
    print(f"makespan ÷ lower bound over {cases} job/configs of test-times.json (median / worst);")
    print(
        f"the bound is total ÷ shards (not the longest file) in {balanced}"
        f" of {cases * len(SHARD_COUNTS)} cases\n"
    )
    header = f"{'algorithm':<22}" + "".join(f"{m:>10} shards  " for m in SHARD_COUNTS)
    print(header + "             all")
    for name, per_count in ratios.items():
        cells = "".join(
            f"{statistics.median(r):7.4f} / {max(r):6.4f}  " for r in per_count.values()
        )
        every = [x for r in per_count.values() for x in r]
        print(f"{name:<22}{cells}{statistics.median(every):7.4f} / {max(every):6.4f}")

    every_crcr = [x for r in ratios["crcr"].values() for x in r]
    median, worst = statistics.median(every_crcr), max(every_crcr)
    print(
        f"\ncrcr never worse than least_duration: {'yes' if not losses else 'NO'}"
        f" (strictly better on {wins} of {cases * len(SHARD_COUNTS)} cases)"
    )
    for case in losses:
        print(f"  worse on {case}")

    items, history, seeds = synthetic_items(SYNTHETIC_IDS)
    ids = [item.test_id for item in items]
    plan_time = best_of(3, lambda: plan_shards(items, history, seeds=seeds))
    sort_time = best_of(3, lambda: sorted(ids, reverse=True))
    speed_ratio = plan_time / sort_time
    print(
        f"\nplanning {SYNTHETIC_IDS:,} ids: {plan_time:.3f} s; sorting them: {sort_time:.3f} s;"
        f" ratio {speed_ratio:.1f}x"
    )

    print(f"\ncrcr makespan / bound, median: {median:.4f} (target <= {TARGET_MEDIAN})")
    print(f"crcr makespan / bound, worst: {worst:.4f} (target <= {TARGET_WORST})")
    print(f"cases worse than least_duration: {len(losses)} (target <= 0)")
    print(f"planning 100k ids / sorting them: {speed_ratio:.1f}x (target <= {TARGET_SPEED_RATIO}x)")
    missed = []
    if median > TARGET_MEDIAN:
        missed.append(f"median {median:.3f} > {TARGET_MEDIAN}")
    if worst > TARGET_WORST:
        missed.append(f"worst {worst:.3f} > {TARGET_WORST}")
    if losses:
        missed.append(f"worse than least_duration on {len(losses)} cases")
    if speed_ratio > TARGET_SPEED_RATIO:
        missed.append(f"planning is {speed_ratio:.1f}x a sort (target {TARGET_SPEED_RATIO}x)")
    print("\ntargets: " + ("all met" if not missed else "MISSED: " + "; ".join(missed)))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
