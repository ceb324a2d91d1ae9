"""Outputs: per-test properties (JUnit XML), the JSON report, the terminal summary.

Per-test facts travel as ``item.user_properties`` (so they cross pytest-xdist and
land in JUnit XML as ``<property>`` elements): ``op``, ``dtype``, ``module``,
``mode`` and a few ``crcr_*`` fields the JSON report reads back. The JSON report
is written by the process that sees the results (the xdist controller, or the
only process); while the run goes on, ``<report>.partial`` receives one JSON line
per test start and per result, so a crashed process still leaves evidence.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .marking import marker_names

OUTCOME_ORDER = (
    "passed",
    "failed",
    "error",
    "skipped",
    "xfailed",
    "xpassed",
    "xpassed_strict",
    "crashed",
    "timed_out",
    "collected",
)
MESSAGE_LIMIT = 4000
TIMEOUT_MARK = "crcr: test timed out after"


class JsonReport:
    """Collects one record per test from reports; writes the stream and the final file."""

    def __init__(self, path: str | None, labels: tuple[str, ...] = ()):
        self.path = Path(path) if path else None
        self.labels = labels
        self.records: dict[str, dict[str, Any]] = {}
        self.started = time.time()
        self._stream = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._stream = open(self.path.with_name(self.path.name + ".partial"), "w")  # noqa: SIM115

    def _emit(self, event: dict[str, Any]) -> None:
        if self._stream is not None:
            self._stream.write(json.dumps(event) + "\n")
            self._stream.flush()

    def start(self, nodeid: str) -> None:
        self._emit({"event": "start", "nodeid": nodeid, "time": time.time()})

    def add(self, report: pytest.TestReport) -> None:
        record = self.records.get(report.nodeid)
        if record is None:
            record = _from_properties(
                _empty_record(report.nodeid), dict(report.user_properties), self.labels
            )
            self.records[report.nodeid] = record
        record["duration"] = round(record["duration"] + report.duration, 6)
        outcome = _phase_outcome(report)
        if outcome is not None and _overrides(record["outcome"], outcome, report.when):
            record["outcome"] = outcome
            record["message"] = _message(report, outcome)
        if report.when == "teardown":
            self._emit({"event": "result", **record})

    def collected(self, nodeid: str, user_properties: list[tuple[str, Any]]) -> None:
        """A record for a test of a --collect-only run (outcome "collected")."""
        record = _from_properties(_empty_record(nodeid), dict(user_properties), self.labels)
        record["outcome"] = "collected"
        self.records[nodeid] = record

    def crashed(self, nodeid: str, message: str) -> None:
        record = self.records.setdefault(nodeid, _empty_record(nodeid))
        record["outcome"], record["message"] = "crashed", message[:MESSAGE_LIMIT]
        self._emit({"event": "result", **record})

    def counts(self) -> Counter[str]:
        return Counter(record["outcome"] for record in self.records.values())

    def write(self, extra: dict[str, Any]) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self.path is None:
            return
        document = {
            "schema": 1,
            "duration": round(time.time() - self.started, 3),
            "summary": dict(self.counts()),
            **extra,
            "tests": list(self.records.values()),
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(document, indent=1))
        os.replace(tmp, self.path)


def _empty_record(nodeid: str) -> dict[str, Any]:
    return {
        "nodeid": nodeid,
        "test": None,
        "outcome": "passed",
        "duration": 0.0,
        "markers": [],
        "op": None,
        "dtype": None,
        "module": None,
        "mode": None,
        "entry": None,
        "reason": "",
        "message": "",
    }


def _from_properties(
    record: dict[str, Any], props: dict[str, Any], labels: tuple[str, ...]
) -> dict[str, Any]:
    dtypes = tuple(props["dtype"].split(",")) if props.get("dtype") else ()
    tags = tuple(props.get("crcr_tags", "").split())
    # A test's own labels (a merge of configs keeps each file's); else the run's.
    labels = tuple(props["crcr_labels"].split()) if "crcr_labels" in props else labels
    markers = marker_names(
        props.get("op"), dtypes, props.get("module"), tags, labels, props.get("mode", "")
    )
    record.update(
        test=props.get("crcr_test"),
        markers=markers if props.get("mode") else [],
        op=props.get("op"),
        dtype=props.get("dtype"),
        module=props.get("module"),
        mode=props.get("mode"),
        entry=json.loads(props["crcr_entry"]) if props.get("crcr_entry") else None,
        reason=props.get("crcr_reason", ""),
    )
    record["file"] = record["test"].split("::", 1)[0] if record["test"] else None
    # A location-independent id (absolute path) that --reuse-ids accepts.
    tail = record["nodeid"].split("::")[1:]
    record["id"] = "::".join([record["file"], *tail]) if record["file"] else record["nodeid"]
    return record


def _phase_outcome(report: pytest.TestReport) -> str | None:
    xfail = hasattr(report, "wasxfail")
    if report.outcome == "skipped":
        return "xfailed" if xfail else "skipped"
    if report.outcome == "failed":
        text = report.longreprtext
        if report.when == "call" and "[XPASS(strict)]" in text:
            return "xpassed_strict"
        if TIMEOUT_MARK in text:
            return "timed_out"
        if "worker '" in text and "crashed" in text:
            return "crashed"
        return "failed" if report.when == "call" else "error"
    if report.when == "call":
        return "xpassed" if xfail else "passed"
    return None


def _overrides(current: str, new: str, when: str) -> bool:
    # A teardown error does not hide the test's own outcome.
    return not (when == "teardown" and current not in ("passed", "xpassed"))


def _message(report: pytest.TestReport, outcome: str) -> str:
    if outcome in ("skipped", "xfailed"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr or "")
        return str(getattr(report, "wasxfail", "") or reason)[:MESSAGE_LIMIT]
    if outcome in ("passed", "xpassed"):
        return str(getattr(report, "wasxfail", ""))[:MESSAGE_LIMIT]
    text = report.longreprtext
    crash = str(getattr(getattr(report.longrepr, "reprcrash", None), "message", ""))
    if len(text) <= MESSAGE_LIMIT or not crash:
        return text[-MESSAGE_LIMIT:]
    # The exception's own first lines name the problem (e.g. "Could not run 'aten::X'"),
    # the traceback's last lines say where: keep both.
    head = crash[: MESSAGE_LIMIT // 4]
    return f"{head}\n[...]\n{text[-(MESSAGE_LIMIT - len(head) - 7) :]}"


def summary_lines(
    outcomes_by_mode: dict[str, Counter[str]], stats: dict[str, Any], extra: dict[str, Any]
) -> list[str]:
    """The terminal summary: tests per mode with outcomes, then what the config removed."""
    lines = []
    for mode in ("mandatory_success", "xfail", "xfail_strict"):
        counts = outcomes_by_mode.get(mode, Counter())
        total = sum(counts.values())
        detail = ", ".join(f"{counts[o]} {o}" for o in OUTCOME_ORDER if counts.get(o))
        lines.append(f"{mode}: {total} run" + (f" ({detail})" if detail else ""))
    skipped = extra.get("deselected_by_config", 0) + stats.get("skipped_variants", 0)
    lines.append(
        f"skip: {skipped} not collected by the config "
        f"({stats.get('skipped_generic', 0)} generic tests not generated, "
        f"{extra.get('deselected_by_config', 0)} collected tests not run)"
    )
    lines.append(
        f"filtered out by dtype/op/module rules: {stats.get('filtered_variants', 0)} variants"
    )
    if extra.get("labels_selected"):
        lines.append(
            f"not selected by labels {','.join(extra['labels_selected'])}: "
            f"{extra.get('deselected_by_labels', 0)} deselected, "
            f"{len(extra.get('files_deselected_by_labels', []))} files not collected"
        )
    if extra.get("deselected_by_shard"):
        lines.append(f"outside this shard's id list: {extra['deselected_by_shard']} deselected")
    for missing in extra.get("missing_ids", [])[:20]:
        lines.append(f"id not found: {missing}")
    for item in stats.get("not_instantiated", []):
        lines.append(
            f"not instantiated for privateuse1: {item['class']} in {item['file']} "
            f"(upstream only_for={item['only_for']}, except_for={item['except_for']}; "
            f"{len(item['tests'])} tests)"
        )
    for pattern in extra.get("unmatched_names", []):
        lines.append(f"config name matched no test: {pattern}")
    return lines
