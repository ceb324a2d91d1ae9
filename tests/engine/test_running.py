"""Running on the reference device: modes, outcomes, reports, timeouts, crashes, shards, xdist."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from .conftest import TREE, TREE_TESTS, Run, clean_env, heavy_run, run_pytest

CRASHING = "test_lerp_crashes_the_process_privateuseone_float32"
RUN_CONFIG = """\
test_suite_config:
  labels: [trunk]
  files:
    - path: ${TORCH_ROOT}/test/test_planted_faults.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [test_lerp_crashes_the_process]
          mode: skip
        # Why: the device is off by 0.25 in float64 addcmul; accepted within atol 0.5.
        - names: [TestPlantedFaults::test_addcmul_matches_cpu]
          mode: mandatory_success
          edits: {dtypes: {include: [{name: float64, precision: {atol: 0.5, rtol: 0}}]}}
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestPlainMath::test_passes_today]
          mode: xfail_strict
        - names: [TestPlainMath::test_sum, TestPlainMath::test_wrong_on_purpose]
          mode: xfail
        - names: [TestFlaky::test_flaky_counter]
          mode: mandatory_success
    - path: ${TORCH_ROOT}/test/test_dtypes_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestTensorBasics::test_fill, TestTensorBasics::test_cpu_only]
          mode: mandatory_success
          edits: {dtypes: {exclude: [{name: bool}, {name: int64}]}}
  global:
    supported_dtypes: [{name: bfloat16}, {name: float16}, {name: float32}]
"""


@heavy_run("run")
def _run(workdir: Path) -> tuple[Run, Run, Run]:
    config = workdir / "config.yaml"
    config.write_text(RUN_CONFIG)
    env = clean_env(TORCH_ROOT=str(TREE), CRCR_FLAKY_COUNTER=str(workdir / "flaky-counter"))
    first = run_pytest([f"--reuse-config={config}", "--reuse-timeout=3", "-rA"], workdir, env)
    retry_dir = workdir / "retry"
    retry_dir.mkdir()
    ids = retry_dir / "ids.txt"
    ids.write_text(first.by_name("test_flaky_counter")["id"] + "\n")
    retry = run_pytest([f"--reuse-config={config}", f"--reuse-ids={ids}"], retry_dir, env)
    return first, retry, _crash_without_xdist(workdir / "crash")


def _crash_without_xdist(workdir: Path) -> Run:
    """The crash test alone in a plain process (what the main job's isolation reruns do)."""
    workdir.mkdir()
    ids = workdir / "ids.txt"
    ids.write_text(
        f"{TREE_TESTS}/test_planted_faults.py::TestPlantedFaultsPRIVATEUSEONE::{CRASHING}\n"
    )
    config = f"--reuse-config={TREE / 'crcr-config.yaml'}"
    run = run_pytest([config, f"--reuse-ids={ids}"], workdir)
    partial = workdir / "report.json.partial"
    run.report = {"partial": partial.read_text().splitlines() if partial.exists() else []}
    return run


@pytest.fixture(scope="module")
def run(background: Any) -> Run:
    return background.result("run")[0]


pytestmark = pytest.mark.heavy_runs("run", "xdist")


def outcome(run: Run, name: str) -> str:
    return str(run.by_name(name)["outcome"])


def test_a_passing_xfail_strict_test_fails_the_run(run: Run) -> None:
    assert run.returncode == 1
    assert outcome(run, "test_passes_today") == "xpassed_strict"
    assert "[XPASS(strict)] crcr config:" in run.by_name("test_passes_today")["message"]


def test_a_passing_xfail_test_shows_as_xpass(run: Run) -> None:
    plain_sum = run.records()["test/test_plain_reuse.py::TestPlainMath::test_sum"]
    assert plain_sum["outcome"] == "xpassed"
    assert outcome(run, "test_wrong_on_purpose") == "xfailed"
    assert "XPASS test/test_plain_reuse.py::TestPlainMath::test_sum" in run.stdout


def test_a_per_dtype_tolerance_from_the_config_applies(run: Run) -> None:
    # The planted fault adds 0.25 to float64 addcmul; the entry allows atol 0.5.
    assert outcome(run, "test_addcmul_matches_cpu_privateuseone_float64") == "passed"


def test_a_hang_on_the_device_is_timed_out_not_waited_for(run: Run) -> None:
    record = run.by_name("test_cumprod_hangs_privateuseone")
    assert record["outcome"] == "timed_out"
    assert "crcr: test timed out after 3 s" in record["message"]


def test_an_unsupported_operator_fails_with_pytorchs_own_error(run: Run) -> None:
    record = run.by_name("test_lgamma_is_unsupported_privateuseone_float32")
    assert record["outcome"] == "failed"
    assert "NotImplementedError" in record["message"]
    assert (
        "Could not run 'aten::lgamma.out' with arguments from the 'PrivateUse1' backend"
        in record["message"]
    )


def test_every_collected_test_shows_its_outcome_and_the_summary_counts_per_mode(run: Run) -> None:
    assert {
        outcome(run, f"test_fill_privateuseone_{d}") for d in ("bfloat16", "float16", "float32")
    } == {"passed"}
    assert outcome(run, "test_cpu_only_privateuseone") == "skipped"
    records = list(run.records().values())
    assert len([r for r in records if r["mode"] != "skip"]) == 11
    # What the config skips is reported as skipped (one record per generic device test).
    config_skipped = [r for r in records if r["mode"] == "skip"]
    assert {r["outcome"] for r in config_skipped} == {"skipped"}
    collection = run.report["collection"]
    assert len(config_skipped) == collection["skipped_generic"] + collection["deselected_by_config"]
    assert "mandatory_success: 8 run (4 passed, 2 failed, 1 skipped, 1 timed_out)" in run.stdout
    assert "xfail: 2 run (1 xfailed, 1 xpassed)" in run.stdout
    assert "xfail_strict: 1 run (1 xpassed_strict)" in run.stdout
    skipped = (
        run.report["collection"]["skipped_variants"]
        + run.report["collection"]["deselected_by_config"]
    )
    assert skipped > 10 and f"skip: {skipped} not collected by the config" in run.stdout


def test_the_json_report_has_one_full_record_per_test(run: Run) -> None:
    record = run.by_name("test_fill_privateuseone_float16")
    assert set(record) >= {"nodeid", "id", "test", "outcome", "duration", "markers", "op", "dtype",
                           "module", "mode", "entry", "reason", "message", "file"}  # fmt: skip
    assert record["test"] == f"{TREE_TESTS}/test_dtypes_reuse.py::TestTensorBasics::test_fill"
    assert (
        record["id"]
        == f"{TREE_TESTS}/test_dtypes_reuse.py::TestTensorBasicsPRIVATEUSEONE::test_fill_privateuseone_float16"
    )
    assert record["duration"] > 0 and record["dtype"] == "float16"
    assert record["entry"]["line"] == 25 and record["entry"]["config"].endswith("config.yaml")
    tolerant = run.by_name("test_addcmul_matches_cpu_privateuseone_float64")
    assert (
        tolerant["reason"]
        == "Why: the device is off by 0.25 in float64 addcmul; accepted within atol 0.5."
    )
    unlisted = run.by_name("test_cumprod_hangs_privateuseone")
    assert unlisted["entry"] is None and unlisted["reason"].startswith(
        "unlisted (unlisted_test_mode: mandatory_success"
    )


def test_junit_xml_carries_op_dtype_module_and_mode_properties(run: Run) -> None:
    cases = {
        f"{case.get('classname')}.{case.get('name')}": case
        for case in ET.fromstring(run.junit).iter("testcase")
    }
    props = {
        p.get("name"): p.get("value")
        for p in cases[
            "test.test_dtypes_reuse.TestTensorBasicsPRIVATEUSEONE.test_fill_privateuseone_float16"
        ].iter("property")
    }
    assert props["dtype"] == "float16" and props["mode"] == "mandatory_success"
    plain_sum = cases["test.test_plain_reuse.TestPlainMath.test_sum"]
    plain = {p.get("name"): p.get("value") for p in plain_sum.iter("property")}
    assert plain["mode"] == "xfail" and "dtype" not in plain


def test_the_planted_flaky_test_fails_first_and_passes_on_retry(background: Any) -> None:
    first, retry, _ = background.result("run")
    assert outcome(first, "test_flaky_counter") == "failed"
    assert "attempt 1: odd attempts fail" in first.by_name("test_flaky_counter")["message"]
    assert retry.returncode == 0 and list(retry.names()) == ["test_flaky_counter"]


def test_a_crash_without_xdist_ends_the_process_and_the_stream_names_the_test(
    background: Any,
) -> None:
    crash = background.result("run")[2]
    assert crash.returncode == -11  # SIGSEGV: the process is gone, nothing hangs
    assert "Fatal Python error: Segmentation fault" in crash.stderr  # pytest's faulthandler
    events = [json.loads(line) for line in crash.report["partial"]]
    assert [e["event"] for e in events] == ["start"]
    assert events[0]["nodeid"].endswith(CRASHING)


@heavy_run("xdist")
def _xdist(workdir: Path) -> Run:
    ids = workdir / "shard.txt"
    ids.write_text(
        "# a shard of the demo config's tests\n"
        "test/test_planted_faults.py::TestPlantedFaultsPRIVATEUSE1::test_lerp_crashes_the_process_privateuseone_float32\n"
        "test/test_planted_faults.py::TestPlantedFaultsPRIVATEUSEONE::test_addcmul_matches_cpu_privateuseone_float64\n"
        f"{TREE_TESTS}/test_dtypes_reuse.py::TestTensorBasicsPRIVATEUSEONE::test_fill_privateuseone_float32\n"
        "test/test_dtypes_reuse.py::TestTensorBasicsPRIVATEUSEONE::test_known_wrong_expectation_privateuseone\n"
        "test/test_plain_reuse.py::TestPlainMath::test_sum\n"
        "test/test_plain_reuse.py::TestPlainMath::test_not_there\n"
    )
    config = f"--reuse-config={TREE / 'crcr-config.yaml'}"
    return run_pytest([config, f"--reuse-ids={ids}", "-n", "2", "-rA"], workdir)


@pytest.fixture(scope="module")
def xdist(background: Any) -> Run:
    return background.result("xdist")


def test_a_device_crash_under_xdist_is_reported_and_the_run_goes_on(xdist: Run) -> None:
    crashed = xdist.by_name("test_lerp_crashes_the_process_privateuseone_float32")
    assert crashed["outcome"] == "crashed"
    assert "crashed while running" in crashed["message"]
    assert outcome(xdist, "test_fill_privateuseone_float32") == "passed"
    assert xdist.returncode == 1


def test_a_shard_runs_exactly_its_ids_and_reports_the_missing_ones(xdist: Run) -> None:
    assert xdist.names() == {
        "test_lerp_crashes_the_process_privateuseone_float32",
        "test_addcmul_matches_cpu_privateuseone_float64",
        "test_fill_privateuseone_float32",
        "test_known_wrong_expectation_privateuseone",
        "test_sum",
    }
    assert xdist.report["collection"]["missing_ids"] == [
        f"{TREE_TESTS}/test_plain_reuse.py::TestPlainMath::test_not_there"
    ]


def test_results_from_xdist_workers_reach_the_report_and_the_summary(xdist: Run) -> None:
    mismatch = xdist.by_name("test_addcmul_matches_cpu_privateuseone_float64")
    assert mismatch["outcome"] == "failed" and "Mismatched elements" in mismatch["message"]
    assert outcome(xdist, "test_known_wrong_expectation_privateuseone") == "xfailed"
    assert xdist.report["summary"] == {"crashed": 1, "failed": 1, "passed": 2, "xfailed": 1}
    assert "xfail: 1 run (1 xfailed)" in xdist.stdout
    assert xdist.report["collection"]["generated"] > 0  # counted by the workers
    assert json.loads(json.dumps(xdist.report))["device"] == "crcr_reuse.reference_device"
