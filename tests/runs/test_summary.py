"""The summary, metrics and flaky tests pages (issue 35, item 3): per backend and job, the
figures of its pull requests' and nightly jobs, as the demo leaves them (a merged PR's run
of the job `reference` and a nightly run of the same job), each read as a person reads it."""

import re
from datetime import timedelta
from html import unescape

import pytest
from django.utils import timezone

from runs.models import Failure, Run, Shard, TestResult
from tests.factories import (
    make_backend,
    make_config,
    make_nightly_run,
    make_pr_run,
    make_proposal,
    make_user,
)

pytestmark = pytest.mark.django_db

FLAKY_ID = "test/test_plain_reuse.py::TestFlaky::test_flaky_counter"
# (status, seconds queued, seconds running, hours ago) of the demo backend's PR jobs: the
# demo's merged PR (red: its planted faults) the newest, then three earlier PRs.
PR_JOBS = [
    (Run.Status.FAILED, 30, 90, 1),
    (Run.Status.PASSED, 10, 50, 26),
    (Run.Status.PASSED, 20, 70, 50),
    (Run.Status.TIMED_OUT, 60, 150, 74),
]


def timed(run: Run, queued: int, ran: int) -> Run:
    """The run created `queued` seconds before it started and ended `ran` seconds after."""
    Run.objects.filter(pk=run.pk).update(
        created_at=run.started_at - timedelta(seconds=queued),
        finished_at=run.started_at + timedelta(seconds=ran),
    )
    run.refresh_from_db()
    return run


def demo_shaped() -> dict[str, Run]:
    """The demo's backend (reporting to a relay: L2) and its job `reference`: four PR jobs
    (PR_JOBS) and the nightly of the newest PR's commit, green, queued 10 s, run 80 s."""
    backend = make_backend("reference", relay_url="http://127.0.0.1:9/github/callback")
    make_config(backend)
    now = timezone.now()
    runs = {}
    # Made oldest first, as runs are: the last made is the newest.
    for n, (status, queued, ran, hours) in reversed(list(enumerate(PR_JOBS))):
        run = make_pr_run(backend, status, "reference", now - timedelta(hours=hours))
        runs[f"pr{n}"] = timed(run, queued, ran)
    nightly = make_nightly_run(backend, Run.Status.PASSED, "reference", now - timedelta(hours=1))
    runs["nightly"] = timed(nightly, 10, 80)
    return runs


def flaky_in(run: Run, node_id: str = FLAKY_ID) -> Failure:
    """The test failed in `run`, then passed on its retry: a flaky failure."""
    shard, _ = Shard.objects.get_or_create(run=run, index=0, defaults={"status": "done"})
    path, cls, name = node_id.split("::")
    tries = [
        TestResult.objects.create(shard=shard, run=run, node_id=node_id, file_path=path,
                                  class_name=cls, test_name=name, attempt=attempt,
                                  outcome=outcome, message="AssertionError: attempt 1")
        for attempt, outcome in ((1, "failed"), (2, "passed"))
    ]  # fmt: skip
    return Failure.objects.create(result=tries[0], run=run, category="other", verdict="flaky")


def words(html: str) -> str:
    """The page's text as a person reads it: tags dropped, spaces collapsed."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def get(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def viewer(client):
    client.force_login(make_user("vera"))
    return client


def test_the_pr_tab_shows_each_figure_of_the_demo_job_over_7_days(viewer):
    runs = demo_shaped()

    page = get(viewer, "/summary/")

    # Pass rate, success, failures, timed out, total, average duration (creation to end),
    # queue (creation to start) and execution (start to end), timeout rate, last run.
    figures = "50.0 % 2 2 1 4 2 min 00 s 30 s 1 min 30 s 25.0 %"
    assert f"reference all jobs L2 {figures}" in words(page)
    assert f"reference {figures} 1 hour ago" in words(page)
    assert f'href="/runs/{runs["pr0"].uuid}/"' in page  # the last run, the demo's PR
    assert 'aria-current="page">Pull requests</a>' in page
    assert 'aria-current="page">7 d</a>' in page


def test_the_nightly_tab_shows_the_nightly_run_alone(viewer):
    runs = demo_shaped()

    page = get(viewer, "/summary/?event=nightly")

    assert "reference all jobs L2 100.0 % 1 0 0 1 1 min 30 s 10 s 1 min 20 s 0.0 %" in words(page)
    assert f'href="/runs/{runs["nightly"].uuid}/"' in page
    assert f'href="/runs/{runs["pr0"].uuid}/"' not in page
    assert 'aria-current="page">Nightly</a>' in page


def test_the_windows_hold_the_jobs_begun_in_them(viewer):
    demo_shaped()

    day = words(get(viewer, "/summary/?days=1"))
    month = words(get(viewer, "/summary/?days=30"))

    assert "reference all jobs L2 0.0 % 0 1 0 1 2 min 00 s 30 s 1 min 30 s 0.0 %" in day
    assert "reference all jobs L2 50.0 % 2 2 1 4" in month


def test_a_rerun_job_counts_once_at_its_latest_attempt(viewer):
    backend = make_backend("reference")
    first = make_pr_run(backend, Run.Status.FAILED, "reference")
    make_pr_run(backend, Run.Status.PASSED, "reference", retry_of=first, run_attempt=2)

    text = words(get(viewer, "/summary/"))

    # One job, green at its second attempt; a backend without a relay reports nothing: L1.
    assert "reference all jobs L1 100.0 % 1 0 0 1" in text


def test_a_window_or_tab_that_does_not_exist_is_named_and_the_default_shown(viewer):
    demo_shaped()

    page = get(viewer, "/summary/?days=5&event=weekly")

    text = words(page)
    assert "Time range: Select a valid choice. 5 is not one of the available choices." in text
    assert "Tab: Select a valid choice. weekly is not one of the available choices." in text
    assert "reference all jobs L2 50.0 % 2 2 1 4" in text  # pull requests, 7 days


def test_the_summary_shows_how_far_the_backend_is_from_l3(viewer):
    demo_shaped()

    text = words(get(viewer, "/summary/"))

    assert "L3 readiness" in text and "pass rate > 90 % timeout rate < 10 %" in text
    # 2 green of 4 PR jobs: 40 points short, and 17 green jobs in a row would clear it
    # (19 of 21 is 90.5 %); 1 timeout of 4, 15 points over: 7 clean jobs (1 of 11, 9.1 %).
    assert "50.0 % misses by 40.0 17 green jobs in a row clear it" in text
    assert "25.0 % misses by 15.0 7 jobs without a timeout clear it" in text


def test_the_metrics_page_adds_up_each_event_and_charts_each_day(viewer):
    runs = demo_shaped()

    page = get(viewer, "/metrics/?days=7")

    text = words(page)
    assert "Pull requests 4 2 2 50.0 %" in text
    assert "Nightly 1 1 0 100.0 %" in text
    for title in ("Job pass rate a day", "Failed jobs a day", "Jobs a day"):
        assert f"<title>{title}</title>" in page
    pr_day, nightly_day = runs["pr0"].started_at, runs["nightly"].started_at
    assert f"Pull requests, {pr_day:%b %d}: 0 of 1 jobs passed (0.0 %)" in page
    assert f"Nightly, {nightly_day:%b %d}: 1 of 1 jobs passed (100.0 %)" in page
    # Two series a day in the bars (pull requests, nightly), one bar per day that has jobs.
    jobs = page[page.index("<title>Jobs a day</title>") :]
    assert jobs.count('<rect class="point"') == 5


def test_the_metrics_page_shows_one_backend_when_asked(viewer):
    demo_shaped()
    other = make_backend("other")
    make_nightly_run(other, Run.Status.FAILED, "other")

    every = words(get(viewer, "/metrics/?days=14"))
    one = words(get(viewer, "/metrics/?days=14&backend=reference"))
    bad = words(get(viewer, "/metrics/?days=3&backend=nobody"))

    assert "Nightly 2 1 1 50.0 %" in every
    assert "Nightly 1 1 0 100.0 %" in one
    assert "Time range: Select a valid choice. 3 is not one of the available choices." in bad
    assert "Backend: Select a valid choice." in bad and "Last 30 days" in bad


def test_the_flaky_page_lists_a_test_that_passed_on_retry_with_its_quarantine(viewer):
    runs = demo_shaped()
    flaky_in(runs["pr0"])
    flaky_in(runs["nightly"])
    flaky_in(runs["pr3"], "test/test_plain_reuse.py::TestFlaky::test_other_flake")
    proposal = make_proposal(
        runs["pr0"].backend, file_path="test/test_plain_reuse.py", class_name="TestFlaky",
        test_name="test_flaky_counter", mode="xfail", stage="quarantine",
        reason="flaky in 2 of the backend's last 10 runs (failed, then passed on a retry)",
    )  # fmt: skip

    page = get(viewer, "/flaky/")
    week = words(page)
    day = words(get(viewer, "/flaky/?days=1"))

    assert "2 flaky tests in the last 7 days." in week
    # The most often flaky first: in two runs, with its pending quarantine proposal.
    first = "test/test_plain_reuse.py TestFlaky::test_flaky_counter"
    assert f"{first} {FLAKY_ID} reference 2 1" in week
    assert week.index("test_flaky_counter") < week.index("test_other_flake")
    assert f'href="/review/{proposal.uuid}/"' in page and "xfail: pending" in week
    assert "TestFlaky::test_other_flake" in week and "not proposed yet" in week
    assert "1 flaky test in the last 24 hours." in day and "test_other_flake" not in day


@pytest.mark.parametrize(
    "url, current",
    [("/summary/", "Summary"), ("/metrics/", "Metrics"), ("/flaky/", "Flaky")],
)
def test_the_header_marks_the_section_of_each_page(viewer, url, current):
    page = get(viewer, url)

    marked = re.findall(r'<a href="[^"]+" aria-current="page">([^<]+)</a>', page)
    assert marked[0] == current  # the header's, before the page's own tabs
    assert page.count(f">{current}</a>") >= 1


def test_a_job_that_finishes_counts_at_the_next_view(viewer):
    runs = demo_shaped()
    assert "reference all jobs L2 50.0 % 2 2 1 4" in words(get(viewer, "/summary/"))
    assert "Pull requests 4 2 2 50.0 %" in words(get(viewer, "/metrics/?days=7"))

    make_pr_run(runs["pr0"].backend, Run.Status.PASSED, "reference")

    assert "reference all jobs L2 60.0 % 3 2 1 5" in words(get(viewer, "/summary/"))
    assert "Pull requests 5 3 2 60.0 %" in words(get(viewer, "/metrics/?days=7"))
