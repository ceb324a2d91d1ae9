"""Use case A: enable an operator, and propose the tests that were waiting on it and now pass.

Steps of `enable_operator()`:
1. from the operator index, the tests that call any overload of the operator
   while the backend's capabilities lack it: they are waiting on it;
2. run exactly those on the device with the operator added to the capabilities
   (the reference device gets it through `CRCR_REFDEV_OPS`; OpInfo variants of it
   are named in `edits.ops.include` when the config declares `supported_ops`);
3. a waiting test whose every variant passes gets a `mandatory_success`
   proposal (stage "enable an operator"); the others are listed with why they
   still fail.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from runs.models import Backend
from selection import configwriter, opindex, pipeline, proposals, refine
from selection.capabilities import Capabilities, for_backend
from selection.models import OpUsage, Proposal, SelectionRun
from selection.progress import Progress, RunStatus, both

Key = tuple[str, str, str]


def waiting_on(packet: str, capabilities: Capabilities) -> dict[Key, list[str]]:
    """Tests that call the operator while the backend lacks it -> the OpInfo variants that do."""
    if packet in capabilities.ops:
        return {}
    waiting: dict[Key, list[str]] = {}
    for usage in OpUsage.objects.filter(op__startswith=f"{packet}.").order_by("file_path"):
        if capabilities.supports_op(usage.op):
            continue
        variants = waiting.setdefault((usage.file_path, usage.class_name, usage.test_name), [])
        if usage.opinfo and not opindex.is_module(usage.opinfo) and usage.opinfo not in variants:
            variants.append(usage.opinfo)
    return waiting


def enable_operator(
    backend: Backend,
    packet: str,
    tree_root: Path | str | None = None,
    progress: Progress | None = None,
    run: SelectionRun | None = None,
) -> SelectionRun:
    run = run or pipeline.start_run(backend, SelectionRun.Kind.ENABLE_OP, packet)
    if run.status == SelectionRun.Status.QUEUED and not run.claim():
        return run
    report = both(progress, RunStatus(run))
    try:
        with run.held():
            summary = _enable(backend, packet.removeprefix("aten::"), tree_root, report, run)
    except Exception as error:
        run.finish({}, error=f"{type(error).__name__}: {error}")
        raise
    run.finish(summary)
    return run


def _enable(
    backend: Backend, packet: str, tree_root: Path | str | None, report: Progress, run: SelectionRun
) -> dict[str, Any]:
    tree = Path(tree_root).resolve() if tree_root else pipeline.default_tree()
    parent = pipeline.current_config(backend)
    report("enable: probing the device's operators", 0, 1)
    before = for_backend(parent, backend.device_module)
    waiting = waiting_on(packet, before)
    if not waiting:
        return {"op": packet, "waiting": [], "passing": [], "failing": {}}
    declared = before.declared_ops
    decisions = [
        configwriter.Decision(
            *key,
            mode="mandatory_success",
            reason=f"waiting on aten::{packet}",
            edits={"ops": {"include": [{"name": n} for n in opinfos]}}
            if declared and opinfos
            else {},
        )
        for key, opinfos in sorted(waiting.items())
    ]
    text = configwriter.standalone(parent, decisions)
    with tempfile.TemporaryDirectory(prefix="crcr-enable-") as scratch:
        records = refine.run_on_device(
            tree, text, backend.device_module, before.with_op(packet), Path(scratch), report
        )
    observed = refine.observe(records, tree, list(waiting))
    passing, failing = [], {}
    results = []
    for decision in decisions:
        key = (decision.file_path, decision.class_name, decision.test_name)
        seen = observed.get(key)
        if seen is not None and seen.variants and not seen.failures and not seen.flaky:
            passing.append(key)
            results.append(
                pipeline.Decision(
                    key,
                    "mandatory_success",
                    f"passes on the device once aten::{packet} is supported ({seen.variants} variants)",
                    Proposal.Stage.ENABLE_OP,
                    decision.edits,
                    {"enabled_op": packet, "device": seen.as_dict()},
                )
            )
        else:
            first = seen.failures[0]["line"] if seen and seen.failures else "not run"
            failing["::".join(key)] = first
    counts = proposals.save_proposals(backend, run, results, parent)
    return {
        "op": packet,
        "waiting": ["::".join(k) for k in sorted(waiting)],
        "passing": ["::".join(k) for k in passing],
        "failing": failing,
        "proposals": counts,
        "recommendation": (
            f"add {packet} to global.supported_ops" if declared else "the device now runs it"
        ),
    }


def latest_runs(backend: Backend, packets: list[str]) -> dict[str, SelectionRun]:
    """The newest "enable an operator" run of each of `packets` on the backend, by packet
    (one query: PostgreSQL's DISTINCT ON the argument, newest first)."""
    runs = (
        SelectionRun.objects.filter(
            backend=backend, kind=SelectionRun.Kind.ENABLE_OP, argument__in=packets
        )
        .order_by("argument", "-created_at")
        .distinct("argument")
    )
    return {run.argument: run for run in runs}


def index_knows(packet: str) -> bool:
    return bool(opindex.tests_using(packet))
