"""Progress read while a run goes on, in Chromium: the run's line and its shard rows add up
to the same tests, and a bundle's re-run calls a test it has not reached yet waiting, not
different (issue 35)."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from reproducibility.models import Rerun
from runs.models import Run, Shard
from tests.factories import make_backend, make_config, make_user
from tests.reproducibility.builders import add_result, make_run
from tests.selection.test_review_browser import sign_in

IDS = [f"test/test_ops.py::TestOps::test_{number}" for number in range(30)]


def running_run():
    """A run whose first shard ended (3 tests stored) and whose second has run 27 of its 30."""
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="running", started_at=timezone.now())
    for number, outcome in enumerate(["passed", "passed", "failed"]):
        add_result(run, f"test/test_a.py::TestA::test_{number}", [outcome])
    Shard.objects.create(
        run=run, index=1, status=Shard.Status.RUNNING, test_ids=IDS, tests_done=27,
        estimated_seconds=30,
    )  # fmt: skip
    return run


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_run_line_and_its_shard_rows_count_the_same_tests_while_it_runs(page, width):
    run = running_run()
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "vera")
    page.goto(f"/runs/{run.uuid}/")

    progress = page.locator("#progress")
    expect(progress.locator(".run-progress")).to_have_text("30 of 33 tests run")
    expect(progress).to_contain_text("2 passed, 1 failed, 0 skipped in the shards that ended")
    expect(progress).not_to_contain_text("of 0")
    # The shard rows add up to the run's line: tests planned, and run so far.
    rows = progress.locator("table").first.locator("tbody tr")
    planned = sum(int(rows.nth(n).locator("td").nth(1).inner_text()) for n in range(rows.count()))
    assert planned == 33
    expect(rows.nth(1)).to_contain_text("27 of 30 tests")
    page.screenshot(path=f"/tmp/hudcells-progress-{width}.png")
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize("width", [1440, 1024])
def test_a_rerun_going_on_reads_tests_not_reached_as_waiting_not_different(page, width):
    backend = make_backend("acme")
    config = make_config(backend)
    original = make_run(backend, config, status="failed")
    for node_id in IDS[:3]:
        add_result(original, node_id, ["passed"])
    new = make_run(
        backend, config, status="running", job_name="acme (re-run)", started_at=timezone.now()
    )
    add_result(new, IDS[0], ["passed"])
    add_result(new, IDS[1], ["failed"])
    made = Rerun.objects.create(original=original, run=new)
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "vera")
    page.goto(f"/reruns/{made.uuid}/")

    comparison = page.locator("#comparison")
    expect(comparison).to_contain_text(
        "3 test(s): 1 not run yet, 1 with a different outcome so far"
    )
    waiting = comparison.locator("tr", has_text=IDS[2])
    expect(waiting).to_contain_text("(not run yet)")
    expect(waiting).to_contain_text("waiting")
    expect(waiting).not_to_contain_text("different")
    expect(comparison.locator("tr", has_text=IDS[1]).locator("mark")).to_have_text("different")
    assert comparison.locator("mark").count() == 1
    # When the re-run ends, a test it never ran is absent, and that is a difference.
    Run.objects.filter(pk=new.pk).update(status=Run.Status.FAILED, finished_at=timezone.now())
    expect(waiting).to_contain_text("(absent)", timeout=10_000)
    expect(comparison).to_contain_text(re.compile(r"3 test\(s\), 2 with a different outcome"))
    assert page.evaluate("document.documentElement.scrollWidth") <= width
