"""An in-toto test-result statement per run (unsigned).

Statement v1 with predicate `https://in-toto.io/attestation/test-result/v0.1`:
the subjects are the run's artifacts (by SHA-256), the configuration is the
config version, the test tree and crcr's commit; each test's final outcome goes
to `passedTests`, `warnedTests` (failures that do not make the job red: known,
flaky or infrastructure) or `failedTests` (regressions). The result is FAILED
when a regression exists or the run did not pass, WARNED with warned tests,
else PASSED. crcr holds no signing key: wrap it in a DSSE envelope to sign it.
"""

from typing import Any

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
PASSING = ("passed", "xfailed", "xpassed")


def _final_outcomes(meta: dict[str, Any]) -> dict[str, str]:
    final: dict[str, str] = {}
    for attempt in sorted(meta["attempts"], key=lambda a: a["attempt"]):
        final[attempt["node_id"]] = attempt["outcome"]
    return final


def _configuration(meta: dict[str, Any]) -> list[dict[str, Any]]:
    config = meta["config"]
    described = [
        {"name": "config.yaml", "digest": {"sha256": config["sha256"]},
         "annotations": {"version": config["number"]}},
        {"name": "pytorch", "digest": {"gitCommit": meta["run"]["pytorch_sha"]}},
    ]  # fmt: skip
    if meta["crcr"].get("commit"):
        described.append({"name": "crcr", "digest": {"gitCommit": meta["crcr"]["commit"]}})
    return described


def statement(meta: dict[str, Any], final: dict[str, str] | None = None) -> dict[str, Any]:
    """The statement for a run, from its metadata document (`final`: each test's final
    outcome, when the document's attempts are not dicts)."""
    verdicts = {f["node_id"]: f["verdict"] for f in meta["failures"]}
    passed, warned, failed = [], [], []
    final = _final_outcomes(meta) if final is None else final
    for node_id, outcome in sorted(final.items()):
        verdict = verdicts.get(node_id)
        if verdict == "regression":
            failed.append(node_id)
        elif verdict is not None:
            warned.append(node_id)
        elif outcome in PASSING:
            passed.append(node_id)
    if failed or meta["run"]["status"] != "passed":
        result = "FAILED"
    else:
        result = "WARNED" if warned else "PASSED"
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": f"{a['name']}-{a['version']}", "digest": {"sha256": a["sha256"]}}
            for a in meta["artifacts"]
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "result": result,
            "configuration": _configuration(meta),
            "url": meta["run"]["url"],
            "passedTests": passed,
            "warnedTests": warned,
            "failedTests": failed,
        },
    }
