"""`python -m crcr_reuse run`: a crash is pinned and the remaining tests run in a fresh process."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .conftest import RUN_TIMEOUT, TREE, Run, clean_env, heavy_run

PLANTED = "test/test_planted_faults.py::TestPlantedFaultsPRIVATEUSEONE::"
CRASHING = f"{PLANTED}test_lerp_crashes_the_process_privateuseone_float32"
# The crash is the third test; six of the nine after it are in the second file.
CONFIG = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_planted_faults.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [test_cumprod_hangs]
          mode: skip
        # Why: the device is off by 0.25 in float64 addcmul; accepted within atol 0.5.
        - names: [test_addcmul_matches_cpu]
          mode: mandatory_success
          edits: {dtypes: {include: [{name: float64, precision: {atol: 0.5, rtol: 0}}]}}
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestPlainMath::test_wrong_on_purpose]
          mode: xfail
        - names: [TestPlainMath::test_sum, TestParametrizedPlain::test_arange_length]
          mode: mandatory_success
"""
# Every selected test and its outcome (what the tree plants: README of tests/upstream).
EXPECTED = {
    f"{PLANTED}test_addcmul_matches_cpu_privateuseone_float64": "passed",
    f"{PLANTED}test_cumprod_hangs": "skipped",
    CRASHING: "crashed",
    f"{PLANTED}test_lgamma_is_unsupported_privateuseone_float32": "failed",
    "test/test_plain_reuse.py::TestPlainMath::test_passes_today": "skipped",
    "test/test_plain_reuse.py::TestPlainMath::test_sum": "passed",
    "test/test_plain_reuse.py::TestPlainMath::test_wrong_on_purpose": "xfailed",
    "test/test_plain_reuse.py::TestPlainStrings::test_sum": "skipped",
    "test/test_plain_reuse.py::TestFlaky::test_flaky_counter": "skipped",
    **{
        f"test/test_plain_reuse.py::TestParametrizedPlain::test_arange_length_n_{n}": "passed"
        for n in (1, 2, 3)
    },
}


@heavy_run("supervisor")
def _supervised(workdir: Path) -> Run:
    config = workdir / "config.yaml"
    config.write_text(CONFIG)
    junit = workdir / "junit.xml"
    done = subprocess.run(
        [
            sys.executable, "-m", "crcr_reuse", "run", "--max-restarts", "3", "--",
            "-p", "no:django", "-p", "crcr_reuse", f"--rootdir={TREE}",
            f"--reuse-config={config}", f"--junitxml={junit}",
        ],
        cwd=TREE, env=clean_env(TORCH_ROOT=str(TREE)), capture_output=True, text=True,
        timeout=RUN_TIMEOUT, check=False,
    )  # fmt: skip
    return Run(done.returncode, done.stdout, done.stderr, junit=junit.read_text())


pytestmark = pytest.mark.heavy_runs("supervisor")


@pytest.fixture(scope="module")
def supervised(background: Any) -> Run:
    return background.result("supervisor")


def junit_outcomes(run: Run) -> list[tuple[str, str, str]]:
    """(node id, outcome, message) of each JUnit test case, in the file's order."""
    cases = []
    for case in ET.fromstring(run.junit).iter("testcase"):
        module, _, cls = case.get("classname", "").rpartition(".")
        node_id = f"{module.replace('.', '/')}.py::{cls}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag == "failure":
                outcome, message = "failed", child.get("message", "")
            elif child.tag == "skipped":
                xfail = child.get("type") == "pytest.xfail"
                outcome, message = ("xfailed" if xfail else "skipped"), child.get("message", "")
        cases.append((node_id, outcome, message))
    return cases


def test_the_crashed_test_is_reported_with_its_signal_and_the_run_fails(supervised: Run) -> None:
    assert supervised.returncode == 1
    assert f"crashed: {CRASHING}: the test process was killed by signal SIGSEGV (11)" in (
        supervised.stdout
    )
    assert (
        f"crcr: {CRASHING}: the test process was killed by signal SIGSEGV (11); "
        "resuming 9 tests in a fresh process (restart 1 of 3)"
    ) in supervised.stderr


def test_the_summary_counts_every_selected_test_once(supervised: Run) -> None:
    summary = supervised.stdout.split("crcr run: ", 1)[1]
    assert summary.startswith(f"{len(EXPECTED)} tests in 2 pytest processes\n")
    counts = {
        outcome: int(count)
        for outcome, count in re.findall(r"^  (\w[\w ]*?) +(\d+)$", summary, re.MULTILINE)
    }
    assert counts == dict(Counter(EXPECTED.values()))


def test_the_tests_after_the_crash_ran_in_a_fresh_process(supervised: Run) -> None:
    cases = {
        node_id: (outcome, message) for node_id, outcome, message in junit_outcomes(supervised)
    }
    outcome, message = cases[f"{PLANTED}test_lgamma_is_unsupported_privateuseone_float32"]
    assert outcome == "failed" and "NotImplementedError" in message
    assert cases["test/test_plain_reuse.py::TestPlainMath::test_sum"] == ("passed", "")


def test_the_junit_file_holds_every_test_once_the_crashed_one_included(supervised: Run) -> None:
    cases = junit_outcomes(supervised)
    assert Counter(node_id for node_id, _, _ in cases) == Counter(list(EXPECTED))
    junit = {node_id: outcome for node_id, outcome, _ in cases}
    assert junit == {
        node_id: "failed" if outcome == "crashed" else outcome
        for node_id, outcome in EXPECTED.items()
    }
    crashed = next(message for node_id, _, message in cases if node_id == CRASHING)
    assert crashed == "the test process was killed by signal SIGSEGV (11)"
    suite = ET.fromstring(supervised.junit).find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("12", "2", "5")
