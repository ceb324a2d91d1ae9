"""Duration estimates: how long each test is expected to take on a device.

Pure logic over plain data (no Django, no torch), used by the shard planner
(`runs.sharding`) and by the shard worker, which folds each observed duration into
the history (`update_duration`, stored as `TestDuration` rows).

Every test is estimated, as DESIGN §2.6 describes it, from the first of:

1. crcr's own history for the test id on this device;
2. else the median of the known tests of its file;
3. else a file-level seed from PyTorch's `test-times.json` divided over the file's
   tests planned here;
4. else the median of the known tests of its group (`runs.areas.group_for`);
5. else a default.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from runs.areas import TestItem, file_key, group_for

DEFAULT_TEST_SECONDS = 1.0


class Source(StrEnum):
    """How a test's duration was estimated, most trusted first."""

    HISTORY = "history"
    FILE_MEDIAN = "file_median"
    SEED = "seed"
    GROUP_MEDIAN = "group_median"
    DEFAULT = "default"


class Estimate(NamedTuple):
    seconds: float
    source: Source


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


def shared_data_dir() -> Path | None:
    """PyTorch CI's real data (`test-times.json`, webhooks…), or None where it is absent.

    The folder is `$CRCR_SHARED_DATA`, else `<repo>/../shared/data`; a clone alone has
    neither, and a variable naming a missing folder counts as absent too, so callers
    fall back to what the project ships or say the data is missing.
    """
    configured = os.environ.get("CRCR_SHARED_DATA")
    beside_the_checkout = Path(__file__).resolve().parents[2] / "shared" / "data"
    folder = Path(configured) if configured else beside_the_checkout
    return folder if folder.is_dir() else None


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
class Bucket:
    """The tests of one file in one group, in input order."""

    key: str
    group: str
    first: int  # input position of its first test, to keep shards in input order
    test_ids: list[str] = field(default_factory=list)


def bucket_items(items: Sequence[TestItem]) -> list[Bucket]:
    """The tests bucketed by file and config labels, buckets in order of first appearance."""
    buckets: dict[tuple[str, tuple[str, ...]], Bucket] = {}
    for position, item in enumerate(items):
        bucket = buckets.get((item.file, item.labels))
        if bucket is None:
            bucket = Bucket(file_key(item.file), group_for(item), position)
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
    return estimate_buckets(bucket_items(items), history, seeds, default_seconds)


def estimate_buckets(
    buckets: Sequence[Bucket],
    history: Mapping[str, float],
    seeds: Mapping[str, float] | None,
    default_seconds: float,
) -> dict[str, Estimate]:
    """Estimate the tests of prepared buckets, as `estimate_durations` does for items.

    1. Collect the known durations per file key and per group, and count the tests
       planned per file key.
    2. Give each bucket one fallback: its file's median, else its file's seed spread
       over the file's planned tests, else its group's median, else the default.
    3. A test with history keeps it; any other test takes its bucket's fallback.
    """
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
