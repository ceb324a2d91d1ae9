"""L3 readiness (RFC 102) from crcr's own runs: the figures the API and the HUD page show."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Run, Trigger
from tests.factories import make_backend, make_config, make_pr_run, make_token, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def backend():
    backend = make_backend("acme")
    make_config(backend)
    return backend


def plant(backend, passed=0, failed=0, timed_out=0, days_ago=1, job_name="acme"):
    started = timezone.now() - timedelta(days=days_ago)
    statuses = [Run.Status.PASSED] * passed + [Run.Status.FAILED] * failed
    for status in statuses + [Run.Status.TIMED_OUT] * timed_out:
        make_pr_run(backend, status=status, job_name=job_name, started_at=started)


def readiness(client, backend, token=None):
    token = token or make_token(make_user("machine", role=None), backend)
    response = client.get(
        f"/api/backends/{backend.slug}/readiness/", HTTP_AUTHORIZATION=f"Token {token}"
    )
    assert response.status_code == 200, response.content
    return response.json()


def week(figures):
    return next(window for window in figures["windows"] if window["days"] == 7)


def month(figures):
    return next(window for window in figures["windows"] if window["days"] == 28)


def test_nineteen_green_jobs_of_twenty_meet_the_pass_rate_by_five_points(client, backend):
    plant(backend, passed=19, failed=1)

    body = readiness(client, backend)

    assert body["thresholds"] == {
        "pass_rate_above": 90.0, "timeout_rate_below": 10.0, "windows_days": [7, 28],
    }  # fmt: skip
    seven = week(body["overall"])
    assert (seven["finished"], seven["succeeded"], seven["timed_out"]) == (20, 19, 0)
    assert (seven["pass_rate"], seven["pass_rate_margin"], seven["pass_rate_meets"]) == (
        95.0, 5.0, True,
    )  # fmt: skip
    assert (seven["timeout_rate"], seven["timeout_rate_meets"], seven["ready"]) == (0.0, True, True)


def test_three_timeouts_of_twenty_miss_the_timeout_rate_by_five_points(client, backend):
    plant(backend, passed=17, timed_out=3)

    seven = week(readiness(client, backend)["overall"])

    assert (seven["timeout_rate"], seven["timeout_rate_margin"]) == (15.0, -5.0)
    assert seven["timeout_rate_meets"] is False and seven["ready"] is False
    # A timed-out job is not a green one either: 17 of 20.
    assert (seven["pass_rate"], seven["pass_rate_margin"], seven["pass_rate_meets"]) == (
        85.0, -5.0, False,
    )  # fmt: skip


def test_exactly_ninety_percent_is_not_above_the_bar(client, backend):
    plant(backend, passed=9, failed=1)

    seven = week(readiness(client, backend)["overall"])

    assert (seven["pass_rate"], seven["pass_rate_meets"]) == (90.0, False)


def test_the_week_and_the_four_weeks_count_their_own_jobs(client, backend):
    plant(backend, passed=4, days_ago=1)
    plant(backend, failed=4, days_ago=10)  # only in the 4 weeks
    plant(backend, failed=9, days_ago=40)  # in neither

    overall = readiness(client, backend)["overall"]

    assert (week(overall)["finished"], week(overall)["pass_rate"]) == (4, 100.0)
    assert (month(overall)["finished"], month(overall)["pass_rate"]) == (8, 50.0)
    assert month(overall)["pass_rate_margin"] == -40.0


def test_each_hud_job_has_its_own_figures_beside_the_backends(client, backend):
    plant(backend, passed=3, job_name="acme")
    plant(backend, passed=1, timed_out=1, job_name="acme (backend 0.9)")

    body = readiness(client, backend)

    jobs = {job["job_name"]: week(job) for job in body["jobs"]}
    assert sorted(jobs) == ["acme", "acme (backend 0.9)"]
    assert jobs["acme"]["ready"] is True
    assert (jobs["acme (backend 0.9)"]["timeout_rate"], jobs["acme (backend 0.9)"]["ready"]) == (
        50.0, False,
    )  # fmt: skip
    assert week(body["overall"])["finished"] == 5


def test_only_pull_request_jobs_count_and_only_the_latest_attempt(client, backend):
    first = make_pr_run(backend, status=Run.Status.FAILED)
    make_pr_run(backend, status=Run.Status.PASSED, retry_of=first, run_attempt=2)
    make_pr_run(backend, status=Run.Status.FAILED, event_type="push")  # no PR: not the HUD's
    nightly = Trigger.objects.create(backend=backend, kind="nightly", pytorch_sha="b" * 40)
    nightly_run = make_pr_run(backend, status=Run.Status.FAILED)
    Run.objects.filter(pk=nightly_run.pk).update(trigger=nightly)
    make_pr_run(backend, status=Run.Status.RUNNING)  # not finished

    seven = week(readiness(client, backend)["overall"])

    assert (seven["finished"], seven["succeeded"], seven["pass_rate"]) == (1, 1, 100.0)


def test_a_backend_without_jobs_has_no_verdict(client, backend):
    seven = week(readiness(client, backend)["overall"])

    assert (seven["finished"], seven["pass_rate"], seven["pass_rate_meets"], seven["ready"]) == (
        0, None, None, None,
    )  # fmt: skip


def test_a_token_that_does_not_act_for_the_backend_is_refused(client, backend):
    other = make_backend("other")
    token = make_token(make_user("machine", role=None), other)

    response = client.get("/api/backends/acme/readiness/", HTTP_AUTHORIZATION=f"Token {token}")

    assert response.status_code == 403
    assert "does not act for backend 'acme'" in response.json()["detail"]
    assert client.get("/api/backends/acme/readiness/").status_code == 401
    missing = client.get("/api/backends/nobody/readiness/", HTTP_AUTHORIZATION=f"Token {token}")
    assert missing.status_code == 404


def test_the_openapi_schema_documents_readiness(client):
    token = make_token(make_user("machine", role=None))
    schema = client.get("/api/schema/", HTTP_AUTHORIZATION=f"Token {token}").content.decode()

    assert "/api/backends/{slug}/readiness/" in schema
    assert "timeout_rate_margin" in schema and "pass_rate_meets" in schema


def test_the_hud_page_shows_where_each_job_stands(client, backend):
    plant(backend, passed=19, failed=1, job_name="acme")
    plant(backend, passed=17, timed_out=3, job_name="acme (backend 0.9)")
    client.force_login(make_user("vera"))

    page = client.get("/").content.decode()

    assert "L3 readiness" in page
    assert '95.0 % <span class="margin">meets, 5.0 to spare</span>' in page
    assert '15.0 % <span class="margin">misses by 5.0</span>' in page
    # The backend's two jobs together: 36 of 40 green, exactly the bar, which is not above it.
    assert '90.0 % <span class="margin">misses: at the bar</span>' in page
    assert "no finished job" not in page
