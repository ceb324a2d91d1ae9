"""Finish a run: classify its failures, give each a verdict, decide the run's status.

A shard's failures are classified when the shard is done (`shard_worker.store`), so its
HUD job reports its own verdicts; the run's end classifies whatever is left.
Steps, once every shard is done or failed:
1. per test, its attempts in order: the first failing attempt is classified by
   the rules (a crash or a hang by its outcome); a pass on a retry makes it flaky;
2. a verdict against the job's last green run (and PyTorch's disabled tests):
   regression, flaky, known or infra; one given when its shard ended is kept;
3. the run is red only with a regression; with no test at all it failed too;
   a shard lost to infrastructure without a regression makes it an error.
"""

from collections import defaultdict
from collections.abc import Collection
from functools import cache
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from runs import events
from runs.models import Failure, Run, Shard, TestResult
from runs.relay import outbox
from runs.triage import DisabledTests, LastGreen, classify, decide_verdict, load_disabled_tests

OUTCOME_CATEGORY: dict[str, str] = {"crashed": "crash", "timed_out": "timeout"}


@cache
def disabled_tests(path: str | None) -> DisabledTests | None:
    return load_disabled_tests(Path(path)) if path else None


def finish_if_done(run_id: int) -> Run | None:
    with transaction.atomic():
        # Concurrency guard: the last two shards may finish together; the row
        # lock makes exactly one of them finish the run.
        run = Run.objects.select_for_update().get(pk=run_id)
        if (
            run.is_finished
            or run.shards.exclude(status__in=(Shard.Status.DONE, Shard.Status.ERROR)).exists()
        ):
            return None
        failures = classify_failures(run)
        run.status = status_of(run, failures)
        run.finished_at = timezone.now()
        run.summarise()
        run.save(update_fields=["status", "finished_at", "test_summary", "failure_summary"])
        # The callbacks and the bundle request commit with the status: none is lost.
        outbox.run_finished(run)
        events.run_finished.send(Run, run=run)
    return run


def status_of(run: Run, failures: list[Failure]) -> str:
    if any(f.verdict == Failure.Verdict.REGRESSION for f in failures):
        return Run.Status.FAILED
    if run.shards.filter(status=Shard.Status.ERROR).exists():
        return Run.Status.ERROR
    if run.test_counts()["total"] == 0:
        return Run.Status.FAILED
    return Run.Status.PASSED


def last_green_outcomes(run: Run, node_ids: Collection[str]) -> dict[str, str] | None:
    """Final outcome of each of `node_ids` in the job's last green run (None when the job
    has none). A later attempt ran only some shards: the last green run is a first attempt."""
    green = (
        Run.objects.filter(
            job_name=run.job_name, backend=run.backend, status=Run.Status.PASSED, retry_of=None
        )
        .exclude(pk=run.pk)
        .order_by("-created_at")
        .first()
    )
    if green is None:
        return None
    if not node_ids:
        return {}
    final: dict[str, str] = {}
    rows = green.results.filter(node_id__in=list(node_ids)).order_by("attempt")
    for node_id, outcome in rows.values_list("node_id", "outcome"):
        final[node_id] = outcome
    return final


def classify_failures(run: Run, shard: Shard | None = None) -> list[Failure]:
    """Classify the failing tests of the run, or of one of its shards; store a verdict each.

    Steps:
    1. each test's attempts in order (only the shard's, when one is given);
    2. a Failure for each test with a failing attempt and none yet (`_failure`): a test
       classified already, when its shard ended, keeps the verdict its HUD job reported;
    3. stored with ignore_conflicts: a row already there for the test wins;
    4. the stored rows read back and returned: the verdicts that count, not unsaved
       duplicates of rows kept.
    """
    results = run.results.order_by("node_id", "attempt")
    stored = Failure.objects.filter(run=run).select_related("result")
    if shard is not None:
        results, stored = results.filter(shard=shard), stored.filter(result__shard=shard)
    classified = set(stored.values_list("result__node_id", flat=True))
    attempts: dict[str, list[TestResult]] = defaultdict(list)
    for result in results:
        if result.node_id not in classified:
            attempts[result.node_id].append(result)
    failing = {
        node_id: tries
        for node_id, tries in attempts.items()
        if any(t.outcome in TestResult.FAILING for t in tries)
    }
    green = last_green_outcomes(run, failing)
    disabled = disabled_tests(settings.CRCR_DISABLED_TESTS_FILE)
    failures = [_failure(run, tries, green, disabled) for tries in failing.values()]
    Failure.objects.bulk_create(failures, ignore_conflicts=True)
    return list(stored)


def _failure(
    run: Run, tries: list[TestResult], green: dict[str, str] | None, disabled: DisabledTests | None
) -> Failure:
    """One test's failure (unsaved): its first failing attempt classified, and a verdict."""
    first = next(t for t in tries if t.outcome in TestResult.FAILING)
    node_id = first.node_id
    found = classify(first.message)
    category = OUTCOME_CATEGORY.get(first.outcome, found.category)
    before = None if green is None else green.get(node_id)
    last_green = (
        LastGreen.NO_GREEN_RUN
        if green is None
        else LastGreen.ABSENT
        if before is None
        else LastGreen.FAILED
        if before in TestResult.FAILING
        else LastGreen.PASSED
    )
    _, device_class, generated = (node_id.split("::") + ["", ""])[:3]
    verdict = decide_verdict(
        category,
        last_green=last_green,
        passed_on_retry=tries[-1].outcome in TestResult.PASSING,
        disabled=disabled.lookup(generated, device_class) if disabled else None,
    )
    reason = verdict.reason + (f" ({verdict.issue_url})" if verdict.issue_url else "")
    return Failure(
        result=first,
        run=run,
        category=category,
        rule=(found.rule or "") if category == found.category else "",
        op_name=found.op or "",
        decisive_line=(found.line or "")[:2000],
        verdict=verdict.verdict,
        verdict_reason=reason,
    )
