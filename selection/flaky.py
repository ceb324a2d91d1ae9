"""Flaky tests: per backend, the tests that failed and then passed on a retry in CI runs of
a window, with the quarantine each has been proposed.

What counts (`runs.results`): a test whose first failing attempt in a run was followed by
a passing one gets a `Failure` with the verdict `flaky`; never a regression, it never turns
the job red. A finished run proposes a non-strict `xfail` for a test flaky in at least
`CRCR_QUARANTINE_FLAKY_RUNS` of the backend's last `CRCR_QUARANTINE_WINDOW` runs
(`selection.promotion.quarantines`); the page shows that proposal beside the test. Two
queries whatever the number of failures: the flaky tests grouped and counted, the most
often flaky first, `SHOWN` of them; then the quarantine proposals of those tests.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Max, Min, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from runs.models import Failure
from selection.models import Proposal

WINDOWS = (1, 7, 30, 90)  # days, as the summary's
SHOWN = 200


@dataclass(slots=True)
class FlakyTest:
    backend: str
    file_path: str
    class_name: str
    test_name: str
    runs: int  # the runs it was flaky in
    variants: int  # its device-instantiated ids that were
    last_seen: datetime
    example: str  # one of those ids
    proposals: list[Proposal] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.class_name}::{self.test_name}" if self.class_name else self.test_name


def listed(
    days: int, backend: str = "", now: datetime | None = None
) -> tuple[list[FlakyTest], int]:
    """The flaky tests of runs begun in the last `days` days (of one backend's runs when
    `backend` is a slug), the most often flaky first: the first `SHOWN`, and how many."""
    since = (now or timezone.now()) - timedelta(days=days)
    failures = Failure.objects.annotate(
        began=Coalesce("run__started_at", "run__created_at")
    ).filter(verdict=Failure.Verdict.FLAKY, began__gte=since)
    if backend:
        failures = failures.filter(run__backend__slug=backend)
    key = ("run__backend__slug", "result__file_path", "result__class_name", "result__test_name")
    grouped = failures.values(*key).annotate(
        runs=Count("run", distinct=True),
        variants=Count("result__node_id", distinct=True),
        last_seen=Max("began"),
        example=Min("result__node_id"),
    )
    count = grouped.count()
    tests = [
        FlakyTest(
            backend=values["run__backend__slug"], file_path=values["result__file_path"],
            class_name=values["result__class_name"], test_name=values["result__test_name"],
            runs=values["runs"], variants=values["variants"], last_seen=values["last_seen"],
            example=values["example"],
        )
        for values in grouped.order_by("-runs", "-last_seen", *key)[:SHOWN]
    ]  # fmt: skip
    _attach_proposals(tests)
    return tests, count


def _attach_proposals(tests: list[FlakyTest]) -> None:
    """Each test's quarantine proposals, newest first, in one query."""
    if not tests:
        return
    wanted = Q()
    for test in tests:
        wanted |= Q(backend__slug=test.backend, file_path=test.file_path,
                    class_name=test.class_name, test_name=test.test_name)  # fmt: skip
    by_key = {(t.backend, t.file_path, t.class_name, t.test_name): t for t in tests}
    found = (
        Proposal.objects.filter(wanted, stage=Proposal.Stage.QUARANTINE)
        .select_related("backend")
        .only("uuid", "mode", "status", "reason", "created_at", "backend__slug", "file_path",
              "class_name", "test_name")
        .order_by("-created_at")
    )  # fmt: skip
    for proposal in found:
        key = (proposal.backend.slug, proposal.file_path, proposal.class_name, proposal.test_name)
        by_key[key].proposals.append(proposal)
