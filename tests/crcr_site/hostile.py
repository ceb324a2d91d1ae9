"""A small world whose test names, messages and log lines carry HTML, and every page showing it.

`build()` plants `<script>alert(1)</script>` as a test's name (and an `<img onerror>`
in a failure message) in every kind of record a page shows; `pages()` names each
page with its URL and, where it has one, the URL of a reviewer-only action it offers.
"""

import json
from dataclasses import dataclass
from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone

from reproducibility.models import Bisection, Rerun
from runs.models import Dispatch, Failure, RelayCallback, Run, Shard, TestResult, Trigger
from selection.models import ConfigChange, OpUsage, Proposal, SelectionRun
from tests.factories import make_backend, make_config, make_proposal

SCRIPT = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
IMG = "<img src=x onerror=alert(2)>"
NODE = f"test/test_ops.py::TestOpsPRIVATEUSE1::{SCRIPT}"
CONFIG = f"test_suite_config:\n  global:\n    supported_ops: [add]\n  files: []  # {SCRIPT}\n"


@dataclass
class Page:
    name: str
    url: str
    reviewer_action: str = ""  # a URL only a reviewer's page links or posts to


def _run(backend, config, sha, status, job="acme", dispatch=None, **fields) -> Run:
    trigger = Trigger.objects.create(
        backend=backend, kind="dispatch" if dispatch else "manual", pytorch_sha=sha,
        dispatch=dispatch,
    )  # fmt: skip
    now = timezone.now()
    return Run.objects.create(
        trigger=trigger, backend=backend, job_name=job, backend_version="2.0", pytorch_sha=sha,
        test_suite_sha=sha, config_version=config, status=status, started_at=now,
        finished_at=now, **fields,
    )  # fmt: skip


def _result(run: Run, node_id: str, outcome: str, message: str = "") -> TestResult:
    shard, _ = Shard.objects.get_or_create(
        run=run, index=0, defaults={"status": "done", "estimated_seconds": 3}
    )
    if shard.run.status == Run.Status.FAILED:
        shard.error, shard.worker = f"pytest exited: {SCRIPT}", "host-1"
        shard.save(update_fields=["error", "worker"])
    return TestResult.objects.create(
        shard=shard, run=run, node_id=node_id, file_path=node_id.split("::")[0],
        class_name=node_id.split("::")[1], test_name=node_id.rsplit("::", 1)[1],
        outcome=outcome, message=message, duration=0.5,
    )  # fmt: skip


def build() -> list[Page]:
    backend = make_backend("acme", version="2.0", extra_versions=[f"1.9{SCRIPT}"])
    config = make_config(backend, CONFIG)
    payload = {
        "action": "closed",
        "pull_request": {"number": 4242, "labels": [{"name": SCRIPT}]},
    }
    dispatch = Dispatch.objects.create(
        backend=backend, delivery_id="d-4242", event_type="pull_request",
        raw_body=json.dumps({"event_type": "pull_request", "payload": payload}), payload=payload,
        action="closed", pr_number=4242, base_ref="main", head_sha="c" * 40,
        verdict=Dispatch.Verdict.ACCEPTED, verdict_reason=f"merged into main {SCRIPT}",
    )  # fmt: skip
    green = _run(backend, config, "a" * 40, "passed")
    _result(green, NODE, "passed")
    red = _run(
        backend, config, "b" * 40, "failed", dispatch=dispatch,
        changed_since_green=["PyTorch"], error=f"one shard said {SCRIPT}",
    )  # fmt: skip
    failed = _result(red, NODE, "failed", f"AssertionError: {IMG}\nlog line {SCRIPT}")
    Failure.objects.create(
        result=failed, run=red, category="other", decisive_line=f"AssertionError: {IMG} {SCRIPT}",
        verdict="regression", verdict_reason=f"it passed in the last green run ({SCRIPT})",
    )  # fmt: skip
    _result(red, "test/test_ops.py::TestOpsPRIVATEUSE1::test_add", "passed")
    extra = _run(backend, config, "b" * 40, "passed", job=f"acme (backend 1.9{SCRIPT})")
    _result(extra, NODE, "passed")
    RelayCallback.objects.create(
        run=red, delivery_id="d-4242", workflow_name="crcr", job_name="acme", hud_run_id="1",
        transition="completed", body={}, status="rejected", last_status_code=400,
        last_response=f"bad field {SCRIPT}",
    )  # fmt: skip
    again = _run(backend, config, "b" * 40, "failed")
    _result(again, NODE, "failed", f"still {SCRIPT}")
    rerun = Rerun.objects.create(original=red, run=again)
    bisection = Bisection.objects.create(
        good_run=green, bad_run=red, test_ids=[NODE], commits=["b" * 40], status="found",
        first_bad_sha="b" * 40, message=f"first bad commit found {SCRIPT}",
        steps=[{"index": 0, "sha": "b" * 40, "subject": f"Change {SCRIPT}", "verdict": "bad",
                "detail": f"it failed: {SCRIPT}", "tested": True, "outcomes": {NODE: "failed"}}],
    )  # fmt: skip
    proposal = make_proposal(backend, test_name=SCRIPT, reason=f"fails with {SCRIPT}")
    change = ConfigChange.objects.create(
        backend=backend, title=f"Skip {SCRIPT}", base=config, proposed_text=CONFIG + "# more\n"
    )
    Proposal.objects.filter(pk=proposal.pk).update(status="approved", config_change=change)
    other = make_proposal(backend, test_name=f"{SCRIPT}_two", reason=f"fails with {SCRIPT}")
    for test, op in ((SCRIPT, "lgamma.default"), ("test_add", "add.Tensor")):
        OpUsage.objects.create(
            file_path="test/test_ops.py", class_name="TestOps", test_name=test, op=op
        )
    selection = SelectionRun.objects.create(
        backend=backend, kind="enable_op", argument="lgamma", status="failed",
        stage=f"running {SCRIPT}", error=f"device said {SCRIPT}",
    )  # fmt: skip
    return [
        Page("hud", reverse("runs:hud")),
        Page("run list", reverse("runs:run_list"), reverse("runs:trigger_create")),
        Page("run detail", reverse("runs:run_detail", args=[red.uuid])),
        Page("dispatch list", reverse("runs:dispatch_list")),
        Page("dispatch detail", reverse("runs:dispatch_detail", args=[dispatch.uuid])),
        Page(
            "review queue",
            reverse("selection:proposal_list"),
            reverse("selection:proposal_review", args=[other.uuid]),
        ),
        Page("proposal detail", reverse("selection:proposal_detail", args=[other.uuid])),
        Page("config PR list", reverse("selection:configchange_list")),
        Page(
            "config PR detail",
            reverse("selection:configchange_detail", args=[change.uuid]),
            reverse("selection:configchange_approve", args=[change.uuid]),
        ),
        Page("operators", reverse("selection:operator_list"), reverse("selection:operator_enable")),
        Page("backend config", reverse("selection:backendconfig_detail", args=[backend.slug])),
        Page("config blame", reverse("selection:configversion_blame", args=[backend.slug, 1])),
        Page("selection run", reverse("selection:selectionrun_detail", args=[selection.uuid])),
        Page(
            "reproducibility record",
            reverse("reproducibility:record_detail", args=[red.uuid]),
            reverse("reproducibility:bisection_create", args=[red.uuid]),
        ),
        Page("rerun", reverse("reproducibility:rerun_detail", args=[rerun.uuid])),
        Page("bisection", reverse("reproducibility:bisection_detail", args=[bisection.uuid])),
        Page(
            "test",
            reverse("selection:test_search") + "?" + urlencode({"q": f"TestViewOps::{SCRIPT}"}),
        ),
    ]
