"""A red run of a job with no green run yet (issue 35): its failures' reasons say what its
attribution says, not "new since the last green run" under "no earlier green run"."""

import pytest
from playwright.sync_api import expect

from runs.models import Run, Shard, TestResult
from runs.results import classify_failures
from tests.factories import make_backend, make_config, make_pr_run, make_user
from tests.selection.test_review_browser import sign_in

WINDOWS = [(1440, 900), (1024, 768)]


def red_run(status: str = Run.Status.FAILED, **fields) -> Run:
    run = make_pr_run(make_backend(), status=status, **fields)
    shard = Shard.objects.create(
        run=run, index=0, test_ids=["test/t.py::T::test_sum"], status=Shard.Status.DONE
    )
    TestResult.objects.create(
        shard=shard, run=run, node_id="test/t.py::T::test_sum", file_path="test/t.py",
        test_name="test_sum", outcome="failed", attempt=1, message="AssertionError: 11 != 10",
    )  # fmt: skip
    classify_failures(run)
    return run


@pytest.mark.parametrize(("width", "height"), WINDOWS)
def test_the_first_red_run_of_a_job_gives_one_account_of_its_baseline(
    page, transactional_db, width, height
):
    run = red_run(changed_since_green=["no green run yet"])
    make_user("vera")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "vera")
    page.goto(f"/runs/{run.uuid}/")

    expect(page.locator("p.attribution")).to_have_text(
        "Attribution: no earlier green run to compare with."
    )
    failures = page.locator("ul.failures")
    expect(failures).to_contain_text("the job has no earlier green run to excuse it")
    expect(page.get_by_text("new since the last green run")).to_have_count(0)
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def test_a_test_missing_from_the_last_green_run_is_still_new_since_it(transactional_db):
    backend = make_backend()
    make_config(backend)
    make_pr_run(backend, status=Run.Status.PASSED)  # green, without the test
    run = make_pr_run(backend, status=Run.Status.FAILED)
    shard = Shard.objects.create(run=run, index=0, test_ids=["t.py::T::test_new"])
    TestResult.objects.create(
        shard=shard, run=run, node_id="t.py::T::test_new", file_path="t.py",
        test_name="test_new", outcome="failed", attempt=1,
    )  # fmt: skip
    (failure,) = classify_failures(run)
    assert failure.verdict_reason == "it is new since the last green run"
