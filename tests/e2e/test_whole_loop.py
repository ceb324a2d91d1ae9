"""The whole loop on the production shape, as a team lives it.

Separate processes: the web as the Procfile runs it and one Celery worker serving the
`default`, `device` and `relay` queues, both on PostgreSQL and a Redis database
of this test's own; the relay simulator plays PyTorch's relay; Chromium plays
the reviewers. A merged PR dispatched by the relay is gated, run in shards on
the reference device, classified and reported back; the selection pipeline
proposes a config, which two reviewers turn into a merged config version.
"""

import os
import re
import shutil
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import expect

from crcr_site.celery import app
from demo.localgit import PyTorchShapedRepo
from reproducibility.models import Bundle
from runs.models import Dispatch, Failure, Run
from runs.relay.simulator import RelaySimulator
from selection import configwriter, pipeline
from selection.models import ConfigVersion, Proposal, SelectionRun
from selection.tasks import run_selection
from tests.dispatches import pr_dispatch
from tests.factories import PASSWORD, make_backend, make_config, make_token, make_user
from tests.runs.conftest import Http
from tests.waiting import wait_for
from tests.workers import (
    environment,
    free_port,
    own_redis,
    results_once,
    start_web,
    start_worker,
    stop,
)

BUNDLED = Path(settings.BASE_DIR) / "tests" / "upstream"
REPO = "acme/accel-backend"
# Two files of the bundled tree: device-type OpInfo tests (lgamma has no kernel on
# the reference device) and dtype tests with an xfail and a skip.
FILES = ["test/conftest.py", "test/test_ops_reuse.py", "test/test_dtypes_reuse.py"]
CONFIG = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_ops_reuse.py
      unlisted_test_mode: mandatory_success
    - path: ${TORCH_ROOT}/test/test_dtypes_reuse.py
      unlisted_test_mode: mandatory_success
      tests:
        # Why: the test asserts a wrong value on every device.
        - names: [TestTensorBasics::test_known_wrong_expectation]
          mode: xfail
        # Why: CPU-only test, nothing to learn on the device.
        - names: [TestTensorBasics::test_cpu_only]
          mode: skip
  global:
    supported_dtypes: [{name: float32}, {name: float64}, {name: int64}, {name: bool}]
"""


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "pytorch"
    for name in [*FILES, "pytest.ini", "refdev_faults.yaml"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(BUNDLED / name, root / name)
    return root


@pytest.fixture
def simulator(tmp_path):
    with RelaySimulator(token="relay-s3cret", allowlist={REPO: "L2"}) as sim:
        yield sim


@pytest.fixture
def services(transactional_db, tmp_path, tree, simulator):
    """The web and a worker for every queue, as separate processes on their own broker."""
    upstream = PyTorchShapedRepo(tmp_path / "upstream")
    upstream.commit("release/2.14", "[release/2.14] Bump version")
    upstream.commit("main", "Make add faster (#4242)")
    token = tmp_path / "relay-token"
    token.write_text("relay-s3cret\n")
    backend = make_backend(
        "acme", repository=REPO, relay_url=simulator.url, relay_token=f"file:{token}",
        tracked_release="release/2.14",
    )  # fmt: skip
    make_config(backend, CONFIG)
    port = free_port()
    with own_redis() as broker:
        env = environment(
            tmp_path, broker, TORCH_ROOT=str(tree), CRCR_UPSTREAM=f"git:{upstream.path}",
            CRCR_TEST_TIMEOUT="60", CRCR_PUBLIC_URL=f"http://127.0.0.1:{port}",
        )  # fmt: skip
        log = tmp_path / "processes.log"
        worker = start_worker(env, "e2e", log, queues="default,device,relay")
        web = None
        try:
            web = start_web(env, port, log)
            yield backend, f"http://127.0.0.1:{port}", broker
        finally:
            stop(worker, web)
            print(log.read_text()[-5000:])


def picture(page, name: str) -> None:
    """With CRCR_SCREENSHOTS=<folder> the README's pictures are made from this run's
    pages (`CRCR_SCREENSHOTS=docs/screenshots .venv/bin/pytest tests/e2e/test_whole_loop.py`)."""
    if folder := os.environ.get("CRCR_SCREENSHOTS"):
        page.screenshot(path=str(Path(folder) / f"{name}.png"))


def pages_of(run: Run, selection: SelectionRun, change_url: str) -> list[str]:
    """Every kind of page this run's data fills, as paths."""
    proposal = Proposal.objects.filter(backend=run.backend).first()
    assert proposal is not None
    slug = run.backend.slug
    return [
        "/", "/runs/", f"/runs/{run.uuid}/", f"/runs/{run.uuid}/reproducibility/",
        f"/runs/{run.uuid}/log/", f"/runs/{run.uuid}/log/shard-0/",
        "/dispatches/", f"/dispatches/{run.trigger.dispatch.uuid}/", "/review/",
        f"/review/{proposal.uuid}/", "/config-prs/", change_url, change_url + "?view=split",
        f"/configs/{slug}/", f"/configs/{slug}/v2/blame/", "/operators/",
        f"/selection-runs/{selection.uuid}/",
    ]  # fmt: skip


def widest(page, width: int) -> list[str]:
    """The innermost elements that stick out of the window, for a failure's message."""
    return page.evaluate(
        """width => [...document.querySelectorAll('body *')]
          .filter(e => e.getBoundingClientRect().right > width && e.children.length === 0)
          .slice(0, 5).map(e => e.tagName + ' ' + e.className + ': ' + e.textContent.slice(0, 60))""",
        width,
    )


def sign_in(page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="HUD")).to_be_visible()


def test_a_merged_pr_is_run_classified_relayed_bundled_and_its_config_reviewed(
    services, simulator, browser
):
    backend, base_url, broker = services
    make_user("rita", "reviewer")
    make_user("otto", "reviewer")
    forwarder = Http(base_url, make_token(make_user("relay-forwarder", role="machine"), backend))

    # The relay dispatches a merged PR; the backend's forwarder hands it to crcr.
    body = pr_dispatch(number=4242)
    client_payload = simulator.dispatch(body["delivery_id"], REPO, body["payload"])
    status, answer = forwarder.post("/api/dispatches/?backend=acme", client_payload)
    assert status == 202, answer

    run = wait_for(
        lambda: Run.objects.filter(backend=backend, status__in=Run.FINISHED).first(),
        timeout=900,
        what="the run to finish on the worker",
    )
    assert Dispatch.objects.get().verdict == "accepted"
    results_once(run)
    counts = run.test_counts()
    assert counts["passed"] > 0 and counts["failed"] > 0
    unsupported = Failure.objects.filter(run=run, category="unsupported_op")
    assert unsupported.exists() and {f.op_name for f in unsupported} == {"lgamma"}
    assert run.status == "failed"  # lgamma's failures are regressions: no green run yet

    # The HUD heard of it: in_progress, then completed with the failure, by the relay queue.
    def relayed() -> dict[str, dict]:
        ours = [a for a in simulator.accepted if a.key.delivery_id == body["delivery_id"]]
        return {a.status: a.body for a in ours}

    wait_for(lambda: relayed().keys() >= {"in_progress", "completed"}, what="both callbacks")
    assert relayed()["completed"]["workflow"]["conclusion"] == "failure"
    assert len(simulator.accepted) == 2  # each transition once

    bundle = wait_for(
        lambda: Bundle.objects.filter(run=run, status="ready").first(), what="the repro bundle"
    )

    # The selection pipeline proposes a config for the device, on the worker.
    selection = pipeline.start_run(backend, SelectionRun.Kind.SELECT)
    with app.connection_for_write(broker) as connection:
        run_selection.apply_async(args=[selection.pk], connection=connection, queue="device")
    selection = wait_for(
        lambda: SelectionRun.objects.filter(pk=selection.pk, finished_at__isnull=False).first(),
        timeout=900,
        what="the selection run",
    )
    assert selection.status == "done", selection.error
    verified = Proposal.objects.filter(backend=backend, stage="refine", status="pending")
    assert verified.exists()
    proposed = verified.count()

    # Two reviewers in Chromium: one approves the device-verified proposals and opens
    # a config PR, the other approves and merges it; the merged YAML validates.
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    try:
        sign_in(page, base_url, "rita")
        expect(page.locator("table.hud")).to_contain_text("#4242")
        picture(page, "hud")
        page.goto(f"{base_url}/runs/{run.uuid}/")
        expect(page.get_by_text("unsupported op")).to_be_visible()
        expect(page.locator("body")).to_contain_text("lgamma")
        picture(page, "run")
        page.goto(f"{base_url}/runs/{run.uuid}/reproducibility/")
        with page.expect_download() as download_info:
            page.get_by_role("link", name=re.compile("Download")).first.click()
        assert Path(download_info.value.path()).stat().st_size == bundle.size

        page.goto(f"{base_url}/review/?stage=refine&status=pending")
        expect(page.get_by_text(f"{proposed} proposal")).to_be_visible()
        picture(page, "review-queue")
        page.set_viewport_size({"width": 1024, "height": 768})
        expect(page.get_by_role("button", name="Approve", exact=True).first).to_be_in_viewport()
        page.set_viewport_size({"width": 1280, "height": 800})
        page.get_by_role("button", name=f"Approve all {proposed} matching").click()
        page.get_by_role("button", name=f"Approve {proposed}").click()  # asked first
        page.get_by_role("button", name="Open a config PR for Acme").click()
        expect(page.locator("div.yaml-diff")).to_contain_text("# Why:")
        picture(page, "config-pr")
        change_url = page.url
        page.get_by_role("button", name="Sign out").click()

        sign_in(page, base_url, "otto")
        page.goto(change_url)
        page.get_by_role("button", name="Approve").click()
        page.get_by_role("button", name="Merge").click()
        expect(page.get_by_text("Merged as Acme config v2.")).to_be_visible()
        with page.expect_download() as download_info:
            page.get_by_role("link", name="Download crcr-config.yaml").click()
        text = Path(download_info.value.path()).read_text()

        # Every page of this run's data fits a 1,440 and a 1,024 px window.
        change_path = change_url.removeprefix(base_url)
        for width in (1440, 1024):
            page.set_viewport_size({"width": width, "height": 800})
            for path in pages_of(run, selection, change_path):
                page.goto(base_url + path)
                wide = page.evaluate("document.documentElement.scrollWidth")
                assert wide <= width, f"{path}: {wide} px in {width}: {widest(page, width)}"
    finally:
        context.close()
    assert text == ConfigVersion.objects.get(backend=backend, number=2).yaml_text
    configwriter.validate(text, BUNDLED)
    assert Proposal.objects.filter(backend=backend, status="merged").count() == proposed
