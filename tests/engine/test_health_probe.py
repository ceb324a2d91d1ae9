"""The device health probe: a device that goes bad mid-session stops the session (exit
status 70) naming the probe, instead of every later test failing for the device's sake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from crcr_reuse.health_probe import POISONED_EXIT, HealthProbe, ProbeError

from .conftest import TREE, Run, clean_env, run_pytest, run_python

PROBE = "python:crcr_reuse.reference_device:probe"
CONFIG = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_dtypes_reuse.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [TestTensorBasics::test_known_wrong_expectation]
          mode: xfail
  global:
    supported_dtypes: [{name: float32}, {name: float64}, {name: int64}, {name: bool}]
"""
# The device computes wrong once it has run this many operators: mid-file, after the
# expected failure's probe found it healthy, so a test that must pass fails on it.
POISONED = json.dumps({"faults": [{"kind": "poison", "after_ops": 26}]})


def run_tree(workdir: Path, *args: str, faults: str = '{"faults": []}') -> tuple[Run, list[Any]]:
    """The file under the config, with the progress log; (the run, the log's entries)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config, progress = workdir / "config.yaml", workdir / "progress.jsonl"
    config.write_text(CONFIG)
    env = clean_env(TORCH_ROOT=str(TREE), CRCR_REFDEV_FAULTS=faults)
    run = run_pytest(
        [f"--reuse-config={config}", "-p", "crcr_reuse.progress_log",
         f"--crcr-progress={progress}", *args],
        workdir, env,
    )  # fmt: skip
    lines = progress.read_text().splitlines() if progress.exists() else []
    return run, [json.loads(line) for line in lines]


def finished(entries: list[Any]) -> dict[str, str]:
    return {e["node_id"]: e["outcome"] for e in entries if e["event"] == "finish"}


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, list[Any]]:
    workdir = tmp_path_factory.mktemp("poisoned")
    return run_tree(workdir, f"--reuse-health-probe={PROBE}", faults=POISONED)


@pytest.fixture(scope="module")
def unprobed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, list[Any]]:
    return run_tree(tmp_path_factory.mktemp("unprobed"), faults=POISONED)


def test_without_a_probe_every_test_after_the_poisoning_fails(unprobed) -> None:
    run, entries = unprobed
    outcomes = finished(entries)
    assert run.returncode == 1
    assert list(outcomes.values()).count("failed") >= 2, outcomes


def test_a_poisoned_device_stops_the_session_with_status_70_naming_the_probe(poisoned) -> None:
    run, entries = poisoned
    assert run.returncode == POISONED_EXIT, run.output[-3000:]
    assert f"device poisoned: health probe {PROBE} failed after " in run.output
    assert "torch.ones(4).sum() on the device gave" in run.output
    (event,) = [entry for entry in entries if entry["event"] == "poisoned"]
    assert event["probe"] == PROBE
    # The probe ran right after the first test that failed on the poisoned device.
    outcomes = finished(entries)
    assert outcomes[event["after"]] == "failed"
    assert list(outcomes.values()).count("failed") == 1
    assert event["after"] in event["suspects"]


def test_no_test_starts_after_the_poisoned_probe(poisoned, unprobed) -> None:
    _, entries = poisoned
    (event,) = [entry for entry in entries if entry["event"] == "poisoned"]
    started = [entry["node_id"] for entry in entries if entry["event"] == "start"]
    assert started[-1] == event["after"]
    every = [entry["node_id"] for entry in unprobed[1] if entry["event"] == "start"]
    not_run = every[every.index(event["after"]) + 1 :]
    assert not_run and not set(not_run) & set(started)


def test_a_healthy_device_passes_its_probe_after_every_test(tmp_path: Path) -> None:
    run, entries = run_tree(tmp_path, f"--reuse-health-probe={PROBE}", "--reuse-health-every=1")
    assert run.returncode == 0, run.output[-3000:]
    assert "poisoned" not in {entry["event"] for entry in entries}
    assert set(finished(entries).values()) == {"passed", "xfailed", "skipped"}  # onlyCPU


def test_a_canary_command_that_fails_stops_the_session_before_the_first_test(
    tmp_path: Path,
) -> None:
    run, entries = run_tree(tmp_path, "--reuse-health-probe=command:false")
    assert run.returncode == POISONED_EXIT
    assert "health probe command:false failed before the first test: exit status 1" in run.output
    assert not [entry for entry in entries if entry["event"] == "start"]
    (event,) = [entry for entry in entries if entry["event"] == "poisoned"]
    assert event["after"] is None and event["suspects"] == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("python:crcr_reuse.nowhere:probe", "'python:crcr_reuse.nowhere:probe': No module named"),
        ("command:no-such-canary --device 0", "'command:no-such-canary --device 0': no program"),
    ],
)
def test_a_probe_that_does_not_exist_is_a_usage_error_and_nothing_runs(
    tmp_path: Path, spec: str, message: str
) -> None:
    run, entries = run_tree(tmp_path, f"--reuse-health-probe={spec}")
    assert run.returncode == 4
    assert f"crcr reuse: health probe {message}" in run.output
    assert entries == []


@pytest.mark.parametrize(
    "spec", ["crcr_reuse.reference_device:probe", "python:probe", "command:", "shell:true"]
)
def test_a_probe_setting_of_neither_form_is_refused_saying_both(spec: str) -> None:
    with pytest.raises(ProbeError, match="python:MODULE:FUNCTION .* or command:PROGRAM"):
        HealthProbe.parse(spec)


BAD_POISON = (
    ({"kind": "poison"}, "fault 0: poison needs 'after_ops', a whole number 0 or more"),
    ({"kind": "poison", "after_ops": -1}, "fault 0: poison needs 'after_ops'"),
    ({"kind": "poison", "after_ops": 5, "op": "add"}, "fault 0: unknown key(s) ['op']"),
)


def test_a_poison_fault_is_checked_like_the_others() -> None:
    # In a process of its own: importing the device registers it.
    code = (
        "import json, sys\n"
        "from crcr_reuse.reference_device.faults import FaultProfileError, parse_profile\n"
        "for rule in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        parse_profile(json.dumps({'faults': [rule]}), 'profile')\n"
        "    except FaultProfileError as error:\n"
        "        print(error)\n"
    )
    rules = json.dumps([rule for rule, _ in BAD_POISON])
    run = run_python(code, args=[rules])
    assert run.returncode == 0, run.output
    printed = run.stdout.splitlines()
    assert len(printed) == len(BAD_POISON)
    for line, (_, message) in zip(printed, BAD_POISON, strict=True):
        assert message in line
