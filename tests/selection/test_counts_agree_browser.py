"""Counts that agree (issue 35): a bulk decision's confirmation counts what its button
counted, a device result reads "passed of variants", a number agrees with its noun, and the
operators section of a captured test does not say the capture never ran."""

import pytest
from playwright.sync_api import expect

from selection import configwriter, refine
from selection.models import Proposal
from tests.factories import make_proposal, make_user
from tests.selection.test_review_browser import BASE, queue_with_proposals, sign_in

WINDOWS = [(1440, 900), (1024, 768)]


def fits(page, width):
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize(("width", "height"), WINDOWS)
def test_the_bulk_confirmation_counts_what_its_button_counted_and_says_why_some_stay(
    page, transactional_db, width, height
):
    backend = queue_with_proposals()
    Proposal.objects.filter(
        backend=backend, test_name="test_sum", class_name="TestPlainMath"
    ).update(status="approved")
    Proposal.objects.filter(backend=backend, test_name="test_passes_today").update(status="merged")
    make_user("rita", "reviewer")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "rita")
    page.get_by_role("navigation").get_by_role("link", name="Review").click()

    page.get_by_role("button", name="Approve all 5 matching").click()

    expect(
        page.get_by_role("heading", name="Approve 3 of the 5 matching proposals?")
    ).to_be_visible()
    expect(page.locator("p.left-alone")).to_have_text(
        "The other 2 are left as they are: 1 approved already, 1 in a config PR or merged."
    )
    fits(page, width)
    page.screenshot(path=f"/tmp/findings-bulk-{width}.png")
    page.get_by_role("button", name="Approve 3").click()
    expect(page.get_by_text("3 proposals approved.")).to_be_visible()


@pytest.mark.parametrize(("width", "height"), WINDOWS)
def test_a_device_result_reads_passed_of_variants_and_one_unexpected_pass_is_singular(
    page, transactional_db, width, height
):
    backend = queue_with_proposals()
    seen = refine.Observed(variants=1, xpassed=1)
    corrected = refine.correct("xfail", {}, seen)
    assert corrected is not None
    make_proposal(
        backend, file_path="test/test_plain_reuse.py", class_name="TestPlainMath",
        test_name="test_wrong_on_purpose", mode=corrected.mode, reason=corrected.reason,
        stage="refine", evidence={"device": seen.as_dict()},
    )  # fmt: skip
    make_user("rita", "reviewer")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "rita")
    page.get_by_role("navigation").get_by_role("link", name="Review").click()

    row = page.locator("tr.proposal", has_text="test_wrong_on_purpose")
    expect(row).to_contain_text("passed on the device (1 unexpected pass) though proposed xfail")
    expect(row).to_contain_text(
        "on the device: 0 of 1 variant passed, 0 failed, 1 passed unexpectedly"
    )
    fits(page, width)
    row.get_by_role("link", name="TestPlainMath::test_wrong_on_purpose").click()
    expect(
        page.get_by_text("0 of 1 variant passed on the device, 0 failed, 1 passed unexpectedly.")
    ).to_be_visible()

    # The reason as the merged config's comment says it.
    decision = configwriter.Decision(
        "test/test_plain_reuse.py", "TestPlainMath", "test_wrong_on_purpose", corrected.mode,
        corrected.reason,
    )  # fmt: skip
    written = configwriter.apply(BASE, [decision])
    assert "# Why: passed on the device (1 unexpected pass) though proposed xfail" in written


@pytest.mark.parametrize(("width", "height"), WINDOWS)
def test_a_captured_test_without_operators_does_not_read_as_never_captured(
    page, transactional_db, width, height
):
    backend = queue_with_proposals()
    captured = make_proposal(
        backend, file_path="test/test_plain_reuse.py", class_name="TestPlainStrings",
        test_name="test_upper", evidence={
            "captured": True, "ops_under_test": 0, "helper_ops": 0,
            "capture": {"variants": 1, "passed": 1, "failed": 0, "skipped": 0},
        },
    )  # fmt: skip
    never = make_proposal(
        backend, file_path="test/test_plain_reuse.py", class_name="TestPlainStrings",
        test_name="test_lower", evidence={"captured": False},
    )  # fmt: skip
    make_user("vera")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "vera")

    page.goto(f"/review/{captured.uuid}/")
    operators = page.locator("section[aria-labelledby=ev-ops]")
    expect(operators).to_contain_text(
        "the operator capture ran this test and saw it call no aten operator"
    )
    expect(page.get_by_text("has not run this test yet")).to_have_count(0)
    expect(page.get_by_text("captured: yes")).to_have_count(0)
    fits(page, width)

    page.goto(f"/review/{never.uuid}/")
    expect(operators).to_contain_text("the operator capture has not run this test yet")
