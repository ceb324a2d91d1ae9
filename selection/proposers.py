"""Stage 3: per generic test, a proposed mode (or edits) with a reason and its evidence.

A classifier takes a test's `Evidence` and the backend's `Capabilities` and
returns a `Verdict`. Two implementations share that interface:
- `EvidenceClassifier` (the default), deterministic. Its rules, in order:
  1. a device restriction that excludes privateuse1 (`@onlyCUDA`, `only_for=cuda`) => skip;
  2. every variant skipped upstream => skip; every variant failing on the CPU too
     => xfail (the test is broken upstream);
  3. operators the device lacks: all variants need one => skip naming it; only
     some OpInfo variants => keep the test and exclude those OpInfos (edits);
  4. none of the dtypes it spans is supported => skip;
  5. otherwise mandatory_success (with "no evidence yet" when never captured).
- `ChatClassifier`, a language model behind an OpenAI-compatible chat endpoint
  (URL, model, key from the environment, see `llm_settings`). Its answer is
  untrusted input: `parse_verdict` validates it like any other, and a bad
  answer raises `ClassifierError` (the pipeline then keeps the deterministic
  verdict and records why).
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from crcr_reuse.schema import MODES, NAME_FORM, canonical_dtype

from runs.excerpts import clip
from selection.capabilities import Capabilities, ops_text
from selection.opindex import exclusion_kind
from selection.source_facts import EXCLUDES_PRIVATEUSE1

Key = tuple[str, str, str]
DEVICE_NAMES = ("privateuse1", "privateuseone")


class ClassifierError(Exception):
    """A classifier's answer could not be used; the message says why."""


# Evidence key of a `skip` whose only reason is an operator its set-up or checks call:
# stage 4 runs it on the device, and a pass there makes it `mandatory_success`.
TRY_ON_DEVICE = "try_on_device"


@dataclass
class Evidence:
    key: Key
    device_generic: bool = True
    restrictions: list[str] = field(default_factory=list)
    summary: str = ""
    captured: bool = False
    variants: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    first_failure: str = ""
    opinfos: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    # {opinfo or "": {op overload: is_helper}}
    ops: dict[str, dict[str, bool]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["key"] = "::".join(self.key)
        return data


@dataclass
class Verdict:
    mode: str
    reason: str
    edits: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)


class Classifier(Protocol):
    name: str

    def classify(self, evidence: Evidence, capabilities: Capabilities) -> Verdict: ...


class EvidenceClassifier:
    name = "evidence"

    def classify(self, evidence: Evidence, capabilities: Capabilities) -> Verdict:
        facts = _facts(evidence, capabilities)
        for rule in (_restricted, _upstream_outcome, _unsupported_ops, _dtype_coverage):
            verdict = rule(evidence, capabilities, facts)
            if verdict is not None:
                verdict.evidence = facts | verdict.evidence
                return verdict
        if not evidence.captured:
            reason = "no operator evidence yet (never captured); stage 4 checks it on the device"
        elif not evidence.device_generic:
            reason = "a plain test that runs on the host CPU and passed under capture"
        else:
            reason = (
                f"every operator it calls ({facts['ops_under_test']} under test, "
                f"{facts['helper_ops']} helpers) and every dtype it spans is supported"
            )
        return Verdict("mandatory_success", reason, evidence=facts)


def _facts(evidence: Evidence, capabilities: Capabilities) -> dict[str, Any]:
    under = {op for ops in evidence.ops.values() for op, helper in ops.items() if not helper}
    helpers = {op for ops in evidence.ops.values() for op, helper in ops.items() if helper}
    missing = sorted(op for op in under | helpers if not capabilities.supports_op(op))
    supported = [d for d in evidence.dtypes if capabilities.supports_dtype(d)]
    return {
        "classifier": "evidence",
        "device_generic": evidence.device_generic,
        "restrictions": evidence.restrictions,
        "ops_under_test": len(under),
        "helper_ops": len(helpers),
        "unsupported_ops": missing if evidence.device_generic else [],
        # Captured on the CPU, never received by the device's dispatch key: no reason to skip.
        "off_device_ops": sorted((under | helpers) & capabilities.off_device),
        "dtypes": evidence.dtypes,
        "supported_dtypes": supported,
        "captured": evidence.captured,
        "capture": {
            "variants": evidence.variants,
            "passed": evidence.passed,
            "failed": evidence.failed,
            "skipped": evidence.skipped,
        },
    }


def _restricted(evidence: Evidence, caps: Capabilities, facts: dict[str, Any]) -> Verdict | None:
    for restriction in evidence.restrictions:
        if restriction in EXCLUDES_PRIVATEUSE1:
            return Verdict("skip", f"never runs on a privateuse1 device (@{restriction})")
        option, _, value = restriction.partition("=")
        names = {part.strip().lower() for part in value.split(",")}
        if option == "only_for" and not names & set(DEVICE_NAMES):
            return Verdict("skip", f"upstream instantiates it only for {value}")
        if option == "except_for" and names & set(DEVICE_NAMES):
            return Verdict("skip", "upstream instantiates it for every device except privateuse1")
        # @deviceCountAtLeast(1) runs on one device (it gets a list of devices).
        if option == "deviceCountAtLeast" and value != "1":
            return Verdict("skip", f"needs {value or 'several'} devices (@deviceCountAtLeast)")
    return None


def _upstream_outcome(
    evidence: Evidence, caps: Capabilities, facts: dict[str, Any]
) -> Verdict | None:
    if not evidence.captured or not evidence.variants:
        return None
    if evidence.skipped == evidence.variants:
        return Verdict("skip", "upstream skips every variant of it on the CPU as well")
    ran = evidence.variants - evidence.skipped
    if ran and evidence.failed == ran:
        first = _first_line(evidence.first_failure) or "it fails"
        return Verdict(
            "xfail",
            f"fails on the CPU too, so upstream is broken here: {first}",
            evidence={"cpu_failure": evidence.first_failure[-1000:]},
        )
    return None


def _unsupported_ops(
    evidence: Evidence, caps: Capabilities, facts: dict[str, Any]
) -> Verdict | None:
    if not evidence.device_generic or not facts["unsupported_ops"]:
        return None
    bad: dict[str, list[str]] = {}
    for opinfo, called in evidence.ops.items():
        missing = sorted(op for op in called if not caps.supports_op(op))
        if missing:
            bad[opinfo] = missing
    variants = set(evidence.ops)
    if "" in bad or set(bad) == variants:
        needed = sorted({op for missing in bad.values() for op in missing})
        helper_only = all(
            evidence.ops[opinfo].get(op, False) for opinfo, missing in bad.items() for op in missing
        )
        where = "its set-up or checks call" if helper_only else "it calls"
        # A helper may run on host tensors (a reference result, a comparison): the CPU
        # capture cannot tell, so stage 4 tries the test on the device (`TRY_ON_DEVICE`).
        return Verdict(
            "skip",
            f"{where} {ops_text(needed)}, which the device does not support",
            evidence={
                "waiting_on": sorted({op.split(".")[0] for op in needed}),
                TRY_ON_DEVICE: helper_only,
            },
        )
    excluded = sorted(bad)
    ops = sorted({op for opinfo in excluded for op in bad[opinfo]})
    kind, what = exclusion_kind(excluded)
    return Verdict(
        "mandatory_success",
        f"drops {what} {', '.join(excluded)} (needs {ops_text(ops)}, unsupported); "
        "every other variant's operators are supported",
        edits={kind: {"exclude": [{"name": name} for name in excluded]}},
        evidence={"waiting_on": sorted({op.split(".")[0] for op in ops}), "dropped": bad},
    )


def _dtype_coverage(
    evidence: Evidence, caps: Capabilities, facts: dict[str, Any]
) -> Verdict | None:
    if evidence.dtypes and not facts["supported_dtypes"] and evidence.device_generic:
        return Verdict(
            "skip", f"none of the dtypes it spans ({', '.join(evidence.dtypes)}) is supported"
        )
    return None


def _first_line(text: str) -> str:
    """The line that says what went wrong: the last `SomethingError: ...` line."""
    lines = [line.strip().removeprefix("E").strip() for line in text.strip().splitlines()]
    for line in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception)\b", line):
            return clip(line, 200)
    useful = [
        line for line in lines if line and "PYTORCH_" not in line and "To execute" not in line
    ]
    return clip(useful[-1], 200) if useful else ""


# -- the language-model classifier -----------------------------------------------------------


@dataclass(frozen=True)
class LLMSettings:
    url: str
    model: str
    key: str
    timeout: float = 60.0


def llm_settings() -> LLMSettings | None:
    """From CRCR_LLM_URL, CRCR_LLM_MODEL, CRCR_LLM_KEY_FILE (and CRCR_LLM_TIMEOUT); None if unset."""
    url = os.environ.get("CRCR_LLM_URL", "").strip()
    if not url:
        return None
    model = os.environ.get("CRCR_LLM_MODEL", "").strip()
    if not model:
        raise ClassifierError("CRCR_LLM_URL is set but CRCR_LLM_MODEL is not")
    key_file = os.environ.get("CRCR_LLM_KEY_FILE", "").strip()
    key = Path(key_file).read_text().strip() if key_file else ""
    timeout = float(os.environ.get("CRCR_LLM_TIMEOUT", "60"))
    return LLMSettings(url.rstrip("/"), model, key, timeout)


def configured_classifier() -> Classifier:
    """The classifier CRCR_CLASSIFIER names: `evidence` (default) or `llm`."""
    choice = os.environ.get("CRCR_CLASSIFIER", "evidence").strip() or "evidence"
    if choice == "evidence":
        return EvidenceClassifier()
    if choice == "llm":
        settings = llm_settings()
        if settings is None:
            raise ClassifierError("CRCR_CLASSIFIER=llm needs CRCR_LLM_URL and CRCR_LLM_MODEL")
        return ChatClassifier(settings)
    raise ClassifierError(f"CRCR_CLASSIFIER={choice!r}: expected evidence or llm")


SYSTEM_PROMPT = """You decide how an out-of-tree PyTorch accelerator's CI treats one upstream test.
Answer with one JSON object and nothing else:
{"mode": "mandatory_success" | "xfail" | "xfail_strict" | "skip",
 "reason": "<one sentence, at most 300 characters>",
 "edits": {"ops": {"exclude": [{"name": "<OpInfo name>"}]},
           "dtypes": {"exclude": [{"name": "<dtype>"}]}}}
Use edits only to drop the OpInfo variants or dtypes the device cannot run; omit
"edits" otherwise. Base the decision on the evidence given: device restrictions,
operators the test calls that the device does not support, dtype coverage, and
how the test behaved on the CPU."""


class ChatClassifier:
    name = "llm"

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings

    def classify(self, evidence: Evidence, capabilities: Capabilities) -> Verdict:
        facts = _facts(evidence, capabilities)
        question = {
            "test": "::".join(evidence.key),
            "summary": evidence.summary,
            "device_generic": evidence.device_generic,
            "opinfos": evidence.opinfos,
            **facts,
        }
        body = {
            "model": self.settings.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": json.dumps(question)},
            ],
        }
        content = self._ask(body)
        verdict = parse_verdict(content, evidence)
        verdict.evidence = facts | {"classifier": f"llm:{self.settings.model}"}
        return verdict

    def _ask(self, body: dict[str, Any]) -> str:
        request = urllib.request.Request(
            f"{self.settings.url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}
            | ({"Authorization": f"Bearer {self.settings.key}"} if self.settings.key else {}),
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout) as response:
                payload = json.loads(response.read(1_000_000))
        except (urllib.error.URLError, TimeoutError, json.JSONDecodeError) as error:
            raise ClassifierError(f"the chat endpoint did not answer usefully: {error}") from error
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as error:
            raise ClassifierError("the chat answer has no choices[0].message.content") from error
        if not isinstance(content, str):
            raise ClassifierError("the chat answer's content is not text")
        return content


def parse_verdict(content: str, evidence: Evidence) -> Verdict:
    """Validate a model's JSON answer; ClassifierError says what is wrong with it."""
    text = content.strip()
    fence = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.S)
    text = fence.group(1) if fence else text
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ClassifierError(f"the answer is not JSON: {error}") from error
    if not isinstance(data, dict):
        raise ClassifierError("the answer is not a JSON object")
    unknown = set(data) - {"mode", "reason", "edits"}
    if unknown:
        raise ClassifierError(f"unknown keys in the answer: {sorted(unknown)}")
    mode = data.get("mode")
    if mode not in MODES:
        raise ClassifierError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    reason = data.get("reason")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 300:
        raise ClassifierError("reason must be one non-empty sentence of at most 300 characters")
    edits = _valid_edits(data.get("edits") or {}, evidence)
    if edits and mode == "skip":
        raise ClassifierError("a skipped test takes no edits")
    return Verdict(mode=mode, reason=" ".join(reason.split()), edits=edits)


def _valid_edits(edits: Any, evidence: Evidence) -> dict[str, Any]:
    if not isinstance(edits, dict) or set(edits) - {"ops", "dtypes"}:
        raise ClassifierError("edits may only hold `ops` and `dtypes`")
    out: dict[str, Any] = {}
    for kind, selection in edits.items():
        if not isinstance(selection, dict) or set(selection) - {"exclude"}:
            raise ClassifierError(f"edits.{kind} may only hold `exclude`")
        names = []
        for item in selection.get("exclude") or []:
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                raise ClassifierError(f"edits.{kind}.exclude entries need a `name`")
            if kind == "dtypes" and canonical_dtype(name) is None:
                raise ClassifierError(f"edits.dtypes: unknown dtype {name!r}")
            if kind == "ops" and not NAME_FORM.fullmatch(name):
                raise ClassifierError(f"edits.ops: {name!r} is not an operator name")
            if kind == "ops" and evidence.opinfos and name not in evidence.opinfos:
                raise ClassifierError(f"edits.ops: the test has no OpInfo {name!r}")
            names.append({"name": canonical_dtype(name) if kind == "dtypes" else name})
        if names:
            out[kind] = {"exclude": names}
    return out
