"""Every test's fate, findable from anywhere: the run page lists what the config left out of
the run, per file, with the reason, the config line and its blame; the header's search takes
a test id in any of its forms and shows its page; the review queue's search takes the names
a run gives tests."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from runs.models import Run, Shard, TestResult
from selection import inventory
from selection.models import Proposal
from tests.factories import make_backend, make_config, make_pr_run, make_proposal, make_user

TREE = Path(settings.BASE_DIR) / "tests" / "upstream"
SHA = "a" * 40  # make_pr_run's PyTorch SHA
# Shaped like the demo's config (tests/upstream/crcr-config.yaml), with a config skip.
CONFIG = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_planted_faults.py
      unlisted_test_mode: mandatory_success
      tests:
        # Why: hangs the device's queue until the shard times out.
        - names: [TestPlantedFaults::test_cumprod_hangs]
          mode: skip
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: skip
      tests:
        # Why: failed on the device before its bool kernels landed.
        - names: [TestPlainMath::test_passes_today]
          mode: xfail_strict
    - path: ${TORCH_ROOT}/test/test_dtypes_reuse.py
      unlisted_test_mode: mandatory_success
      tests:
        # Why: CPU-only tests, nothing to learn on the device.
        - names: ["TestTensorBasics::test_cpu_.*"]
          mode: skip
"""
SKIP_LINE = 7  # the `- names: [TestPlantedFaults::test_cumprod_hangs]` line
RAN = {  # the run's results, named as the run names them
    "test/test_planted_faults.py::TestPlantedFaultsPRIVATEUSE1::"
    "test_addcmul_matches_cpu_privateuseone_float64": ("test_addcmul_matches_cpu", "failed"),
    "test/test_planted_faults.py::TestPlantedFaultsPRIVATEUSE1::"
    "test_lerp_crashes_the_process_privateuseone_float32": (
        "test_lerp_crashes_the_process", "crashed",
    ),
}  # fmt: skip


def planted_run(status: str = Run.Status.FAILED) -> Run:
    """The reference-style backend, its config, the bundled tree's inventory, a run with two
    results of test_planted_faults.py, and a pending proposal about the config-skipped test."""
    backend = make_backend("reference", name="Reference device")
    make_config(backend, CONFIG)
    inventory.scan(TREE, SHA, embed=False)
    run = make_pr_run(backend, status=status, job_name="reference (privateuse1)")
    shard = Shard.objects.create(run=run, index=0)
    for node_id, (test, outcome) in RAN.items():
        TestResult.objects.create(
            shard=shard, run=run, node_id=node_id, file_path="test/test_planted_faults.py",
            class_name="TestPlantedFaults", test_name=test, outcome=outcome,
        )  # fmt: skip
    make_proposal(
        backend, file_path="test/test_planted_faults.py", class_name="TestPlantedFaults",
        test_name="test_cumprod_hangs", mode=Proposal.Mode.SKIP,
        reason="hangs the device's queue", stage=Proposal.Stage.REFINE,
    )  # fmt: skip
    make_proposal(backend, reason="an unrelated proposal")
    return run


def page(client, url: str, status: int = 200) -> str:
    client.force_login(User.objects.filter(username="vera").first() or make_user("vera"))
    response = client.get(url)
    assert response.status_code == status
    return response.content.decode()


def left_out_rows(html: str) -> dict[str, str]:
    """The run page's left-out rows by test, each row's text and links."""
    section = html.partition('id="left-out"')[2]
    rows = re.findall(r"<tr><td><a [^>]*><code>([^<]+)</code></a></td>(.*?)</tr>", section, re.S)
    return dict(rows)


@pytest.mark.django_db
def test_the_run_page_lists_per_file_what_the_config_left_out_with_reason_and_line(client):
    run = planted_run()

    html = page(client, f"/runs/{run.uuid}/")

    assert re.search(r'<dt>Left out by the config</dt><dd><a href="#left-out">17 tests</a>', html)
    rows = left_out_rows(html)
    hangs = rows["TestPlantedFaults::test_cumprod_hangs"]
    assert "skipped" in hangs and ">skip<" in hangs
    assert "hangs the device&#x27;s queue until the shard times out" in hangs
    config = "/configs/reference/v1/"
    assert f'href="{config}#L{SKIP_LINE}"' in hangs
    assert f'href="{config}blame/#L{SKIP_LINE}"' in hangs
    # A test the file does not list, in a file that skips what it does not list.
    assert "unlisted" in rows["TestPlainMath::test_wrong_on_purpose"]
    # A config regex skips both CPU-only tests.
    assert "skipped" in rows["TestTensorBasics::test_cpu_only"]
    # Meant to run, yet no result in the finished run.
    assert "deselected" in rows["TestPlantedFaults::test_lgamma_is_unsupported"]
    # The tests that ran are not listed.
    assert "TestPlantedFaults::test_addcmul_matches_cpu" not in rows
    assert "TestPlantedFaults::test_lerp_crashes_the_process" not in rows
    # Files the config does not list: never selected.
    unlisted = html.partition("does not list: never selected")[2]
    assert "test/test_ops_reuse.py" in unlisted and "test/test_modules_reuse.py" in unlisted


@pytest.mark.django_db
def test_a_running_run_lists_no_test_as_deselected_before_it_ends(client):
    run = planted_run(status=Run.Status.RUNNING)
    Run.objects.filter(pk=run.pk).update(finished_at=None)

    rows = left_out_rows(page(client, f"/runs/{run.uuid}/"))

    assert "skipped" in rows["TestPlantedFaults::test_cumprod_hangs"]
    assert "TestPlantedFaults::test_lgamma_is_unsupported" not in rows


@pytest.mark.django_db
def test_without_an_inventory_the_run_page_says_where_the_list_comes_from(client):
    backend = make_backend("reference")
    make_config(backend, CONFIG)
    run = make_pr_run(backend)

    html = page(client, f"/runs/{run.uuid}/")

    assert "No inventory of the upstream tests yet" in html


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name",
    [
        "TestPlantedFaults::test_cumprod_hangs",
        "TestPlantedFaultsPRIVATEUSE1::test_cumprod_hangs_privateuseone",
        "TestPlantedFaultsPRIVATEUSEONE::test_cumprod_hangs_privateuseone_float32",
        "test/test_planted_faults.py::TestPlantedFaultsPRIVATEUSE1::test_cumprod_hangs_privateuseone",
        "test/test_planted_faults.py::TestPlantedFaults::test_cumprod_hangs",
    ],
)
def test_the_header_search_finds_a_test_by_any_of_its_names(client, name):
    planted_run()

    html = page(client, f"/tests/?q={name}")

    assert "<code>TestPlantedFaults::test_cumprod_hangs</code>" in html
    backend = html.partition("Reference device")[2]
    assert '<span class="mode mode-skip">skip</span>' in backend
    assert "hangs the device&#x27;s queue until the shard times out" in backend
    assert f'href="/configs/reference/v1/#L{SKIP_LINE}"' in backend
    assert f'href="/configs/reference/v1/blame/#L{SKIP_LINE}"' in backend
    # Its history of decisions: the proposal to skip it.
    assert "hangs the device&#x27;s queue</td>" in backend
    assert "stage 4: refined on the device" in backend


@pytest.mark.django_db
def test_the_test_page_shows_a_test_s_last_outcomes_as_the_run_named_it(client):
    run = planted_run()

    html = page(client, "/tests/?q=TestPlantedFaultsPRIVATEUSE1::test_addcmul_matches_cpu")

    assert '<span class="mode mode-mandatory_success">mandatory_success</span>' in html
    assert "not listed: the file&#x27;s unlisted_test_mode is mandatory_success" in html
    assert f'href="/runs/{run.uuid}/"' in html
    assert ">failed<" in html and "test_addcmul_matches_cpu_privateuseone_float64" in html


@pytest.mark.django_db
def test_a_config_name_pattern_finds_the_tests_it_names(client):
    planted_run()

    html = page(client, "/tests/?q=TestTensorBasics::test_cpu_.*")

    assert "<code>TestTensorBasics::test_cpu_only</code>" in html
    assert '<span class="mode mode-skip">skip</span>' in html
    assert "CPU-only tests, nothing to learn on the device" in html


@pytest.mark.django_db
def test_each_backend_shows_its_own_fate_of_the_test(client):
    planted_run()
    other = make_backend("other", name="Other device")
    make_config(other, "test_suite_config:\n  files: []\n")

    html = page(client, "/tests/?q=TestPlantedFaults::test_cumprod_hangs")

    other_part = html.partition("Other device")[2]
    assert "not in the config" in other_part and "lists not" in other_part
    assert "hangs the device" not in other_part.partition("Reference device")[0]


@pytest.mark.django_db
def test_an_unknown_test_says_so_and_a_too_long_one_is_refused_next_to_the_box(client):
    planted_run()

    assert "No test is named" in page(client, "/tests/?q=TestNothing::test_nowhere")
    refused = page(client, "/tests/?q=" + "x" * 501, status=400)
    assert 'class="error inline-error"' in refused and "at most 500 characters" in refused


@pytest.mark.django_db
def test_every_page_has_the_test_search_in_its_header(client):
    run = planted_run()

    for url in ("/", f"/runs/{run.uuid}/", "/review/", "/configs/reference/"):
        html = page(client, url)
        assert 'action="/tests/"' in html.partition("</header>")[0], url


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name",
    [
        "TestPlantedFaultsPRIVATEUSE1::test_cumprod_hangs_privateuseone",
        "test/test_planted_faults.py::TestPlantedFaultsPRIVATEUSEONE::"
        "test_cumprod_hangs_privateuseone_float32",
    ],
)
def test_the_queue_search_finds_a_proposal_by_the_name_a_run_gives_its_test(client, name):
    planted_run()

    html = page(client, f"/review/?q={name}")

    assert "hangs the device&#x27;s queue" in html
    assert "an unrelated proposal" not in html


@pytest.mark.django_db
def test_a_file_with_more_left_out_tests_than_listed_says_how_many_more(client, monkeypatch):
    from selection import fates

    run = planted_run()
    monkeypatch.setattr(fates, "ROWS_PER_FILE", 2)

    html = page(client, f"/runs/{run.uuid}/")

    plain = html.partition("<code>test/test_plain_reuse.py</code>")[2].partition("</details>")[0]
    assert "5 unlisted" in plain and "1 deselected" in plain
    assert plain.count("<tr><td>") == 2
    assert "… and 4 more" in plain


@pytest.mark.django_db
def test_a_test_s_page_is_for_signed_in_people_only(client):
    planted_run()

    response = client.get("/tests/?q=TestPlantedFaults::test_cumprod_hangs")

    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_without_an_inventory_the_test_page_says_so_and_still_shows_the_decisions(client):
    backend = make_backend("reference", name="Reference device")
    make_config(backend, CONFIG)
    make_proposal(
        backend, file_path="test/test_planted_faults.py", class_name="TestPlantedFaults",
        test_name="test_cumprod_hangs", mode=Proposal.Mode.SKIP, reason="hangs the device's queue",
    )  # fmt: skip

    html = page(client, "/tests/?q=TestPlantedFaultsPRIVATEUSE1::test_cumprod_hangs_privateuseone")

    assert "Config v1: no inventory of the upstream tests yet" in html
    assert "hangs the device&#x27;s queue</td>" in html
    assert "could not be read" not in html
