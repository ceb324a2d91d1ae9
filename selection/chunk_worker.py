"""Run one chunk of a selection run on a device worker, storing its results as it goes.

Steps:
1. claim the chunk (`leases.claim`: queued, or running with a heartbeat gone silent: its
   worker died); losing the race ends the task;
2. keep what earlier attempts stored, and run only the rest: the capture with `only=` the
   generic tests without a stored line (the last one an attempt stored is run again: its
   variants may have been cut short), stage 4 with the node ids without a stored record;
3. while pytest runs, the heartbeat also stores what it has written so far (the capture's
   lines, the progress logs' records), so the next attempt after a kill loses at most a
   beat of work; a test that crashes the test process is pinned and recorded as crashed
   (`runs.crash_pinning`) or ends its file's capture there (`opindex.run_capture` starts
   a process again where a dead one stopped, while each gets further), never retried by
   the next attempt;
4. store the results and mark the chunk done (only while it still holds the claim), then
   `chunks.chunk_ended`: the last chunk of its phase moves the run on.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crcr_reuse.opcapture import read_lines
from crcr_reuse.outcomes import ReportError, canonical, read_progress
from django.db import close_old_connections
from django.db.models.functions import Now
from django.utils import timezone

from crcr_site.lib import leases
from selection import chunks, opindex, refine
from selection.capabilities import for_backend
from selection.models import SelectionChunk

Results = list[dict[str, Any]]


def execute(chunk_id: int) -> SelectionChunk | None:
    """Run a chunk end to end; None when another worker holds it or it has ended."""
    chunk = SelectionChunk.objects.select_related("run__backend").get(pk=chunk_id)
    if not leases.claim(chunk, SelectionChunk.Status.QUEUED, SelectionChunk.Status.RUNNING):
        return None
    work = chunk.run.summary.get("work") or {}
    capture = chunk.phase == SelectionChunk.Phase.CAPTURE
    kept = _kept_lines(chunk.results) if capture else list(chunk.results)
    with tempfile.TemporaryDirectory(prefix="crcr-chunk-") as scratch:
        folder = Path(scratch)
        written = _lines_written(folder) if capture else _records_written(folder / "shard")
        beat = _Flush(chunk, kept, written, capture)
        try:
            with leases.Heartbeat(beat):
                results, lost, processes = (
                    _capture(chunk, work, kept, folder)
                    if capture
                    else _device(chunk, work, kept, folder)
                )
        except Exception as error:
            close_old_connections()
            leases.release(chunk, SelectionChunk.Status.RUNNING, f"{type(error).__name__}: {error}")
            raise
    close_old_connections()
    if _store(chunk, kept + results, lost, processes, capture):
        chunks.chunk_ended(chunk)
    return chunk


def _file_tests(chunk: SelectionChunk) -> list[opindex.Key]:
    """Every generic test the capture chunks of the chunk's file list."""
    siblings = SelectionChunk.objects.filter(
        run=chunk.run_id, phase=chunk.phase, file_path=chunk.file_path
    )
    names = [test for tests in siblings.values_list("tests", flat=True) for test in tests]
    return [(path, cls, name) for path, cls, name in (test.split("::") for test in names)]


def _capture(
    chunk: SelectionChunk, work: dict[str, Any], kept: Results, folder: Path
) -> tuple[Results, bool, int]:
    """The chunk's generic tests under the operator capture (on the CPU), but those kept."""
    whole = (
        not kept
        and not SelectionChunk.objects.filter(
            run=chunk.run_id, phase=chunk.phase, file_path=chunk.file_path
        )
        .exclude(pk=chunk.pk)
        .exists()
    )
    done = _keys(kept)
    left = [tuple(test.split("::")) for test in chunk.tests if test not in done]
    if not whole and not left:
        return [], False, 0
    tree = Path(work["tree"])
    # A file that is one chunk runs whole, as the one-process capture runs it; of a file
    # cut in several, the first chunk also runs the tests its inventory does not list.
    only = None if whole else [(path, cls, name) for path, cls, name in left]
    known = _file_tests(chunk) if only is not None and chunk.ordinal == 0 else None
    lines, result = opindex.run_capture(tree, [chunk.file_path], folder, only=only, known=known)
    return lines, bool(result.lost_files), result.processes


def _device(
    chunk: SelectionChunk, work: dict[str, Any], kept: Results, folder: Path
) -> tuple[Results, bool, int]:
    """The chunk's node ids on the device, but those with a record kept."""
    stored = {canonical(record["node_id"]) for record in kept}
    ids = [node_id for node_id in chunk.tests if canonical(node_id) not in stored]
    if not ids:
        return [], False, 0
    backend = chunk.run.backend
    capabilities = for_backend(work["parent"], backend.device_module)
    pytest = refine.device_pytest(
        Path(work["tree"]), work["device_config"], backend.device_module, capabilities, folder
    )
    records = refine.run_ids(pytest, ids, folder / "shard")
    return [dataclasses.asdict(record) for record in records], False, 1


def _store(
    chunk: SelectionChunk, results: Results, lost: bool, processes: int, capture: bool
) -> bool:
    """Mark the chunk done with its results; False when its claim was taken over."""
    # Concurrency guard: only the attempt holding the claim (its claim count) stores; one
    # whose heartbeat went silent and was taken over leaves the chunk to its successor.
    return bool(
        SelectionChunk.objects.filter(
            pk=chunk.pk, status=SelectionChunk.Status.RUNNING, claims=chunk.claims
        ).update(
            status=SelectionChunk.Status.DONE,
            results=results,
            lost=lost,
            done=_done(chunk, results, capture),
            processes=chunk.processes + processes,
            finished_at=timezone.now(),
            heartbeat_at=Now(),
        )  # fmt: skip
    )


class _Flush:
    """Each beat: the claim's heartbeat, and the results written so far, stored."""

    def __init__(
        self, chunk: SelectionChunk, kept: Results, written: Callable[[], Results], capture: bool
    ) -> None:
        self.chunk, self.kept, self.written, self.capture = chunk, kept, written, capture

    def __call__(self) -> None:
        results = self.kept + self.written()
        SelectionChunk.objects.filter(
            pk=self.chunk.pk, status=SelectionChunk.Status.RUNNING, claims=self.chunk.claims
        ).update(heartbeat_at=Now(), results=results, done=_done(self.chunk, results, self.capture))


def _lines_written(folder: Path) -> Callable[[], Results]:
    return lambda: read_lines(folder / "capture.jsonl")


def _records_written(folder: Path) -> Callable[[], Results]:
    """The first outcome of each test in the progress logs so far (a retry's is not kept:
    the next attempt would lose it anyway, and the final store has every attempt)."""

    def read() -> Results:
        seen: dict[str, dict[str, Any]] = {}
        for log in sorted(folder.glob("*.progress.jsonl")):
            try:
                records = read_progress(log, ended=False).records
            except ReportError:
                continue  # the executor reports a broken log; this pass skips it
            for node_id, record in records.items():
                seen.setdefault(node_id, dataclasses.asdict(record))
        return list(seen.values())

    return read


def _keys(lines: Results) -> set[str]:
    return {f"{line['file']}::{line['class']}::{line['test']}" for line in lines if "file" in line}


def _kept_lines(lines: Results) -> Results:
    """What an earlier attempt captured, less its last test: its variants run one after
    another, and the attempt may have died before the last of them."""
    if not lines:
        return []
    last = _keys(lines[-1:])
    return [line for line in lines if not _keys([line]) & last]


def _done(chunk: SelectionChunk, results: Results, capture: bool) -> int:
    if capture:
        return min(len(_keys(results) & set(chunk.tests)) or len(_keys(results)), chunk.total)
    return len({canonical(record["node_id"]) for record in results})
