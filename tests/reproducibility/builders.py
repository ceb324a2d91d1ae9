"""Runs with shards, results and failures, made directly in the database (no execution)."""

import json
from typing import Any
from xml.sax.saxutils import escape

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from runs.models import Artifact, Backend, Dispatch, Failure, Run, Shard, TestResult, Trigger
from selection.models import ConfigVersion

MISMATCH = "test/test_x.py::TestXPRIVATEUSE1::test_addcmul_privateuseone_float64"
PASSING = "test/test_x.py::TestXPRIVATEUSE1::test_add_privateuseone_float32"


def make_dispatch(backend: Backend, pr_number: int = 4242) -> Dispatch:
    payload = {"action": "closed", "pull_request": {"number": pr_number}}
    body = {"event_type": "pull_request", "delivery_id": f"d-{pr_number}", "payload": payload}
    return Dispatch.objects.create(
        backend=backend, delivery_id=f"d-{pr_number}", event_type="pull_request",
        raw_body=json.dumps(body), payload=payload, action="closed", pr_number=pr_number,
        base_ref="main", head_sha="c" * 40, verdict=Dispatch.Verdict.ACCEPTED,
    )  # fmt: skip


def make_run(
    backend: Backend,
    config: ConfigVersion,
    sha: str = "a" * 40,
    status: str = "passed",
    **extra: Any,
) -> Run:
    trigger = Trigger.objects.create(
        backend=backend, kind=extra.pop("kind", Trigger.Kind.MANUAL), pytorch_sha=sha,
        dispatch=extra.pop("dispatch", None),
    )  # fmt: skip
    fields = {"job_name": backend.slug, "backend_version": "1.0", "test_suite_sha": sha}
    return Run.objects.create(
        trigger=trigger, backend=backend, pytorch_sha=sha, config_version=config,
        status=status, **(fields | extra),
    )  # fmt: skip


def make_artifact(name: str = "torch", sha: str = "1" * 64, kind: str = "pytorch") -> Artifact:
    artifact, _ = Artifact.objects.get_or_create(
        sha256=sha, defaults={"kind": kind, "name": name, "version": "2.13.0", "location": "here"}
    )
    return artifact


def add_result(
    run: Run, node_id: str, outcomes: list[str], category: str = "", verdict: str = ""
) -> list[TestResult]:
    """One test's attempts in shard 0; the first failing one gets a Failure when asked."""
    shard, _ = Shard.objects.get_or_create(
        run=run, index=0, defaults={"status": Shard.Status.DONE, "estimated_seconds": 3}
    )
    shard.test_ids = [*shard.test_ids, node_id]
    shard.save(update_fields=["test_ids"])
    results = [
        TestResult.objects.create(
            shard=shard,
            run=run,
            attempt=n,
            node_id=node_id,
            file_path=node_id.split("::")[0],
            test_name=node_id.rsplit("::", 1)[1],
            outcome=outcome,
            duration=0.5,
            message="Tensor-likes are not close!" if outcome == "failed" else "",
        )  # fmt: skip
        for n, outcome in enumerate(outcomes, start=1)
    ]
    if category:
        first = next(r for r in results if r.outcome in TestResult.FAILING)
        Failure.objects.create(result=first, run=run, category=category, verdict=verdict)
    return results


# A failure as pytest reports a device-instantiated unittest test (the demo's planted fault).
ADDCMUL_TRACE = """self = <test_x.TestXPRIVATEUSE1 testMethod=test_addcmul_privateuseone_float64>
device = 'privateuseone:0', dtype = torch.float64

    @dtypes(torch.float64)
    def test_addcmul(self, device, dtype):
        a, b, c = (make_tensor((8, 8), device=device, dtype=dtype) for _ in range(3))
        expected = torch.addcmul(a.cpu(), b.cpu(), c.cpu(), value=0.5)
>       self.assertEqual(torch.addcmul(a, b, c, value=0.5), expected, exact_device=False)
E       AssertionError: Tensor-likes are not close!
E
E       Mismatched elements: 64 / 64 (100.0%)
E       Greatest absolute difference: 0.5 at index (0, 0) (up to 1e-07 allowed)

test/test_x.py:15: AssertionError"""


def store_shard_output(run: Run, trace: str = ADDCMUL_TRACE, padding: int = 0) -> str:
    """Shard 0's first process as a device host stores it: its JUnit XML (MISMATCH failed
    with `trace`, PASSING passed) and its output (`padding` lines of progress before the
    failure's section). Returns the output's storage name."""
    folder = f"runs/{run.uuid}/shard-0/attempt-1"
    cases = (
        '<testcase classname="test.test_x.TestXPRIVATEUSEONE" '
        'name="test_addcmul_privateuseone_float64" time="0.5">'
        f'<failure message="AssertionError: Tensor-likes are not close!">{escape(trace)}'
        "</failure></testcase>"
        '<testcase classname="test.test_x.TestXPRIVATEUSEONE" '
        'name="test_add_privateuseone_float32" time="0.1"/>'
    )
    junit = f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>'
    output = "".join(f"test/test_x.py::test_{n} PASSED\n" for n in range(padding))
    output += (
        "=================================== FAILURES ===================================\n"
        "_____ TestXPRIVATEUSEONE.test_addcmul_privateuseone_float64 _____\n"
        f"{trace}\n"
        "=========================== short test summary info ============================\n"
        "1 failed, 1 passed in 1.20s\n"
    )
    default_storage.save(f"{folder}/p001.junit.xml", ContentFile(junit.encode()))
    return default_storage.save(f"{folder}/p001.log", ContentFile(output.encode()))
