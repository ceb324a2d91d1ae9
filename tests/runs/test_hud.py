"""The HUD grid: upstream commits as rows, jobs as columns by backend, a coloured letter a cell."""

import re
from datetime import timedelta
from html import unescape

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs import attempts, hud_grid, results
from runs.models import Dispatch, Failure, Run, Shard, TestResult, Trigger
from tests.factories import make_backend, make_config, make_user

pytestmark = pytest.mark.django_db

START = timezone.now() - timedelta(days=2)
CELL = re.compile(
    r'<td class="cell cell-(.) tone-(\w+)( retried)?( repro-[\w-]+)?"><a href="([^"]+)" '
    r'aria-describedby="tip-[\w-]+">(.)</a><span class="hud-tip" role="tooltip" '
    r'id="tip-[\w-]+">(.*?)</span></td>'
)


def sha(number: int) -> str:
    return f"{number:04x}" + "e" * 36


def pull_request(backend, number: int, at: int, **facts) -> Dispatch:
    """A merged PR's dispatch, its payload as GitHub sends it (less what crcr does not read)."""
    payload = {
        "action": "closed",
        "pull_request": {
            "number": number, "title": facts.get("title", f"Fix lgamma {number}"),
            "user": {"login": facts.get("author", "alice")},
            "merged_at": "2026-11-30T10:15:00Z", "labels": [],
            "head": {"ref": "fix", "sha": sha(at)}, "base": {"ref": "main", "sha": sha(at)},
        },
        "repository": {"full_name": facts.get("repository", "pytorch/pytorch")},
    }  # fmt: skip
    return Dispatch.objects.create(
        backend=backend, delivery_id=f"d-{number}-{backend.slug}", event_type="pull_request",
        raw_body="{}", payload=payload, action="closed", pr_number=number,
    )  # fmt: skip


def plant(backend, at: int, job=None, status="passed", outcomes=("passed",), trigger=None, **run):
    """A run of `job` (the backend's own by default) at commit `at`, `at` minutes in."""
    if trigger is None:
        trigger = Trigger.objects.create(backend=backend, kind="nightly", pytorch_sha=sha(at))
    when = START + timedelta(minutes=at, seconds=run.pop("later", 0))
    made = Run.objects.create(
        trigger=trigger, backend=backend, job_name=job or backend.slug, backend_version="1",
        pytorch_sha=trigger.pytorch_sha, test_suite_sha=trigger.pytorch_sha,
        config_version=backend.config_versions.first(), status=status, created_at=when,
        started_at=when + timedelta(seconds=30),
        finished_at=when + timedelta(seconds=90) if status not in ("running", "queued") else None,
        **run,
    )  # fmt: skip
    shard = Shard.objects.create(run=made, index=0)
    for number, outcome in enumerate(outcomes):
        TestResult.objects.create(
            shard=shard, run=made, node_id=f"t.py::T::test_{number}", file_path="t.py",
            test_name=f"test_{number}", outcome=outcome,
        )  # fmt: skip
    return made


def acme():
    backend = make_backend("acme")
    make_config(backend)
    return backend


def cells(html: str) -> list[dict]:
    """Each cell: its letter, tone, marks, link, and its details as text, a line each."""
    return [
        {
            "letter": m[0], "tone": m[1], "retried": bool(m[2]), "repro": m[3].strip(),
            "href": m[4], "title": unescape(re.sub(r"<[^>]+>", "", m[6].replace("<br>", "\n"))),
            "tip": m[6],
        }
        for m in CELL.findall(html)
    ]  # fmt: skip


def hud(client, query: str = "") -> str:
    client.force_login(User.objects.filter(username="vera").first() or make_user("vera"))
    response = client.get(f"/{query}")
    assert response.status_code == 200
    return response.content.decode()


def test_rows_are_commits_newest_first_with_their_pr_author_time_and_github_links(client):
    backend = acme()
    plant(backend, 1)  # a nightly: no PR, no author
    dispatched = Trigger.objects.create(
        backend=backend, kind="dispatch", pytorch_sha=sha(2), dispatch=pull_request(backend, 11, 2)
    )
    plant(backend, 2, trigger=dispatched, status="failed", outcomes=("passed", "failed"))
    html = hud(client)
    newer, older = html.index(sha(2)[:7]), html.index(sha(1)[:7])
    assert newer < older
    assert f'href="https://github.com/pytorch/pytorch/commit/{sha(2)}"' in html
    assert f'href="https://github.com/pytorch/pytorch/commit/{sha(1)}"' in html
    assert 'href="https://github.com/pytorch/pytorch/pull/11"' in html
    assert "#11 Fix lgamma 11</a>" in html
    assert '<span class="author">alice</span>' in html
    assert '<time datetime="2026-11-30T10:15:00+00:00"' in html
    assert ">nightly<" in html  # what built the other commit
    assert "None" not in html


def test_a_payload_naming_another_repository_links_there(client):
    backend = acme()
    dispatch = pull_request(backend, 7, 1, repository="acme-ai/pytorch")
    trigger = Trigger.objects.create(
        backend=backend, kind="dispatch", pytorch_sha=sha(1), dispatch=dispatch
    )
    plant(backend, 1, trigger=trigger)
    html = hud(client)
    assert f'href="https://github.com/acme-ai/pytorch/commit/{sha(1)}"' in html
    assert 'href="https://github.com/acme-ai/pytorch/pull/7"' in html


def test_a_push_row_shows_its_head_commit_and_a_manual_row_who_asked(client):
    backend = acme()
    payload = {
        "ref": "refs/heads/main", "after": sha(1), "repository": {"full_name": "pytorch/pytorch"},
        "head_commit": {
            "message": "Land the lgamma kernel\n\nLonger body.", "timestamp": "2026-11-29T08:00:00Z",
            "author": {"name": "Bob B", "username": "bob"},
        },
    }  # fmt: skip
    push = Dispatch.objects.create(
        backend=backend, delivery_id="push-1", event_type="push", raw_body="{}", payload=payload
    )
    plant(backend, 1, trigger=Trigger.objects.create(
        backend=backend, kind="dispatch", pytorch_sha=sha(1), dispatch=push
    ))  # fmt: skip
    rita = make_user("rita", "reviewer")
    manual = Trigger.objects.create(
        backend=backend, kind="manual", pytorch_sha=sha(2), requested_by=rita
    )
    plant(backend, 2, trigger=manual)
    html = hud(client)
    assert (
        '<span class="title" title="Land the lgamma kernel">Land the lgamma kernel</span>' in html
    )
    assert '<span class="author">bob</span>' in html and "Longer body" not in html
    assert '<time datetime="2026-11-29T08:00:00+00:00"' in html
    assert '<span class="author">rita</span>' in html and ">manual<" in html
    assert "/pull/" not in html


def test_cells_are_coloured_by_conclusion_and_keep_their_letters(client):
    backend = acme()
    plant(backend, 1, status="passed", outcomes=("passed", "passed", "skipped"))
    plant(backend, 2, status="failed", outcomes=("passed", "failed"))
    plant(backend, 3, status="timed_out")
    plant(backend, 4, status="running")
    plant(backend, 5, status="cancelled")
    flaky = plant(backend, 6, status="passed", outcomes=("failed",))
    Failure.objects.create(result=flaky.results.get(), run=flaky, category="other", verdict="flaky")
    found = [(c["letter"], c["tone"]) for c in cells(hud(client))]
    assert found == [
        ("F", "amber"), ("C", "grey"), ("?", "amber"), ("T", "red"), ("X", "red"), ("O", "green"),
    ]  # fmt: skip
    titles = [c["title"] for c in cells(hud(client))]
    assert titles[-1].startswith("acme: passed · attempt 1 of 1")
    assert "2 passed, 0 failed, 1 skipped" in titles[-1]
    assert "1 passed, 1 failed, 0 skipped" in titles[-2]


def test_columns_are_jobs_grouped_by_backend_under_a_two_level_header(client):
    backend, zeta = acme(), make_backend("zeta")
    make_config(zeta)
    plant(backend, 1)
    plant(backend, 1, job="acme (backend 1.9)", later=1)
    plant(zeta, 1, later=2)
    html = hud(client)
    assert re.search(
        r'<th colspan="2" class="backend" scope="colgroup"><span>acme</span></th>', html
    )
    assert re.search(
        r'<th colspan="1" class="backend" scope="colgroup"><span>zeta</span></th>', html
    )
    jobs = re.findall(r'<th class="job" scope="col" title="([^"]+)">([^<]+)</th>', html)
    assert jobs == [("acme", "latest"), ("acme (backend 1.9)", "backend 1.9"), ("zeta", "latest")]
    assert html.count('class="hud-row') == 1  # one commit, one row


def test_a_rerun_of_failed_jobs_is_another_attempt_of_its_cell_never_a_row_or_column(client):
    backend = acme()
    first = plant(
        backend, 1, status="failed", outcomes=("failed",), changed_since_green=["no green run yet"]
    )
    second = attempts.start(first, 2).run  # "re-run failed jobs"
    Run.objects.filter(pk=second.pk).update(status="passed", created_at=first.created_at)
    html = hud(client)
    assert html.count('class="hud-row') == 1
    assert re.findall(r'<th class="job"[^>]*>([^<]+)</th>', html) == ["latest"]
    (cell,) = cells(html)
    assert cell["href"] == f"/runs/{second.uuid}/" and cell["retried"]
    assert cell["letter"] == "F" and cell["tone"] == "amber"  # passed after a failed attempt
    assert cell["title"].startswith("acme: passed · attempt 2 of 2")
    assert "acme: failed · no earlier green run to compare with · attempt 1" in cell["title"]


def rerun_from_bundle(original: Run, status: str, later: int = 5) -> Run:
    """A bundle's re-run of `original`, as reproducibility.rerun.start makes it."""
    from reproducibility.models import Rerun

    manual = Trigger.objects.create(
        backend=original.backend, kind="manual", pytorch_sha=original.pytorch_sha
    )
    at = int((original.created_at - START).total_seconds() // 60)
    made = plant(
        original.backend, at, job=f"{original.job_name} (re-run)", trigger=manual,
        status=status, outcomes=("passed",) if status == "passed" else ("failed",), later=later,
    )  # fmt: skip
    Rerun.objects.create(original=original, run=made)
    return made


@pytest.mark.parametrize(
    "status, verdict",
    [("passed", "not reproduced"), ("failed", "reproduced"), ("running", "reproducing")],
)
def test_a_bundles_rerun_marks_its_cell_reproduced_or_not_and_never_changes_its_verdict(
    client, status, verdict
):
    backend = acme()
    red = plant(backend, 1, status="failed", outcomes=("failed",), changed_since_green=["PyTorch"])
    rerun_from_bundle(red, status)
    html = hud(client)
    assert html.count('class="hud-row') == 1
    assert re.findall(r'<th class="job"[^>]*>([^<]+)</th>', html) == ["latest"]
    (cell,) = cells(html)
    # The upstream verdict stands: the red X of the original, its page, one attempt.
    assert (cell["letter"], cell["tone"], cell["retried"]) == ("X", "red", False)
    assert cell["href"] == f"/runs/{red.uuid}/"
    assert cell["title"].startswith("acme: failed")
    assert f"re-run from its bundle (attempt 1): {verdict}," in cell["title"]
    assert cell["repro"] == f"repro-{verdict.replace(' ', '-')}"
    assert ">manual<" not in html  # a reproduction is no new build of the commit
    # "Failures only" still finds the commit, and "Red now" lists the original alone.
    assert [c["href"] for c in cells(hud(client, "?failures=on"))] == [f"/runs/{red.uuid}/"]
    red_now = html[html.index("<h2>Red now</h2>") :]
    assert f"/runs/{red.uuid}/" in red_now and "(re-run)" not in red_now


def test_a_cells_details_tell_job_status_attempt_times_tests_and_the_log(client):
    backend = acme()
    red = plant(
        backend, 1, status="failed", outcomes=("passed", "failed", "skipped"),
        changed_since_green=["no green run yet"],
    )  # fmt: skip
    plant(backend, 2, status="running", outcomes=("passed",))
    running, failed = cells(hud(client))
    assert failed["title"].splitlines()[:3] == [
        "acme: failed · no earlier green run to compare with · attempt 1 of 1",
        "queued 30 s · ran 1 min 00 s",
        "1 passed, 1 failed, 1 skipped: 1 of 3 tests passed",
    ]
    assert f'<a class="log" href="/runs/{red.uuid}/log/">log</a>' in failed["tip"]  # its log page
    assert running["title"].splitlines()[:2] == [
        "acme: running · attempt 1 of 1",
        "queued 30 s · still running",
    ]


def test_a_first_red_run_says_there_is_no_earlier_green_run(client):
    backend = acme()
    plant(backend, 1, status="failed", changed_since_green=["no green run yet"])
    html = hud(client)
    assert "no earlier green run to compare with" in cells(html)[0]["title"]
    red = html[html.index("<h2>Red now</h2>") :]
    assert "no earlier green run to compare with" in red
    assert "nothing changed since the last green run" not in html


def test_the_job_filter_keeps_matching_columns_and_their_commits(client):
    backend, zeta = acme(), make_backend("zeta")
    make_config(zeta)
    plant(backend, 1)
    plant(zeta, 2)
    html = hud(client, "?job=ZET")
    assert re.findall(r'<th class="job" scope="col" title="([^"]+)"', html) == ["zeta"]
    assert sha(2)[:7] in html and sha(1)[:7] not in html
    assert 'value="ZET"' in html and "Clear filters" in html
    assert '<label for="id_job">Job name contains' in html
    assert '<label class="hud-check" for="id_failures">' in html


def test_failures_only_keeps_commits_with_a_red_cell(client):
    backend = acme()
    plant(backend, 1, status="failed", outcomes=("failed",))
    plant(backend, 2, status="passed")
    plant(backend, 3, status="failed", outcomes=("failed",))
    plant(backend, 3, status="passed", later=1)  # its newest attempt is green again
    plant(backend, 4, status="timed_out")
    html = hud(client, "?failures=on")
    rows = re.findall(r'data-sha="(\w+)"', html)
    assert rows == [sha(4), sha(1)]
    assert re.search(r'<input type="checkbox" name="failures"[^>]* checked', html)


def test_commits_come_a_page_at_a_time_keeping_the_filters(client, monkeypatch):
    monkeypatch.setattr(hud_grid, "PER_PAGE", 2)
    backend = acme()
    for at in range(1, 6):
        plant(backend, at)
    first = hud(client, "?job=acme")
    assert re.findall(r'data-sha="(\w+)"', first) == [sha(5), sha(4)]
    assert 'href="?job=acme&amp;page=2" rel="next"' in first and 'rel="prev"' not in first
    last = hud(client, "?job=acme&page=3")
    assert re.findall(r'data-sha="(\w+)"', last) == [sha(1)]
    assert 'href="?job=acme&amp;page=2" rel="prev"' in last and 'rel="next"' not in last
    assert "No commits match these filters on page 9" in hud(client, "?job=acme&page=9")


def test_a_bad_page_number_is_said_next_to_the_form_and_the_first_page_shown(client):
    backend = acme()
    plant(backend, 1)
    html = hud(client, "?page=zero")
    assert "Page: Enter a whole number." in html
    assert sha(1)[:7] in html


def test_the_footer_says_what_each_figure_measures(client):
    backend = acme()
    plant(backend, 1, status="passed")
    plant(backend, 2, status="failed", outcomes=("failed",))
    plant(backend, 3, status="passed")
    html = hud(client)
    assert "green runs (this page)" in html and ">2/3<" in html
    assert "pass rate" not in html
    assert "<h2>Tests passing per job</h2>" in html


def test_an_empty_hud_explains_itself(client):
    assert "No runs yet." in hud(client)


def bulk(backend, jobs: int, commits: int) -> None:
    """`commits` nightly commits, each with a run of every one of `jobs` jobs, made in bulk;
    some red, and the first job red at the newest commit (so some job is red now)."""

    def red(n: int, job: int) -> bool:
        return (n + job) % 7 == 0 or (n, job) == (commits - 1, 0)

    config = backend.config_versions.first()
    triggers = Trigger.objects.bulk_create(
        Trigger(backend=backend, kind="nightly", pytorch_sha=sha(n)) for n in range(commits)
    )
    Run.objects.bulk_create(
        Run(
            trigger=trigger, backend=backend, job_name=f"acme (config {job})", backend_version="1",
            pytorch_sha=trigger.pytorch_sha, test_suite_sha=trigger.pytorch_sha,
            config_version=config, status="timed_out" if red(n, job) else "passed",
            created_at=START + timedelta(minutes=n, seconds=job),
            changed_since_green=["PyTorch"],
        )
        for n, trigger in enumerate(triggers)
        for job in range(jobs)
    )  # fmt: skip


def queries(client, query: str = "") -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(f"/{query}").status_code == 200
    return len(captured)


def test_the_page_costs_the_same_queries_however_many_commits_and_runs_are_stored(client):
    backend = acme()
    client.force_login(make_user("vera"))
    bulk(backend, jobs=3, commits=3)
    few = {query: queries(client, query) for query in ("", "?failures=on&job=config")}
    bulk(backend, jobs=20, commits=60)  # 1,200 runs more over 20 jobs
    assert Run.objects.count() > 1_000
    many = {query: queries(client, query) for query in ("", "?failures=on&job=config")}
    assert many == few


def test_finished_runs_are_read_from_what_they_stored_with_fewer_queries(client):
    backend = acme()
    client.force_login(make_user("vera"))
    bulk(backend, jobs=3, commits=3)
    cache.clear()  # each measure reads the database, as a first view does
    counted = queries(client)
    # As `finish_if_done` stores them: tests per outcome, failures per category and verdict.
    Run.objects.update(
        test_summary={"passed": 7, "failed": 2}, failure_summary=[["crash", "regression", 40]]
    )
    cache.clear()
    few = queries(client)
    bulk(backend, jobs=20, commits=60)
    Run.objects.filter(test_summary__isnull=True).update(
        test_summary={"passed": 7, "failed": 2}, failure_summary=[["crash", "regression", 40]]
    )
    cache.clear()
    html = hud(client)
    cache.clear()
    assert queries(client) == few < counted  # no count of results, nor of regressions
    red = html[html.index("<h2>Red now</h2>") :]
    assert "and 40 regression(s) in all" in red
    assert "7 passed, 2 failed, 0 skipped" in cells(html)[0]["title"]


def test_a_second_view_reads_settled_commits_from_the_cache_in_fewer_queries(client):
    backend = acme()
    client.force_login(make_user("vera"))
    bulk(backend, jobs=3, commits=3)
    first, again = queries(client), queries(client)
    bulk(backend, jobs=20, commits=60)
    assert queries(client) == first  # the new runs: read from the database
    assert queries(client) == again < first  # then kept, whatever their number


def test_what_the_cache_keeps_changes_as_soon_as_a_run_finishes_is_added_or_deleted(client):
    backend = acme()
    client.force_login(make_user("vera"))
    plant(backend, 1)
    running = plant(backend, 2, status="running", outcomes=("passed", "failed"))
    html = hud(client)
    assert [c["letter"] for c in cells(html)] == ["?", "O"] and "Red now" not in html
    assert [c["letter"] for c in cells(hud(client))] == ["?", "O"]  # the settled row, kept

    # The running run finishes as a worker finishes it: its cell and "Red now" follow.
    running.shards.update(status=Shard.Status.DONE)
    results.finish_if_done(running.pk)
    html = hud(client)
    assert [c["letter"] for c in cells(html)] == ["X", "O"]
    assert "<h2>Red now</h2>" in html and "t.py::T::test_1" in html

    # A re-run of the settled commit's job is its cell's second attempt.
    trigger = Trigger.objects.get(pytorch_sha=sha(1))
    rerun = plant(backend, 1, trigger=trigger, status="timed_out", later=30)
    (newest, settled) = cells(hud(client))
    assert settled["letter"] == "T" and settled["retried"]
    assert settled["href"] == f"/runs/{rerun.uuid}/"

    # Deleted runs leave the page and what it says is red.
    Run.objects.filter(pytorch_sha=sha(2)).delete()
    html = hud(client)
    assert [c["letter"] for c in cells(html)] == ["T"]
    assert "t.py::T::test_1" not in html
