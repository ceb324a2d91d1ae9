"""Failure excerpts (issue 35's findings): never cut in the middle of a word, and headed by
the real error line, not a frame's `self = <…testMethod=…>`."""

import re
from pathlib import Path

import pytest
from crcr_reuse.outcomes import TestRecord

from runs.relay import protocol
from runs.triage import error_line
from selection.refine import _import_failure
from tests.factories import make_backend, make_config, make_user
from tests.reproducibility.builders import ADDCMUL_TRACE, MISMATCH, add_result, make_run

FIXTURES = Path(__file__).parent / "fixtures" / "failures"


def whole_words(excerpt: str, text: str) -> bool:
    """Every word of the excerpt (less its ellipsis) is a word of the text."""
    words = set(text.split())
    return all(word in words for word in excerpt.strip("…").split())


@pytest.mark.parametrize("name", sorted(path.name for path in FIXTURES.glob("*.txt")))
def test_a_relayed_failure_message_and_trace_end_at_whole_words(name):
    text = (FIXTURES / name).read_text()
    detail = protocol.build_callback(
        {"event_type": "nightly", "delivery_id": "a" * 40, "payload": {}},
        status="completed", conclusion="failure", name="crcr", url="https://crcr.example/r/",
        run_id="1", run_attempt=1, job_name="acme", check_run_id=1,
        started_at="2026-12-01T00:00:00Z", completed_at="2026-12-01T00:01:00Z",
        test_results={"passed": 0, "failed": 1, "skipped": 0, "total": 1},
        failed_tests_detail=[{"name": "test_x", "message": text.replace("\n", " "),
                              "stacktrace": text}],
    )["workflow"]["failed_tests_detail"][0]  # fmt: skip
    message, trace = detail["message"], detail["stacktrace"]
    assert len(message.encode()) <= protocol.MAX_MESSAGE_BYTES
    assert len(trace.encode()) <= protocol.MAX_STACKTRACE_BYTES
    assert whole_words(message, text), message[-40:]
    assert whole_words(trace, text), trace[:40]


def test_the_error_line_of_a_unittest_failure_is_its_assertion_not_self():
    assert error_line(ADDCMUL_TRACE) == "AssertionError: Tensor-likes are not close!"


@pytest.mark.django_db
def test_the_run_page_heads_a_failure_with_its_error_line(client, settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path)
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="failed")
    (result,) = add_result(run, MISMATCH, ["failed"], "other", "regression")
    result.message = ADDCMUL_TRACE
    result.save()
    client.force_login(make_user("vera"))
    html = client.get(f"/runs/{run.uuid}/").content.decode()
    assert '<span class="muted">AssertionError: Tensor-likes are not close!</span>' in html
    assert "self = &lt;" not in html
    attempts = client.get(f"/runs/{run.uuid}/reproducibility/").content.decode()
    assert re.search(r">AssertionError: Tensor-likes are not close!</a>", attempts)
    assert "self = &lt;" not in attempts


def test_a_proposals_failure_evidence_starts_and_ends_at_whole_words():
    text = (FIXTURES / "unsupported_op_1.txt").read_text()
    evidence = _import_failure(
        TestRecord("test/test_x.py::test_empty_on_device", "error", message=text)
    )
    assert evidence["message"].startswith("…") and len(evidence["message"]) <= 600
    assert whole_words(evidence["message"], text), evidence["message"][:40]
    assert evidence["line"].startswith(
        "NotImplementedError: Could not run 'aten::empty.memory_format'"
    )
    assert whole_words(evidence["line"], text) and len(evidence["line"]) <= 300
