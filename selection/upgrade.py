"""Use case B: upgrade to PyTorch SHA Y, classifying only what changed.

Steps of `upgrade()`:
1. inventory the new tree (incremental: files whose content did not change are
   copied from the old snapshot, not parsed or embedded again);
2. diff the old and new snapshots by per-test content hash: added, changed, removed;
3. stage 1 on the backend's profile, applied to the files the diff touches;
4. capture only the added and changed tests, classify them (stage 3) and run
   them on the device (stage 4);
5. proposals for them, and the config entries whose tests disappeared.
The cost follows the diff: the unchanged tests are neither parsed, captured,
classified nor run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from runs.models import Backend
from selection import inventory, opindex, pipeline, proposals
from selection.capabilities import for_backend
from selection.models import InventorySnapshot, Proposal, SelectionRun
from selection.progress import Progress, RunStatus, both

Key = tuple[str, str, str]


class UpgradeError(Exception):
    pass


def upgrade(
    backend: Backend,
    new_sha: str,
    tree_root: Path | str,
    old_sha: str | None = None,
    progress: Progress | None = None,
    run: SelectionRun | None = None,
    device: bool = True,
) -> SelectionRun:
    run = run or pipeline.start_run(backend, SelectionRun.Kind.UPGRADE, new_sha)
    if run.status == SelectionRun.Status.QUEUED and not run.claim():
        return run
    report = both(progress, RunStatus(run))
    try:
        with run.held():
            summary = _upgrade(
                backend, new_sha, Path(tree_root).resolve(), old_sha, report, run, device
            )
    except Exception as error:
        run.finish({}, error=f"{type(error).__name__}: {error}")
        raise
    run.finish(summary)
    return run


def previous_snapshot(new_sha: str, old_sha: str | None) -> InventorySnapshot:
    found = (
        InventorySnapshot.objects.filter(pytorch_sha=old_sha).first()
        if old_sha
        else InventorySnapshot.objects.exclude(pytorch_sha=new_sha).order_by("-created_at").first()
    )
    if found is None:
        raise UpgradeError(
            f"no inventory of {old_sha or 'an earlier SHA'} to compare with: run `select` first"
        )
    return found


def _upgrade(
    backend: Backend,
    new_sha: str,
    tree: Path,
    old_sha: str | None,
    report: Progress,
    run: SelectionRun,
    device: bool,
) -> dict[str, Any]:
    started = time.monotonic()
    old = previous_snapshot(new_sha, old_sha)
    SelectionRun.objects.filter(pk=run.pk).update(pytorch_sha=new_sha)
    new = inventory.scan(tree, new_sha, report)
    changes = inventory.diff(old, new)
    coarse = pipeline.stage1(new, backend)
    included = set(coarse.included)
    keys = [k for k in changes.to_classify if k[0] in included]
    files = sorted({k[0] for k in keys})
    capture = opindex.capture(tree, files, progress=report, only=keys) if keys else None
    parent = pipeline.current_config(backend)
    decisions: dict[Key, pipeline.Decision] = {}
    if keys:
        capabilities = for_backend(parent, backend.device_module)
        evidence = pipeline.evidence_for(new, [k for k in keys if k not in coarse.excluded_tests])
        decisions = pipeline.stage3(evidence, capabilities, progress=report)
        for key in keys:
            if key in coarse.excluded_tests:
                reason = coarse.excluded_tests[key]
                decisions[key] = pipeline.Decision(key, "skip", reason, Proposal.Stage.COARSE)
        if device:
            pipeline.stage4(decisions, backend, tree, capabilities, parent, report)
    for decision in decisions.values():
        if decision.stage == Proposal.Stage.CLASSIFY:
            decision.stage = Proposal.Stage.UPGRADE
        decision.evidence["upgrade"] = {
            "from": old.pytorch_sha,
            "to": new_sha,
            "change": "added" if decision.key in set(changes.added) else "changed",
        }
    counts = proposals.save_proposals(backend, run, decisions.values(), parent)
    report("done", 1, 1)
    return {
        "from": old.pytorch_sha,
        "to": new_sha,
        "inventory": new.stats,
        "diff": changes.as_dict(),
        "classified": len(decisions),
        "captured_processes": capture.processes if capture else 0,
        "captured": {"tests": capture.tests, "variants": capture.variants} if capture else {},
        "removed_entries": removed_entries(parent, changes.removed, new),
        "proposals": counts,
        "decisions": pipeline.decisions_summary(decisions.values()),
        "seconds": round(time.monotonic() - started, 2),
    }


def removed_entries(
    parent: str, removed: list[Key], new: InventorySnapshot
) -> list[dict[str, str]]:
    """Config entries naming a test that is gone from the new tree."""
    gone = {(path, f"{cls}::{name}" if cls else name) for path, cls, name in removed}
    present = {(path, f"{cls}::{name}" if cls else name) for path, cls, name in new.test_hashes()}
    out = []
    for (path, name), (mode, _) in proposals.explicit_entries(parent).items():
        if (path, name) in gone or (
            any(p == path for p, _ in present) and (path, name) not in present and "::" in name
        ):
            out.append({"file": path, "name": name, "mode": mode})
    return out
