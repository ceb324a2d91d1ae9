"""A selection run spread over the `device` queue's workers, a chunk of tests per task.

Each step is a `run_selection` task that claims the run (`advance`); no task waits for
another (a one-slot worker would wait for itself):
1. inventory and stage 1 (`pipeline.prepare`), then capture chunks: per file that must
   run (`opindex.same_text`: a renamed copy stands for the others), its generic tests cut
   into chunks of about CRCR_SELECTION_CHUNK variants (estimated from the inventory);
2. the run waits (status `waiting`) while one `run_chunk` task per chunk runs on any
   worker (`chunk_worker`); the chunk that ends its phase last queues the run again
   (`chunk_ended`, a conditional update: of two chunks ending at once one wins);
3. the index from every chunk's lines (`opindex.record`), stage 3 (`pipeline.classify`),
   the device's collection of the config stage 4 runs (`refine.collect`), then device
   chunks: per file, its node ids cut into chunks of CRCR_SELECTION_CHUNK; the run waits;
4. the corrections from every chunk's records (`pipeline.correct`), the proposals and
   the run's summary, as the one-process path (`pipeline.run_for_backend`) ends.
What a step leaves to the next is kept in the run's summary under `work` until it ends.
A step whose worker died is taken over by the lease sweep, like a chunk (`tasks`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from crcr_reuse.outcomes import TestRecord
from django.conf import settings
from django.db import transaction
from django.db.models import Q

from crcr_site.lib import enqueue, leases
from runs.models import Backend
from selection import opindex, pipeline, proposals, refine, scope
from selection.capabilities import for_backend
from selection.models import InventorySnapshot, SelectionChunk, SelectionRun, UpstreamTest
from selection.progress import Progress, RunStatus

Key = tuple[str, str, str]
Work = dict[str, Any]


def claim(run: SelectionRun) -> bool:
    """A queued step of the run, or one whose worker died; its first claim starts the run."""
    if run.started_at is None:
        return run.claim()
    return leases.claim(run, SelectionRun.Status.QUEUED, SelectionRun.Status.RUNNING)


def advance(run: SelectionRun) -> None:
    """Do the run's next step (the run is claimed): queue its chunks, or finish it."""
    report = RunStatus(run)
    try:
        with run.held():
            sent = _step(run, run.summary.get("work") or {}, report)
    except Exception as error:
        run.finish({}, error=f"{type(error).__name__}: {error}")
        raise
    from selection.tasks import run_chunk

    for chunk_id in sent:  # after the claim's end: an in-process chunk may finish the run
        enqueue.send(run_chunk, chunk_id)


def _step(run: SelectionRun, work: Work, report: Progress) -> list[int]:
    backend = run.backend
    phase = work.get("phase")
    if phase is None:
        work = _start(run, backend, report)
        chunks = _capture_chunks(run, work)
        if chunks:
            return _wait(run, work, chunks, "operator index: capture chunks")
        phase = "capture"
    if phase == "capture":
        work = _classify(run, backend, work, report)
        chunks = _device_chunks(run, work, report)
        if chunks:
            return _wait(run, work, chunks, "stage 4: device chunks")
    _finish(run, backend, work, report)
    return []


def _start(run: SelectionRun, backend: Backend, report: Progress) -> Work:
    """Step 1: inventory and stage 1; which files run under the capture."""
    lap = pipeline.Laps()
    timings = lap.seconds
    prepared = pipeline.prepare(backend, run, None, run.pytorch_sha or None, report, lap)
    groups = opindex.same_text(prepared.tree, prepared.coarse.included)
    return {
        "phase": "capture", "tree": str(prepared.tree), "sha": prepared.sha,
        "coarse": prepared.coarse.as_dict(), "groups": groups, "seconds": timings,
        "since": time.time(),
    }  # fmt: skip


def _capture_chunks(run: SelectionRun, work: Work) -> list[SelectionChunk]:
    """Per file that runs, its generic tests in chunks of about CRCR_SELECTION_CHUNK variants."""
    snapshot = InventorySnapshot.objects.get(pytorch_sha=work["sha"])
    tests = UpstreamTest.objects.filter(file__snapshot=snapshot, file__path__in=work["groups"])
    per_file: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for test in tests.select_related("file").order_by("file__path", "line", "pk"):
        per_file[test.file.path].append(("::".join(test.key), estimate(test)))
    chunks = []
    for path in work["groups"]:
        # A file the inventory found no test in still runs: the capture may see some.
        for ordinal, part in enumerate(_cut(per_file[path]) or [[]]):
            chunks.append(_chunk(run, SelectionChunk.Phase.CAPTURE, path, ordinal, part))
    return chunks


def estimate(test: UpstreamTest) -> int:
    """The variants a generic test generates, from its source: OpInfos × modules × dtypes,
    a database the decorator names (`@modules(module_db)`, `@ops(binary_ufuncs)`: the
    source holds the name, not the entries) counting its entries."""
    ops, modules = (sum(_entries(name) for name in names) for names in (test.ops, test.modules))
    return max(1, ops) * max(1, modules) * max(1, len(test.dtypes))


# Where torch keeps the OpInfo and ModuleInfo lists tests name (op_db, unary_ufuncs,
# module_db, ...).
DATABASES = (
    "torch.testing._internal.common_methods_invocations",
    "torch.testing._internal.common_modules",
)


@functools.cache
def _entries(name: str) -> int:
    """How many entries a name stands for: a torch database's length, else one."""
    if not name.endswith(("_db", "ufuncs", "_ops", "_refs")):
        return 1
    for module in DATABASES:
        found = getattr(importlib.import_module(module), name, None)
        if isinstance(found, (list, tuple)):
            return len(found)
    return 1


def _cut(tests: list[tuple[str, int]]) -> list[list[str]]:
    """Consecutive runs of tests whose variants add up to about CRCR_SELECTION_CHUNK."""
    size = settings.CRCR_SELECTION_CHUNK
    parts: list[list[str]] = []
    weight = size
    for name, variants in tests:
        if weight + variants > size and weight > 0:
            parts.append([])
            weight = 0
        parts[-1].append(name)
        weight += variants
    return parts


def _chunk(
    run: SelectionRun, phase: str, path: str, ordinal: int, tests: list[str]
) -> SelectionChunk:
    return SelectionChunk(
        run=run, phase=phase, file_path=path, ordinal=ordinal, tests=tests, total=len(tests)
    )


def _wait(run: SelectionRun, work: Work, chunks: list[SelectionChunk], stage: str) -> list[int]:
    """Store the chunks and leave the run waiting for them; their ids, to send."""
    with transaction.atomic():
        made = SelectionChunk.objects.bulk_create(chunks)
        # Concurrency guard: only the worker holding the step parks the run; its claims
        # start again, so each step has CRCR_CLAIM_ATTEMPTS of its own.
        SelectionRun.objects.filter(pk=run.pk, status=SelectionRun.Status.RUNNING).update(
            status=SelectionRun.Status.WAITING, summary={"work": work}, claims=0,
            last_failure="", stage=stage, done=0, total=len(made),
        )  # fmt: skip
    return [chunk.pk for chunk in made]


def _classify(run: SelectionRun, backend: Backend, work: Work, report: Progress) -> Work:
    """Step 3: the index from the capture chunks, then stage 3."""
    prepared = _prepared(work)
    capture = SelectionChunk.objects.filter(run=run, phase=SelectionChunk.Phase.CAPTURE)
    lines = [line for chunk in capture for line in chunk.results]
    # A file whose capture process died, or whose chunk was given up, keeps its old rows.
    lost = {c.file_path for c in capture if c.lost or c.status == SelectionChunk.Status.FAILED}
    result = opindex.CaptureResult(
        processes=sum(chunk.processes for chunk in capture), lost_files=sorted(lost)
    )
    report("operator index: storing what the chunks captured", 0, 1)
    opindex.record(lines, result, prepared.coarse.included, work["groups"])
    work["capture"] = dataclasses.asdict(result)
    _lap(work, "operator index")
    parent, capabilities, decisions = pipeline.classify(backend, prepared, report)
    _lap(work, "stage 3")
    work.update(phase="device", parent=parent, capabilities=capabilities.summary())
    work["decisions"] = [dataclasses.asdict(decision) for decision in decisions.values()]
    return work


def _device_chunks(run: SelectionRun, work: Work, report: Progress) -> list[SelectionChunk]:
    """The node ids stage 4 runs, collected on the device, per file in chunks."""
    decisions = _decisions(work)
    text = pipeline.device_config(decisions, work["parent"])
    if text is None:
        return []
    report("stage 4: collecting the proposed tests on the device", 0, 1)
    capabilities = for_backend(work["parent"], run.backend.device_module)
    with tempfile.TemporaryDirectory(prefix="crcr-chunks-") as folder:
        pytest = refine.device_pytest(
            Path(work["tree"]), text, run.backend.device_module, capabilities, Path(folder)
        )
        ids, broken = refine.collect(pytest)
    work.update(device_config=text, broken=[dataclasses.asdict(r) for r in broken])
    per_file: dict[str, list[str]] = defaultdict(list)
    for node_id in ids:
        per_file[node_id.split("::", 1)[0]].append(node_id)
    size = settings.CRCR_SELECTION_CHUNK
    return [
        _chunk(run, SelectionChunk.Phase.DEVICE, path, n // size, node_ids[n : n + size])
        for path, node_ids in sorted(per_file.items())
        for n in range(0, len(node_ids), size)
    ]


def _finish(run: SelectionRun, backend: Backend, work: Work, report: Progress) -> None:
    """Step 4: the corrections from the device chunks, the proposals, the summary."""
    prepared = _prepared(work)
    decisions = _decisions(work)
    device = SelectionChunk.objects.filter(run=run, phase=SelectionChunk.Phase.DEVICE)
    device_summary: dict[str, Any] = {"ran": 0}
    if "device_config" in work:
        records = [TestRecord(**r) for r in work["broken"]]
        records += [TestRecord(**r) for chunk in device for r in chunk.results]
        device_summary = pipeline.correct(decisions, records, prepared.tree, backend)
        device_summary["chunks"] = device.count()
        device_summary["lost_chunks"] = device.filter(status=SelectionChunk.Status.FAILED).count()
    _lap(work, "stage 4")
    report("saving proposals", 0, 1)
    counts = proposals.save_proposals(backend, run, decisions.values(), work["parent"])
    report("done", 1, 1)
    capture = opindex.CaptureResult(**work["capture"])
    said = work["capabilities"]
    run.finish(
        pipeline.summary(
            prepared, capture, said, device_summary, counts, decisions, work["seconds"]
        )
    )


def chunk_ended(chunk: SelectionChunk) -> None:
    """A chunk ended (done, or given up): count it; the last of its phase queues the run."""
    run_id = chunk.run_id
    of_phase = SelectionChunk.objects.filter(run_id=run_id, phase=chunk.phase)
    ended = of_phase.filter(status__in=SelectionChunk.FINISHED).count()
    waiting = SelectionRun.objects.filter(pk=run_id, status=SelectionRun.Status.WAITING)
    waiting.update(done=ended)
    if of_phase.unfinished().exists():
        return
    # Concurrency guard: each chunk marks itself ended before it looks (autocommit), so
    # the last of two ending at once sees both; of two that see none left, one wins.
    if waiting.update(status=SelectionRun.Status.QUEUED):
        from selection.tasks import run_selection

        enqueue.send(run_selection, run_id)


def stalled() -> list[int]:
    """Waiting runs with no chunk left to end (the last one's worker died before it
    queued the run): queued again; their ids, for the sweep to send."""
    left = SelectionChunk.objects.exclude(status__in=SelectionChunk.FINISHED)
    runs = SelectionRun.objects.filter(status=SelectionRun.Status.WAITING).exclude(
        Q(pk__in=left.values("run_id"))
    )
    return [
        pk
        for pk in runs.values_list("pk", flat=True)
        if SelectionRun.objects.filter(pk=pk, status=SelectionRun.Status.WAITING).update(
            status=SelectionRun.Status.QUEUED
        )
    ]


def give_up(chunk: SelectionChunk, reason: str) -> None:
    """A chunk whose attempts are spent ends failed: its tests go without results."""
    from django.utils import timezone

    ended = SelectionChunk.objects.filter(pk=chunk.pk).exclude(status__in=SelectionChunk.FINISHED)
    if ended.update(status=SelectionChunk.Status.FAILED, error=reason, finished_at=timezone.now()):
        chunk_ended(chunk)


# -- the work between steps ---------------------------------------------------------------------


def _prepared(work: Work) -> pipeline.Prepared:
    coarse = work["coarse"]
    excluded: dict[Key, str] = {}
    for test, reason in coarse["excluded_tests"].items():
        path, cls, name = test.split("::")
        excluded[(path, cls, name)] = reason
    return pipeline.Prepared(
        Path(work["tree"]),
        work["sha"],
        InventorySnapshot.objects.get(pytorch_sha=work["sha"]),
        scope.CoarseResult(coarse["included"], coarse["excluded"], excluded),
    )


def _decisions(work: Work) -> dict[Key, pipeline.Decision]:
    decisions = [pipeline.Decision(**dict(d, key=tuple(d["key"]))) for d in work["decisions"]]
    return {d.key: d for d in decisions}


def _lap(work: Work, stage: str) -> None:
    """The wall time since the last lap (of whichever worker): the chunks' time included."""
    now = time.time()
    work["seconds"][stage] = round(now - work["since"], 2)
    work["since"] = now
