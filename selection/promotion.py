"""What a finished CI run proposes to the review queue (DESIGN §3, "xfail_strict").

Connected to `runs.events.run_finished` (`SelectionConfig.ready`), so it runs in the
transaction that gives the run its status, and commits with it:
- **promotion**: a test listed `xfail` or `xfail_strict` whose every variant passed in
  the run, at least one of them unexpectedly (XPASS; a strict one is stored as an
  unexpected pass, `crcr_reuse.outcomes.settled`, so it never turns the job red), is
  proposed as `mandatory_success`, the run as its evidence. A test with some variants
  still failing is not proposed: the run page lists its unexpected passes;
- **quarantine**: a test that passed only on a retry in this run and in at least
  `CRCR_QUARANTINE_FLAKY_RUNS` of the backend's last `CRCR_QUARANTINE_WINDOW` runs is
  proposed as a non-strict `xfail`, its history as evidence.
Both go through `proposals.save_proposals`: what the config already says, or what a
reviewer already decided the same way, is not proposed again. A proposal is advice: a
failure here is logged and rolled back to its savepoint, never the run's status.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.db import transaction

from runs.models import Failure, Run, TestResult
from selection import pipeline, proposals, refine
from selection.models import Proposal

logger = logging.getLogger(__name__)
XFAIL_MODES = ("xfail", "xfail_strict")
_PASSED = (TestResult.Outcome.PASSED, TestResult.Outcome.XPASSED)


def from_run(sender: Any = None, *, run: Run, **kwargs: Any) -> dict[str, int]:
    """Save the run's promotion and quarantine proposals; their counts."""
    try:
        with transaction.atomic():
            parent = pipeline.current_config(run.backend)
            decisions = promotions(run, parent) + quarantines(run)
            if not decisions:
                return {}
            return proposals.save_proposals(run.backend, None, decisions, parent)
    except Exception:
        logger.exception("proposals from run %s not saved", run.uuid)
        return {}


def promotions(run: Run, parent: str) -> list[pipeline.Decision]:
    """A decision to promote each xfail-listed test that passed in every variant; `parent`
    is the backend's current config, whose literal entry's edits a promotion keeps."""
    passed = run.results.filter(outcome=TestResult.Outcome.XPASSED)
    names = set(passed.values_list("test_name", flat=True).distinct())
    if not names:
        return []
    final: dict[str, tuple[pipeline.Key, str, str]] = {}
    rows = run.results.filter(test_name__in=names).order_by("attempt")
    for node_id, path, cls, name, outcome, mode in rows.values_list(
        "node_id", "file_path", "class_name", "test_name", "outcome", "mode"
    ):
        final[node_id] = ((path, cls, name), outcome, mode)
    variants: dict[pipeline.Key, list[tuple[str, str]]] = defaultdict(list)
    for key, outcome, mode in final.values():
        variants[key].append((outcome, mode))
    explicit = proposals.explicit_entries(parent)
    decisions = []
    for key, seen in sorted(variants.items()):
        outcomes = [outcome for outcome, _ in seen]
        listed = {mode for _, mode in seen if mode in XFAIL_MODES}
        unexpected = outcomes.count(TestResult.Outcome.XPASSED)
        if not listed or not unexpected or any(o not in _PASSED for o in outcomes):
            continue
        path, cls, name = key
        written = explicit.get((path, f"{cls}::{name}" if cls else name))
        mode = " and ".join(sorted(listed))
        decisions.append(
            pipeline.Decision(
                key=key,
                mode=Proposal.Mode.MANDATORY_SUCCESS,
                reason=f"passed on the device in CI run {run.job_name}: "
                f"{unexpected} of {len(outcomes)} variant(s) passed though listed {mode}",
                stage=Proposal.Stage.PROMOTE,
                edits=dict(written[1]) if written else {},
                evidence={
                    "ci_run": {
                        "run": str(run.uuid),
                        "job": run.job_name,
                        "listed": mode,
                        "variants": len(outcomes),
                        "unexpected_passes": unexpected,
                    }
                },
            )
        )
    return decisions


def quarantines(run: Run) -> list[pipeline.Decision]:
    """A decision to quarantine each test of the run that is flaky often enough."""
    flaky = set(
        Failure.objects.filter(run=run, verdict=Failure.Verdict.FLAKY).values_list(
            "result__file_path", "result__class_name", "result__test_name"
        )
    )
    if not flaky:
        return []
    window = settings.CRCR_QUARANTINE_WINDOW
    history = refine.flaky_history(run.backend_id, flaky, runs=window)
    return [
        pipeline.Decision(
            key=key,
            mode=Proposal.Mode.XFAIL,
            reason=f"flaky in {len(runs)} of the backend's last {window} runs "
            "(failed, then passed on a retry): quarantined",
            stage=Proposal.Stage.QUARANTINE,
            evidence={"flaky_history": runs},
        )
        for key, runs in sorted(history.items())
        if len(runs) >= settings.CRCR_QUARANTINE_FLAKY_RUNS
    ]
