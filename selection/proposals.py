"""Pending proposals in the review queue, from the decisions of a pipeline run.

`save_proposals` stores a decision only when neither the config nor the queue says it
already: an entry naming the test with the same mode and edits, a proposal a reviewer
approved or rejected with the same decision, or one taken on device evidence (a decision
without such evidence does not reopen it). A pending proposal is updated in place.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import transaction

from runs.models import Backend
from selection import configwriter
from selection.models import Proposal, SelectionRun

if TYPE_CHECKING:
    from selection.pipeline import Decision, Key


def explicit_entries(parent: str) -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
    """(file, Class::test) -> (mode, edits) of the entries that name one test literally."""
    from crcr_reuse.yaml_limits import safe_load

    data = safe_load(parent, "the parent config") or {}
    out: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for entry in (data.get("test_suite_config") or {}).get("files") or []:
        path = configwriter.file_key(str(entry.get("path", "")))
        for test in entry.get("tests") or []:
            for name in test.get("names") or []:
                out[(path, str(name))] = (test.get("mode", ""), test.get("edits") or {})
    return out


@transaction.atomic
def save_proposals(
    backend: Backend, run: SelectionRun | None, decisions: Iterable[Decision], parent: str
) -> dict[str, int]:
    """Pending proposals for decisions the config and the review queue do not hold yet."""
    explicit = explicit_entries(parent)
    existing: dict[Key, list[Proposal]] = {}
    for proposal in Proposal.objects.filter(backend=backend).exclude(
        status=Proposal.Status.REJECTED
    ):
        existing.setdefault(
            (proposal.file_path, proposal.class_name, proposal.test_name), []
        ).append(proposal)
    counts = {"created": 0, "updated": 0, "unchanged": 0}
    new: list[Proposal] = []
    for decision in decisions:
        path, cls, name = decision.key
        written = explicit.get((path, f"{cls}::{name}" if cls else name))
        if (
            written is not None
            and written[0] == decision.mode
            and _same_edits(written[1], decision.edits)
        ):
            counts["unchanged"] += 1
            continue
        held = existing.get(decision.key, [])
        if _outranked(decision, held):
            counts["unchanged"] += 1
            continue
        if any(
            p.status != Proposal.Status.PENDING
            and p.mode == decision.mode
            and _same_edits(p.edits, decision.edits)
            for p in held
        ):
            counts["unchanged"] += 1
            continue
        pending = next((p for p in held if p.status == Proposal.Status.PENDING), None)
        fields = {
            "mode": decision.mode,
            "edits": decision.edits,
            "reason": decision.reason[:500],
            "evidence": decision.evidence,
            "stage": decision.stage,
            "selection_run": run,
        }
        if pending is not None:
            # Conditional update: a reviewer who approved it meanwhile keeps their decision.
            updated = Proposal.objects.filter(pk=pending.pk, status=Proposal.Status.PENDING).update(
                **fields
            )
            counts["updated" if updated else "unchanged"] += 1
            continue
        new.append(
            Proposal(backend=backend, file_path=path, class_name=cls, test_name=name, **fields)
        )
    # In batches: a first selection over PyTorch's tree proposes tens of thousands.
    counts["created"] = len(Proposal.objects.bulk_create(new, batch_size=500))
    return counts


EXECUTION_STAGES = (Proposal.Stage.REFINE, Proposal.Stage.QUARANTINE, Proposal.Stage.ENABLE_OP)


def _outranked(decision: Decision, held: list[Proposal]) -> bool:
    """A decision without device evidence does not reopen one a reviewer took on device evidence."""
    if "device" in decision.evidence:
        return False
    return any(p.status != Proposal.Status.PENDING and p.stage in EXECUTION_STAGES for p in held)


def _same_edits(a: Any, b: Any) -> bool:
    return (a or {}) == (b or {})
