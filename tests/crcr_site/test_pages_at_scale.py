"""Pages at scale (issue 22): the review queue, a run page and a config page cost the same
number of queries with a little data as with much more, made in bulk, and still say what
is there. (The HUD's own test is in tests/runs/test_hud.py.) `bench/pages_at_scale.py`
times them at ten times that."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from crcr_site.lib.paging import COUNT_CAP
from crcr_site.lib.ranking import first_of_each
from runs import results
from runs.models import Failure, Run, Shard, TestResult, Trigger
from runs.models.runs import FAILURES_SHOWN
from selection import configwriter
from selection.models import ConfigVersion, Proposal
from selection.views.configpage import LINES_SHOWN
from selection.views.review import PAGE_SIZE
from tests.factories import make_backend, make_config, make_user

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
FAILING = ["failed", "error", "crashed", "timed_out"]
CATEGORIES = ["unsupported_op", "numerical_mismatch", "crash"]


def queries(client, url: str, **headers) -> tuple[int, str]:
    """The number of SQL queries a GET of `url` costs, and the page's text."""
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **headers)
    assert response.status_code in (200, 286)  # 286: a finished run's partial stops polling
    return len(captured), response.content.decode()


def proposals(backend, start: int, count: int) -> None:
    Proposal.objects.bulk_create(
        Proposal(
            backend=backend, file_path=f"test/test_file_{n % 20}.py", class_name=f"TestC{n % 7}",
            test_name=f"test_{n}", mode=Proposal.Mode.SKIP, reason=f"reason {n}",
            evidence={"unsupported_ops": ["lgamma.default"], "waiting_on": ["lgamma"]},
            stage=Proposal.Stage.CLASSIFY,
            status=Proposal.Status.APPROVED if n % 5 == 0 else Proposal.Status.PENDING,
        )
        for n in range(start, start + count)
    )  # fmt: skip


def test_the_review_queue_costs_the_same_queries_with_2000_proposals_as_with_40(client):
    backend = make_backend("acme")
    make_config(backend)
    client.force_login(make_user("rita", "reviewer"))
    queue = reverse("selection:proposal_list")
    urls = [
        queue,
        queue + "?backend=acme&status=pending&op=lgamma&page=2",
        queue + "?backend=acme&file=FILE_3.py&status=pending&op=lgamma&sort=newest&page=2",
    ]
    proposals(backend, 0, 60)
    few = [queries(client, url)[0] for url in urls]
    proposals(backend, 60, 2_000)
    many = [queries(client, url) for url in urls]
    assert [count for count, _ in many] == few
    # 1,648 pending proposals name lgamma: counted up to the cap, and said so.
    assert f"{COUNT_CAP}+ proposals match; page 2 of {COUNT_CAP // PAGE_SIZE}+" in many[1][1]
    assert f"Approve all {COUNT_CAP}+ matching" in many[1][1]
    # The file filter (a part of a path, in any case) matches test_file_3.py alone, newest
    # first: its 103 proposals, counted exactly.
    newest = re.findall(r'<a href="/review/[^"]+/">TestC\d::(test_\d+)</a>', many[2][1])
    numbers = [int(name.removeprefix("test_")) for name in newest]
    assert "103 proposals match; page 2 of 5" in many[2][1]
    assert numbers == sorted(numbers, reverse=True) and all(n % 20 == 3 for n in numbers)
    assert len(numbers) == 25 and numbers[0] == 2043 - 20 * 25


def test_a_page_past_the_counted_rows_is_read_and_a_page_past_the_end_is_the_last(client):
    backend = make_backend("acme")
    client.force_login(make_user("vera"))
    proposals(backend, 0, 1_100)
    url = reverse("selection:proposal_list") + "?backend=acme&sort=newest&page="
    _, body = queries(client, url + "41")  # past the counted rows: counted to its end
    assert "1025+ proposals match; page 41 of 41+" in body
    assert 'id="proposal-' in body and "TestC" in body
    _, body = queries(client, url + "45")  # past the end: the last page, counted exactly
    assert "1100 proposals match; page 44 of 44" in body
    assert body.count('class="proposal"') == 25


def test_a_page_far_past_the_cap_reads_no_more_rows_than_the_cap(client):
    backend = make_backend("acme")
    client.force_login(make_user("vera"))
    proposals(backend, 0, 1_100)
    url = reverse("selection:proposal_list") + "?backend=acme&sort=newest&page="
    for page in ("43", "400000", "99999999999999999999999"):
        with CaptureQueriesContext(connection) as captured:
            body = client.get(url + page).content.decode()
        limits = [int(n) for q in captured for n in re.findall(r"LIMIT (\d+)", q["sql"])]
        assert max(limits) <= COUNT_CAP + 1, (page, limits)
        assert ("page 43 of 43+" if page == "43" else "1100 proposals match; page 44 of 44") in body


def grow_run(run, first: int, tests: int, shards: int) -> None:
    """`tests` more tests in `shards` more shards: one in 10 fails (a failure classified
    for each, three categories), and one in 50 failed once and passed on its retry."""
    made = Shard.objects.bulk_create(
        Shard(run=run, index=first + n, test_ids=[f"t{first}_{n}_{k}" for k in range(tests // shards)],
              status="done")
        for n in range(shards)
    )  # fmt: skip
    rows = []
    for number in range(tests):
        shard, node = made[number % shards], f"test/test_big.py::TestBig::test_{first}_{number}"
        outcome = FAILING[number % 4] if number % 10 == 0 else "passed"
        retried = number % 50 == 5
        rows.append(TestResult(shard=shard, run=run, node_id=node, file_path="test/test_big.py",
                               test_name=f"test_{number}", outcome="failed" if retried else outcome,
                               message="AssertionError: mismatch\nsecond line"))  # fmt: skip
        if retried:
            rows.append(TestResult(shard=shard, run=run, node_id=node, attempt=2,
                                   file_path="test/test_big.py", test_name=f"test_{number}",
                                   outcome="passed"))  # fmt: skip
    results = TestResult.objects.bulk_create(rows, batch_size=2_000)
    Failure.objects.bulk_create(
        Failure(result=result, run=run, category=CATEGORIES[n % 3], verdict="regression",
                verdict_reason="passed in the last green run")
        for n, result in enumerate(r for r in results if r.outcome in FAILING)
    )  # fmt: skip


@pytest.fixture
def big_run():
    backend = make_backend("acme")
    config = make_config(backend)
    trigger = Trigger.objects.create(backend=backend, kind="nightly", pytorch_sha="a" * 40)
    return Run.objects.create(
        trigger=trigger, backend=backend, job_name="acme", backend_version="1",
        pytorch_sha="a" * 40, test_suite_sha="a" * 40, config_version=config, status="failed",
    )  # fmt: skip


def test_a_run_page_costs_the_same_queries_with_5000_results_and_lists_a_summary(client, big_run):
    client.force_login(make_user("vera"))
    url = reverse("runs:run_detail", args=[big_run.uuid])
    grow_run(big_run, 0, 100, 2)
    few = [queries(client, url)[0], queries(client, url, **HTMX)[0]]
    grow_run(big_run, 100, 5_000, 20)
    (count, body), (partial, _) = queries(client, url), queries(client, url, **HTMX)
    assert [count, partial] == few
    # 5,100 tests at their final outcome: the 102 retried ones passed on their second attempt.
    failed = TestResult.objects.filter(run=big_run, attempt=1, outcome__in=FAILING).count() - 102
    assert f"{5_100 - failed} passed, {failed} failed, 0 skipped of 5100" in " ".join(body.split())
    assert big_run.test_counts() == {"passed": 5_100 - failed, "failed": failed, "skipped": 0,
                                     "total": 5_100}  # fmt: skip
    listed = re.findall(
        r'<li><a href="[^"]+/log/\?test=[^"]+" title="its log"><code>test/test_big\.py::', body
    )
    assert len(listed) == 3 * FAILURES_SHOWN  # three groups, the first of each listed
    shown = Failure.objects.filter(run=big_run, category="crash").count()
    assert f"crash · regression ({shown})" in body
    assert f"… and {shown - FAILURES_SHOWN} more crash · regression failures" in body
    assert "<td>250</td>" in body  # a shard's test count, read without its list of ids
    # Finished, the run stores its counts (as `finish_if_done` does): the page reads them.
    big_run.summarise()
    big_run.save(update_fields=["test_summary", "failure_summary"])
    TestResult.objects.filter(run=big_run).update(outcome="skipped")  # a count would differ
    Failure.objects.filter(run=big_run, category="crash").update(category="other")  # and here
    # Four queries fewer: no count of results (for the page, for its trend), nor of
    # failures, nor a look for unexpected passes (it stored none).
    assert big_run.test_counts()["total"] == 5_100
    stored, body = queries(client, url)
    assert stored == count - 4 and f"{failed} failed, 0 skipped of 5100" in " ".join(body.split())
    assert f"crash · regression ({shown})" in body


def config_text(entries: int) -> str:
    decisions = [
        configwriter.Decision(f"test/test_file_{n % 50}.py", "TestBig", f"test_{n}",
                              "xfail" if n % 3 else "mandatory_success", f"reason {n}")
        for n in range(entries)
    ]  # fmt: skip
    return configwriter.standalone("", decisions)


def two_versions(backend, entries: int) -> ConfigVersion:
    """v1 of `entries` - 5 entries, and v2 of `entries` (its parent v1)."""
    first = make_config(backend, config_text(entries - 5))
    second = make_config(backend, config_text(entries))
    second.parent = first
    second.save(update_fields=["parent"])
    return second


def test_a_config_page_costs_the_same_queries_with_1000_entries_as_with_10(client):
    client.force_login(make_user("vera"))
    small, big = make_backend("small"), make_backend("big")
    two_versions(small, 10)
    version = two_versions(big, 1_000)
    few, _ = queries(client, reverse("selection:backendconfig_detail", args=["small"]))
    url = reverse("selection:backendconfig_detail", args=["big"])
    many, body = queries(client, url)
    assert many == few
    again, _ = queries(client, url)  # a version never changes: its text is not read again
    assert again < many
    # The text is shown 1,000 lines at a time, the diff from v1 in full.
    lines = version.yaml_text.count("\n")
    assert f"Lines 1–{LINES_SHOWN} of {lines}" in body
    assert f'id="L{LINES_SHOWN}"' in body and f'id="L{LINES_SHOWN + 1}"' not in body
    assert body.count('class="src add"') == 15  # five entries of three lines each
    later = re.search(r'<a href="([^"]+)">later lines', body)
    assert later is not None
    _, body = queries(client, url + later[1].replace("&amp;", "&"))
    assert f"Lines {LINES_SHOWN + 1}–{2 * LINES_SHOWN} of {lines}" in body
    assert f'id="L{LINES_SHOWN + 1}"' in body and "‹ earlier lines" in body


def test_a_finished_run_stores_its_counts_for_the_pages(big_run):
    Run.objects.filter(pk=big_run.pk).update(status="running")
    grow_run(big_run, 0, 100, 2)  # shards done, ten failing tests, two retried and passed
    Failure.objects.filter(run=big_run).delete()  # classified again as the run finishes
    finished = results.finish_if_done(big_run.pk)
    assert finished is not None and finished.status == "failed"
    big_run.refresh_from_db()
    # Tests 0, 10, … 90 fail (failed or crashed); 5 and 55 failed once, then passed.
    assert big_run.test_summary == {"passed": 90, "failed": 5, "crashed": 5}
    assert big_run.test_counts() == {"passed": 90, "failed": 10, "skipped": 0, "total": 100}
    # And its failures per category and verdict (5 and 55: flaky, passed on their retry).
    groups = Failure.objects.filter(run=big_run).values_list("category", "verdict")
    expected = sorted({group: list(groups).count(group) for group in groups}.items())
    assert big_run.failure_summary == [[c, v, n] for (c, v), n in expected]
    assert [v for _, v, _ in big_run.failure_summary].count("flaky") >= 1


def test_a_finished_runs_shards_and_failures_are_read_once_and_shown_the_same(client, big_run):
    client.force_login(make_user("vera"))
    Run.objects.filter(pk=big_run.pk).update(status="running")
    grow_run(big_run, 0, 100, 2)
    assert results.finish_if_done(big_run.pk) is not None
    url = reverse("runs:run_detail", args=[big_run.uuid])
    first, body = queries(client, url)
    # Finished, its shards and failures never change: the next views read neither.
    again, same = queries(client, url)
    assert again <= first - 2  # no shards, no failures (nor their ids, on SQLite)
    progress = body[body.index('<section id="progress"') :]
    assert same[same.index('<section id="progress"') :] == progress
    assert "<td>50</td>" in progress and "crash · regression (" in progress
    assert queries(client, url, **HTMX)[1].strip() == progress.split("</section>")[0] + "</section>"


@pytest.mark.parametrize("in_union", [True, False])
def test_the_first_failures_of_each_group_are_the_same_however_they_are_ranked(
    big_run, monkeypatch, in_union
):
    """PostgreSQL limits each group in a UNION; SQLite cannot, and ranks them in a window."""
    if in_union and not connection.features.supports_slicing_ordering_in_compound:
        pytest.skip("this database cannot limit each part of a UNION")
    grow_run(big_run, 0, 500, 5)
    monkeypatch.setattr(connection.features, "supports_slicing_ordering_in_compound", in_union)
    keys = [{"category": c, "verdict": "regression"} for c in CATEGORIES]
    found = first_of_each(big_run.failures.all(), keys, 4)
    expected = [
        pk
        for c in CATEGORIES
        for pk in big_run.failures.filter(category=c)
        .order_by("pk")
        .values_list("pk", flat=True)[:4]
    ]
    assert sorted(found) == sorted(expected) and len(found) == 12


def jobs_of_both_events(backend, start: int, count: int) -> None:
    """`count` finished runs over the last 80 days, every third from `start` (a multiple of 3)
    a pull request's, the others nightly, one in seven red, in ten jobs; one in fifty of
    them a flaky test's run."""
    from datetime import timedelta

    from django.utils import timezone

    from runs.models import Dispatch

    now, config = timezone.now(), backend.config_versions.first()
    dispatches = Dispatch.objects.bulk_create(
        Dispatch(backend=backend, delivery_id=f"d{n}", event_type="pull_request", raw_body="{}",
                 payload={}, verdict="accepted")
        for n in range(start, start + count, 3)
    )  # fmt: skip
    by_number = dict(zip(range(start, start + count, 3), dispatches, strict=True))
    triggers = Trigger.objects.bulk_create(
        Trigger(backend=backend, kind="dispatch" if n in by_number else "nightly",
                dispatch=by_number.get(n), pytorch_sha=f"{n:040x}")
        for n in range(start, start + count)
    )  # fmt: skip
    runs = Run.objects.bulk_create(
        Run(trigger=trigger, backend=backend, job_name=f"acme (config {n % 10})",
            backend_version="1", pytorch_sha=trigger.pytorch_sha,
            test_suite_sha=trigger.pytorch_sha, config_version=config,
            status="failed" if n % 7 == 0 else "passed",
            created_at=now - timedelta(hours=n % (80 * 24), minutes=5),
            started_at=now - timedelta(hours=n % (80 * 24)),
            finished_at=now - timedelta(hours=n % (80 * 24)) + timedelta(minutes=20))
        for n, trigger in zip(range(start, start + count), triggers, strict=True)
    )  # fmt: skip
    shards = Shard.objects.bulk_create(Shard(run=run, index=0, status="done") for run in runs[::50])
    results = TestResult.objects.bulk_create(
        TestResult(shard=shard, run=shard.run, node_id=f"test/test_f.py::TestF::test_{n % 30}",
                   file_path="test/test_f.py", class_name="TestF", test_name=f"test_{n % 30}",
                   outcome="failed")
        for n, shard in enumerate(shards)
    )  # fmt: skip
    Failure.objects.bulk_create(
        Failure(result=result, run=result.run, category="other", verdict="flaky")
        for result in results
    )


def test_the_summary_metrics_and_flaky_pages_cost_the_same_queries_with_3000_runs_as_with_30(
    client,
):
    backend = make_backend("acme")
    make_config(backend)
    client.force_login(make_user("vera"))
    urls = [
        reverse("runs:summary"),
        reverse("runs:summary") + "?event=nightly&days=90",
        reverse("runs:metrics") + "?days=90",
        reverse("runs:metrics") + "?days=7&backend=acme",
        reverse("selection:flaky_list") + "?days=90",
    ]
    jobs_of_both_events(backend, 0, 30)
    few = [queries(client, url)[0] for url in urls]
    jobs_of_both_events(backend, 30, 3_000)
    many = [queries(client, url) for url in urls]
    assert [count for count, _ in many] == few
    # Every job of the 90 days counted: 3,030 runs, a third of them pull requests'.
    totals = " ".join(re.sub(r"<[^>]+>", " ", many[2][1]).split())
    red = sum(1 for n in range(3_030) if n % 7 == 0)
    red_prs = sum(1 for n in range(0, 3_030, 3) if n % 7 == 0)
    assert f"Pull requests 1010 {1010 - red_prs} {red_prs}" in totals
    assert f"Nightly 2020 {2020 - (red - red_prs)} {red - red_prs}" in totals
    assert "30 flaky tests in the last 90 days." in " ".join(many[4][1].split())
