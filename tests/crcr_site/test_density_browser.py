"""Density and hierarchy (issue 35, item 6), in headless Chromium at 1440×900 and 1024×768:
a screen of proposals and of HUD commits, three button weights, states as badges, the
current section marked, messages as bars, styled error pages, words never split mid-way."""

import pytest
from django.db import transaction
from django.urls import reverse
from playwright.sync_api import expect

from runs.models import TestResult
from selection import configprs
from selection.models import Proposal, SelectionRun
from tests.e2e.test_whole_loop import picture
from tests.factories import make_backend, make_config, make_proposal, make_user
from tests.reproducibility.builders import add_result, make_run
from tests.runs.test_hud import acme, plant
from tests.selection.test_review_browser import BASE, sign_in

pytestmark = pytest.mark.django_db(transaction=True)

VIEWPORTS = [(1440, 900), (1024, 768)]
SIZES = pytest.mark.parametrize(("width", "height"), VIEWPORTS, ids=["1440", "1024"])

# Elements matching the selector whose whole box lies inside the window (and inside the
# scrolling box `clip`, when one is named): what a person sees without scrolling.
IN_VIEW = """([selector, clip]) => {
  const frame = clip ? document.querySelector(clip).getBoundingClientRect()
                     : {top: 0, bottom: window.innerHeight};
  const top = Math.max(0, frame.top), bottom = Math.min(window.innerHeight, frame.bottom);
  return [...document.querySelectorAll(selector)].filter((el) => {
    const box = el.getBoundingClientRect();
    return box.height > 0 && box.top >= top && box.bottom <= bottom;
  }).length;
}"""

# Words that the browser broke across two lines in the middle: a run of letters and digits
# whose characters lie on more than one line. A break between two parts of an identifier
# (after `_`, `.`, `/`, `:` or `=`) is not one.
SPLIT_WORDS = """() => {
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  const split = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("pre, details:not([open]) > :not(summary), [hidden]")) continue;
    for (const match of node.textContent.matchAll(/[A-Za-z0-9]{2,}/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
      if (tops.size > 1) split.push(`${match[0]} in "${node.textContent.slice(0, 80)}"`);
    }
  }
  return split;
}"""

LONG_REASON = (
    "fails on the device: numerical mismatch in aten::cumprod for float64 (3 of 12 elements "
    "off by more than 1e-3); the vendor's kernel accumulates in float32, fixed in release 2.4"
)


TRACE = (
    "self = <test_planted_faults.TestPlantedFaultsPRIVATEUSE1 testMethod="
    "test_cumprod_hangs_privateuseone_float64>, device='privateuseone:0', dtype=torch.float64\n"
    "    def test_cumprod_hangs(self, device, dtype):\n>       self.assertEqual(actual, expected)\n"
    "E   AssertionError: Tensor-likes are not close! Mismatched elements: 3 / 12 (25.0%)"
)


def evidence(number: int) -> dict:
    """Evidence shaped as the demo's pipeline writes it: ops, dtypes, a device failure."""
    return {
        "ops_under_test": 3, "helper_ops": 7,
        "dtypes": ["float32", "float64", "bfloat16", "complex64"],
        "supported_dtypes": ["float32", "float64"],
        "restrictions": ["only_for=cuda", "dtypes=floating_types_and(torch.half)"],
        "unsupported_ops": ["aten::cumprod.out", "aten::_foreach_addcmul_.Scalar"],
        "device": {
            "variants": 4, "passed": 2, "failed": 2,
            "failures": [{
                "category": "numerical_mismatch", "op": "aten::cumprod", "dtype": "float64",
                "line": "AssertionError: Tensor-likes are not close! Mismatched elements: "
                f"3 / 12 (25.0%) in case {number}",
                "message": "Traceback (most recent call last):\n  ...\nAssertionError",
            }],
        },
    }  # fmt: skip


def queue_like_the_demo(count: int = 30):
    backend = make_backend()
    make_config(backend, BASE)
    for number in range(count):
        make_proposal(
            backend, file_path="test/distributed/_tensor/test_planted_faults.py",
            class_name="TestPlantedFaultsPRIVATEUSE1",
            test_name=f"test_cumprod_hangs_privateuseone_float64_case_{number}",
            mode=("xfail", "skip", "mandatory_success")[number % 3], reason=LONG_REASON,
            evidence=evidence(number),
        )  # fmt: skip
    return backend


def no_overflow(page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@SIZES
def test_the_review_queue_shows_six_proposals_on_the_first_screen_and_all_on_focus(
    page, width, height
):
    queue_like_the_demo()
    make_user("rita", "reviewer")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "rita")
    page.goto(reverse("selection:proposal_list"))
    expect(page.locator("tr.proposal")).to_have_count(25)
    picture(page, f"density-queue-{width}")

    assert page.evaluate(IN_VIEW, ["tr.proposal", None]) >= 6
    no_overflow(page, width)
    assert page.evaluate(SPLIT_WORDS) == []
    # Nothing is lost: the row in focus shows its whole reason and evidence.
    page.keyboard.press("j")
    first = page.locator("tr.proposal").first
    expect(first).to_be_focused()
    assert page.evaluate(SPLIT_WORDS) == []
    for part in (first.locator("td.reason .clamp"), first.locator("ul.evidence")):
        assert part.evaluate("el => el.scrollHeight <= el.clientHeight + 1")
    expect(first).to_contain_text("Mismatched elements: 3 / 12 (25.0%) in case 0")
    expect(first).to_contain_text("fixed in release 2.4")


@SIZES
def test_the_hud_shows_twenty_commits_on_the_first_screen(page, width, height):
    backend = acme()
    for at in range(30):
        for job in ("acme", "acme (debug)", "acme (nightly full)"):
            plant(backend, at, job=job, status="failed" if at % 7 == 0 else "passed")
    make_user("vera")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "vera")
    picture(page, f"density-hud-{width}")

    assert page.evaluate(IN_VIEW, ["tr.hud-row", ".hud-scroll"]) >= 20
    no_overflow(page, width)


def config_pr_ready_to_merge():
    """A config PR opened by rita and approved by otto: pia may approve it and merge it."""
    backend = queue_like_the_demo(3)
    Proposal.objects.update(status=Proposal.Status.APPROVED)
    reviewers = [make_user(name, "reviewer") for name in ("rita", "otto", "pia")]
    with transaction.atomic():
        change = configprs.open_change(backend, reviewers[0])
    assert change is not None
    configprs.approve(change, reviewers[1], change.revision)
    make_proposal(backend, test_name="test_still_pending", reason="pending")
    return change


@SIZES
def test_approve_merge_and_reject_have_three_different_looks_and_states_are_badges(
    page, width, height
):
    change = config_pr_ready_to_merge()
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "pia")

    def background(button):
        return button.evaluate("b => getComputedStyle(b).backgroundColor")

    page.goto(reverse("selection:proposal_list"))
    row = page.locator("tr.proposal", has_text="test_still_pending")
    queue_approve = background(row.get_by_role("button", name="Approve"))
    reject = row.get_by_role("button", name="Reject")
    assert "btn-danger" in (reject.get_attribute("class") or "")
    queue_reject = background(reject)
    assert "btn-primary" in (row.get_by_role("button", name="Approve").get_attribute("class") or "")
    expect(row.locator(".badge")).to_have_text("pending")

    page.goto(reverse("selection:configchange_detail", args=[change.uuid]))
    picture(page, f"density-config-pr-{width}")
    approve = background(page.get_by_role("button", name="Approve", exact=True))
    merge = background(page.get_by_role("button", name="Merge", exact=True))
    assert approve == queue_approve  # one primary style everywhere
    assert len({approve, merge, queue_reject}) == 3
    # The PR's state is a badge beside its title, not a word of it.
    state = page.get_by_role("heading", level=1).locator(".badge")
    expect(state).to_have_text("open")
    assert state.evaluate("b => getComputedStyle(b).backgroundColor") != "rgba(0, 0, 0, 0)"

    # A flash message is a coloured bar, not a bullet.
    page.get_by_role("button", name="Approve", exact=True).click()
    message = page.locator("ul.messages li.success")
    expect(message).to_have_text("Approved.")
    assert message.evaluate("li => getComputedStyle(li).listStyleType") == "none"
    assert message.evaluate("li => getComputedStyle(li).backgroundColor") != "rgba(0, 0, 0, 0)"

    page.get_by_role("navigation", name="main").get_by_role("link", name="Configs").click()
    expect(page.locator("table .badge", has_text="open")).to_be_visible()
    no_overflow(page, width)


@SIZES
def test_the_nav_marks_the_section_of_the_config_enable_and_api_pages(page, width, height):
    backend = make_backend()
    make_config(backend, BASE)
    enabling = SelectionRun.objects.create(
        backend=backend, kind=SelectionRun.Kind.ENABLE_OP, argument="lgamma", status="done"
    )
    make_user("vera")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "vera")
    nav = page.get_by_role("navigation", name="main")

    for url, section in [
        (reverse("selection:backendconfig_detail", args=[backend.slug]), "Configs"),
        (reverse("selection:configversion_blame", args=[backend.slug, 1]), "Configs"),
        (reverse("selection:selectionrun_detail", args=[enabling.uuid]), "Operators"),
        (reverse("api:docs"), "API"),
    ]:
        page.goto(url)
        expect(nav.locator("[aria-current=page]")).to_have_count(1)
        expect(nav.locator("[aria-current=page]")).to_have_text(section)
        no_overflow(page, width)
    # The API docs inside crcr's frame: its header, navigation and sign-out.
    expect(page.locator("#swagger-ui")).to_contain_text("/api/dispatches/")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    picture(page, f"density-api-{width}")


@SIZES
def test_error_pages_are_crcr_pages(page, width, height):
    make_user("vera")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "vera")

    page.goto("/runs/00000000-0000-0000-0000-000000000000/")
    card = page.locator("section.error-page")
    expect(card.get_by_role("heading", name="Not found 404")).to_be_visible()
    expect(page.get_by_role("navigation", name="main")).to_be_visible()
    assert card.evaluate("c => getComputedStyle(c).borderLeftWidth") == "4px"
    no_overflow(page, width)

    # More query fields than Django reads: a 400, drawn as a crcr page.
    response = page.goto("/?" + "&".join(f"f{n}=1" for n in range(1100)))
    assert response is not None and response.status == 400
    expect(page.locator("section.error-page").get_by_role("heading")).to_have_text(
        "Bad request 400"
    )
    expect(page.locator("header.top .brand")).to_have_text("crcr")


@SIZES
def test_the_reproducibility_page_gives_test_names_most_of_the_width(page, width, height):
    backend = make_backend()
    run = make_run(backend, make_config(backend), status="failed")
    for number in range(40):
        node = (
            "test/distributed/_tensor/test_planted_faults.py::TestPlantedFaultsPRIVATEUSE1::"
            f"test_cumprod_hangs_privateuseone_float64_{number}"
        )
        add_result(run, node, ["failed", "passed"] if number % 4 else ["passed"])
    # A failure's message as pytest writes it: a long first line, then the trace.
    TestResult.objects.filter(run=run, outcome="failed").update(message=TRACE)
    make_user("vera")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "vera")
    page.goto(reverse("reproducibility:record_detail", args=[run.uuid]))
    picture(page, f"density-record-{width}")

    table = page.locator("table", has=page.locator("th", has_text="Attempt"))
    name = table.locator("th", has_text="Test").first
    share = name.evaluate("th => th.offsetWidth / th.closest('table').offsetWidth")
    assert share >= 0.45
    # Each attempt's row holds its node id on at most two lines.
    row = table.locator("tbody tr").first
    assert row.evaluate("tr => tr.offsetHeight") <= 64
    expect(row.locator(".badge")).to_be_visible()
    assert page.evaluate(SPLIT_WORDS) == []
    no_overflow(page, width)
