"""Enabling an operator from its row (issue 35): the row shows the run in place, then its
result, with a link to the queue filtered to the proposals it made; support in colour."""

import pytest
from playwright.sync_api import expect

from selection import pipeline, proposals
from selection.models import Proposal, SelectionRun
from tests.factories import make_backend, make_config, make_proposal, make_user
from tests.selection.test_operators_page import DECLARED, use
from tests.selection.test_review_browser import sign_in

WINDOWS = [(1440, 900), (1024, 768)]
GREEN, RED = "rgb(26, 127, 55)", "rgb(180, 35, 24)"


def finish_as_the_worker_would(run: SelectionRun, passing: str, failing: str) -> None:
    """The end of `enabling.enable_operator` for a device run in which `passing` passed:
    its proposal saved by the pipeline, the run finished with its summary. (The device run
    itself is tested in test_opindex; here the page is.)"""
    key = ("test/test_ops.py", "TestOps", passing)
    decision = pipeline.Decision(
        key, "mandatory_success", "passes on the device once aten::lgamma is supported",
        Proposal.Stage.ENABLE_OP, {}, {"enabled_op": "lgamma"},
    )  # fmt: skip
    counts = proposals.save_proposals(run.backend, run, [decision], DECLARED)
    run.claim()
    run.finish(
        {
            "op": "lgamma",
            "waiting": ["::".join(key), f"test/test_ops.py::TestOps::{failing}"],
            "passing": ["::".join(key)],
            "failing": {f"test/test_ops.py::TestOps::{failing}": "not run"},
            "proposals": counts,
            "recommendation": "add lgamma to global.supported_ops",
        }
    )


@pytest.mark.parametrize(("width", "height"), WINDOWS)
def test_enabling_an_operator_shows_its_run_and_result_in_its_row(
    page, held, settings, tmp_path, width, height
):
    settings.MEDIA_ROOT = str(tmp_path / "storage")  # no stored device probe
    backend = make_backend("acme")
    make_config(backend, DECLARED)
    use("test_add", "add.Tensor")
    use("test_lgamma", "lgamma.default")
    use("test_special", "lgamma.out", helper=True)
    # A proposal of another run: the filtered queue leaves it out.
    make_proposal(backend, file_path="test/test_ops.py", class_name="TestOps", test_name="test_add")
    make_user("rita", role="reviewer")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "rita")
    page.get_by_role("navigation").get_by_role("link", name="Operators").click()
    add, lgamma = page.locator("#op-add"), page.locator("#op-lgamma")
    expect(add.locator(".support")).to_have_text("yes")
    expect(add.locator(".support")).to_have_css("color", GREEN)
    expect(lgamma.locator(".support")).to_have_text("no")
    expect(lgamma.locator(".support")).to_have_css("color", RED)
    page.evaluate("window.stillTheSamePage = true")

    lgamma.get_by_role("button", name="Enable lgamma").click()

    expect(lgamma.get_by_role("status")).to_contain_text("enabling: queued")
    expect(lgamma.get_by_role("button", name="Enable lgamma")).to_have_count(0)
    run = SelectionRun.objects.get(kind="enable_op", argument="lgamma")
    # The embedded default's background thread is held: the task waits, and this test
    # finishes the run as the worker would (the task then finds it taken and stops).
    finish_as_the_worker_would(run, passing="test_lgamma", failing="test_special")

    # The row polls: the result appears in it, the page never left.
    expect(lgamma.get_by_role("status")).to_contain_text(
        "enabled on the device: 1 of 2 waiting tests pass; next: add lgamma to global.supported_ops"
    )
    expect(lgamma.locator(".status-done")).to_have_css("color", GREEN)
    assert page.evaluate("window.stillTheSamePage") is True
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=f"/tmp/findings-operators-{width}.png")

    lgamma.get_by_role("link", name="Review the 1 proposal").click()
    expect(page.get_by_text("1 proposal matches")).to_be_visible()
    expect(page.locator("tr.proposal")).to_have_count(1)
    expect(page.locator("tr.proposal")).to_contain_text("TestOps::test_lgamma")
    expect(page.locator("p.from-run")).to_contain_text("enable an operator lgamma on Acme")
    assert page.evaluate("document.documentElement.scrollWidth") <= width

    # The run's own page links to the same filtered queue.
    page.goto(f"/selection-runs/{run.uuid}/")
    expect(page.get_by_text("Proposals: 1 new, 0 updated, 0 already decided.")).to_be_visible()
    page.get_by_role("link", name="Review the 1 it made").click()
    expect(page.locator("tr.proposal")).to_have_count(1)
