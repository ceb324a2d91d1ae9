"""Stage 3: the deterministic classifier's rules and the language-model classifier's validation."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from selection import pipeline
from selection.capabilities import Capabilities
from selection.proposers import (
    ChatClassifier,
    ClassifierError,
    Evidence,
    EvidenceClassifier,
    LLMSettings,
    configured_classifier,
)

CAPS = Capabilities(
    ops=frozenset({"add", "empty", "uniform_", "abs"}),
    dtypes=frozenset({"float32", "float64"}),
    composite=frozenset({"clone.default"}),
)
KEY = ("test/test_ops.py", "TestCommon", "test_matches_cpu")


def evidence(**fields: Any) -> Evidence:
    base = {"key": KEY, "captured": True, "variants": 4, "passed": 4, "dtypes": ["float32"]}
    return Evidence(**(base | fields))


def classify(**fields: Any) -> Any:
    return EvidenceClassifier().classify(evidence(**fields), CAPS)


def test_a_device_restriction_that_excludes_the_backend_means_skip():
    verdict = classify(restrictions=["onlyCUDA"])
    assert verdict.mode == "skip" and "@onlyCUDA" in verdict.reason
    assert classify(restrictions=["only_for=cuda"]).mode == "skip"
    assert classify(restrictions=["onlyNativeDeviceTypes"]).mode == "mandatory_success"


def test_a_test_needing_two_devices_is_skipped_one_that_works_with_one_is_not():
    """Found on test_torch.py: @deviceCountAtLeast(1) tests pass on one device."""
    two = classify(restrictions=["deviceCountAtLeast=2"])
    assert two.mode == "skip" and two.reason == "needs 2 devices (@deviceCountAtLeast)"
    assert classify(restrictions=["deviceCountAtLeast=1"]).mode == "mandatory_success"


def test_an_unsupported_op_means_skip_naming_it_and_helpers_are_named_as_such():
    verdict = classify(ops={"": {"lgamma.default": False, "empty.memory_format": True}})
    assert verdict.mode == "skip"
    assert "aten::lgamma.default" in verdict.reason
    assert verdict.evidence["unsupported_ops"] == ["lgamma.default"]
    helper = classify(ops={"": {"add.Tensor": False, "normal_.default": True}})
    assert helper.mode == "skip" and helper.reason.startswith(
        "its set-up or checks call aten::normal_"
    )


def test_unsupported_opinfo_variants_are_dropped_by_edits_and_the_rest_kept():
    verdict = classify(
        opinfos=["abs", "lgamma"],
        ops={
            "abs": {"abs.default": False, "clone.default": True},
            "lgamma": {"lgamma.default": False},
        },
    )
    assert verdict.mode == "mandatory_success"
    assert verdict.edits == {"ops": {"exclude": [{"name": "lgamma"}]}}
    assert verdict.reason.startswith("drops OpInfo lgamma")


def test_dtype_coverage_and_upstream_outcomes_decide_the_rest():
    assert classify(dtypes=["int8", "complex64"]).mode == "skip"
    broken = classify(
        passed=0,
        failed=4,
        first_failure="Traceback\nAssertionError: 3 != 2\nTo execute this test, run",
    )
    assert broken.mode == "xfail" and broken.reason.endswith("AssertionError: 3 != 2")
    assert classify(passed=0, skipped=4).mode == "skip"
    fine = classify(ops={"": {"add.Tensor": False, "empty.memory_format": True}})
    assert fine.mode == "mandatory_success" and "1 under test, 1 helpers" in fine.reason


class ChatAPI(BaseHTTPRequestHandler):
    """A local stand-in with the OpenAI chat-completions shape; answers from `answers`."""

    answers: list[str] = []
    requests: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ChatAPI.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        content = ChatAPI.answers.pop(0)
        reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(reply.encode())

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def chat_api() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), ChatAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    ChatAPI.requests.clear()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()


def test_the_language_model_classifier_returns_a_validated_structured_decision(chat_api):
    ChatAPI.answers = [
        '```json\n{"mode": "mandatory_success", "reason": "Drops lgamma only.", "edits": {"ops": {"exclude": [{"name": "lgamma"}]}}}\n```'
    ]
    classifier = ChatClassifier(LLMSettings(chat_api, "tiny-model", "secret"))
    verdict = classifier.classify(evidence(opinfos=["abs", "lgamma"]), CAPS)
    assert (verdict.mode, verdict.reason) == ("mandatory_success", "Drops lgamma only.")
    assert verdict.edits == {"ops": {"exclude": [{"name": "lgamma"}]}}
    assert verdict.evidence["classifier"] == "llm:tiny-model"
    request = ChatAPI.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer secret"
    assert request["body"]["model"] == "tiny-model"
    assert json.loads(request["body"]["messages"][1]["content"])["test"] == "::".join(KEY)


@pytest.mark.parametrize(
    "answer, problem",
    [
        ("sure, skip it", "not JSON"),
        ('{"mode": "maybe", "reason": "x"}', "mode 'maybe'"),
        ('{"mode": "skip", "reason": ""}', "reason"),
        (
            '{"mode": "xfail", "reason": "x", "edits": {"dtypes": {"exclude": [{"name": "float99"}]}}}',
            "unknown dtype",
        ),
        (
            '{"mode": "xfail", "reason": "x", "edits": {"ops": {"exclude": [{"name": "mul"}]}}}',
            "no OpInfo 'mul'",
        ),
        ('{"mode": "xfail", "reason": "x", "verdict": "y"}', "unknown keys"),
    ],
)
def test_a_bad_answer_is_rejected_with_the_reason(chat_api, answer, problem):
    ChatAPI.answers = [answer]
    classifier = ChatClassifier(LLMSettings(chat_api, "tiny-model", ""))
    with pytest.raises(ClassifierError, match=problem):
        classifier.classify(evidence(opinfos=["abs", "lgamma"]), CAPS)


def test_stage_3_keeps_the_deterministic_decision_when_the_model_answers_badly(chat_api):
    ChatAPI.answers = ['{"mode": "never"}']
    decisions = pipeline.stage3(
        {KEY: evidence(restrictions=["onlyCUDA"])},
        CAPS,
        ChatClassifier(LLMSettings(chat_api, "m", "")),
    )
    assert decisions[KEY].mode == "skip"
    assert "mode 'never'" in decisions[KEY].evidence["rejected_answer"]


def test_the_classifier_comes_from_the_environment(monkeypatch, tmp_path):
    assert configured_classifier().name == "evidence"
    monkeypatch.setenv("CRCR_CLASSIFIER", "llm")
    with pytest.raises(ClassifierError, match="CRCR_LLM_URL"):
        configured_classifier()
    key = tmp_path / "key"
    key.write_text("k\n")
    monkeypatch.setenv("CRCR_LLM_URL", "http://127.0.0.1:1/v1/")
    monkeypatch.setenv("CRCR_LLM_MODEL", "m")
    monkeypatch.setenv("CRCR_LLM_KEY_FILE", str(key))
    chosen = configured_classifier()
    assert isinstance(chosen, ChatClassifier) and chosen.settings.key == "k"
    assert chosen.settings.url == "http://127.0.0.1:1/v1"
