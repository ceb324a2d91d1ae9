"""The command line: validate, merge, explain, list."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from crcr_reuse.cli import main
from crcr_reuse.loader import load_configs

from .conftest import ROOT, TREE, Run, clean_env, heavy_run

DEMO = str(TREE / "crcr-config.yaml")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_validate_accepts_the_demo_config(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "validate", DEMO)
    assert code == 0
    assert out.startswith("OK: 1 config(s), 5 files entries (5 files), 6 tests entries")


def test_validate_reports_every_problem_with_its_position(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "test_suite_config:\n  labels: [night ly]\n  global:\n    supported_dtypes: [{name: f8}]\n"
    )
    code, out, err = run_cli(capsys, "validate", str(bad))
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"{bad}:2:12: label 'night ly' is not a label name (a letter, then letters, digits, _ "
        "and -) (labels such as smoke, core, full; `suite_<group>` selects configs by folder)",
        f"{bad}:4:31: unknown dtype 'f8'",
    ]


def test_merge_prints_a_config_that_loads_back_the_same(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    extra = tmp_path / "extra.yaml"
    extra.write_text(
        "test_suite_config:\n  labels: [smoke]\n  files:\n"
        f"    - path: {TREE}/test/test_plain_reuse.py\n      tests:\n"
        "        - names: [TestPlainMath::test_sum]\n          mode: xfail\n"
    )
    code, out, _ = run_cli(capsys, "merge", DEMO, str(extra))
    assert code == 0
    merged = tmp_path / "merged.yaml"
    merged.write_text(out)
    again = load_configs([merged])
    original = load_configs([DEMO, extra])
    assert again.labels == ("trunk", "smoke")
    assert [(e.files, len(e.tests)) for e in again.files] == [
        (e.files, len(e.tests)) for e in original.files
    ]
    plain = yaml.safe_load(out)["test_suite_config"]["files"][-1]
    assert plain["tests"][-1] == {"names": ["TestPlainMath::test_sum"], "mode": "xfail"}


def test_explain_names_the_entry_mode_edits_and_the_variants_fate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    test_id = f"{TREE}/test/test_dtypes_reuse.py::TestTensorBasicsPRIVATEUSEONE::test_add_matches_cpu_privateuseone_int64"
    code, out, _ = run_cli(capsys, "explain", test_id, "--config", DEMO)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].endswith(
        "test_dtypes_reuse.py::TestTensorBasics::test_add_matches_cpu  (generated variant: privateuseone_int64)"
    )
    assert (
        "matched: tests entry at " in out
        and "crcr-config.yaml:23:11 by literal name 'TestTensorBasics::test_add_matches_cpu'" in out
    )
    assert "mode: mandatory_success" in lines
    assert "edits: dtypes include bfloat16" in lines
    assert "edits: dtypes exclude int64" in lines
    assert "variant dtype int64: filtered out" in lines


def test_explain_says_when_the_unlisted_mode_applies(capsys: pytest.CaptureFixture[str]) -> None:
    test_id = f"{TREE}/test/test_plain_reuse.py::TestPlainMath::test_sum"
    code, out, _ = run_cli(capsys, "explain", test_id, "--config", DEMO)
    assert code == 0
    assert "matched: no tests entry names it -> unlisted_test_mode of" in out
    assert "mode: mandatory_success" in out.splitlines()


BYPASSING = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_dtypes_reuse.py
      bypass_device_restrictions: true
      tests:
        - names: [TestTensorBasics::test_cpu_only]
          mode: mandatory_success
        - names: [TestTensorBasics::test_fill]
          mode: mandatory_success
          bypass_device_restrictions: false
"""


def test_explain_says_which_entry_bypasses_device_restrictions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "bypass.yaml"
    config.write_text(BYPASSING)
    test = f"{TREE}/test/test_dtypes_reuse.py::TestTensorBasicsPRIVATEUSEONE::test_cpu_only_privateuseone"
    code, out, _ = run_cli(
        capsys, "explain", test, "--config", str(config), "--torch-root", str(TREE)
    )
    assert code == 0
    assert f"device restrictions: bypassed (bypass_device_restrictions at {config}:4:35)" in out
    fill = f"{TREE}/test/test_dtypes_reuse.py::TestTensorBasics::test_fill"
    code, out, _ = run_cli(
        capsys, "explain", fill, "--config", str(config), "--torch-root", str(TREE)
    )
    assert code == 0 and "device restrictions: upstream's hold" in out


def test_merge_keeps_bypass_device_restrictions_on_files_and_tests(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "bypass.yaml"
    config.write_text(BYPASSING)
    code, out, _ = run_cli(capsys, "merge", str(config), "--torch-root", str(TREE))
    assert code == 0
    [entry] = yaml.safe_load(out)["test_suite_config"]["files"]
    assert entry["bypass_device_restrictions"] is True
    assert [t.get("bypass_device_restrictions") for t in entry["tests"]] == [None, False]
    merged = tmp_path / "merged.yaml"
    merged.write_text(out)
    [again] = load_configs([merged], {"TORCH_ROOT": str(TREE)}).files
    assert again.bypass_device_restrictions is True
    assert [t.bypass_device_restrictions for t in again.tests] == [None, False]


def test_explain_rejects_a_test_id_of_a_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "explain", "test/nope.py::A::test_b", "--config", DEMO)
    assert code == 1 and "no such test file" in err


def test_list_counts_generic_tests_per_file_and_mode(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "list", "--config", DEMO)
    assert code == 0
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:]}
    # columns: mandatory_success, xfail, xfail_strict, skip
    assert rows[f"{TREE.relative_to(ROOT)}/test/test_dtypes_reuse.py"] == ["7", "1", "0", "1"]
    assert rows[f"{TREE.relative_to(ROOT)}/test/test_plain_reuse.py"] == ["4", "1", "1", "0"]


def test_the_module_runs_as_a_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "crcr_reuse", "validate", DEMO],
        cwd=ROOT, env=clean_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("OK:")


# The demo config without the files that import op_db / module_db (seconds each).
SMALL = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_dtypes_reuse.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [TestTensorBasics::test_known_wrong_expectation]
          mode: xfail
        - names: [TestTensorBasics::test_cpu_only]
          mode: skip
    - path: ${TORCH_ROOT}/test/test_pla*.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [TestPlainMath::test_wrong_on_purpose]
          mode: xfail
  global:
    supported_dtypes: [{name: float32}, {name: float64}, {name: float16}, {name: bfloat16}, {name: int64}, {name: bool}]
"""


@heavy_run("list_collect")
def _list_collect(workdir: Path) -> Any:
    config = workdir / "small.yaml"
    config.write_text(SMALL)
    done = subprocess.run(
        [sys.executable, "-m", "crcr_reuse", "list", "--collect", "--config", str(config),
         "--torch-root", str(TREE)],
        cwd=ROOT, env=clean_env(), capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    return Run(done.returncode, done.stdout, done.stderr)


@pytest.mark.heavy_runs("list_collect")
def test_list_collect_counts_generated_tests_per_file_and_mode(background: Any) -> None:
    run = background.result("list_collect")
    assert run.returncode == 0, run.stderr
    rows = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines()[1:]}
    prefix = f"{TREE.relative_to(ROOT)}/test"
    # test_fill: 6 of 10 dtypes, add_matches_cpu 5, sum_over_dim 4, and five more
    assert rows[f"{prefix}/test_dtypes_reuse.py"] == ["18", "1", "0", "1"]
    assert rows[f"{prefix}/test_plain_reuse.py"] == ["7", "1", "0", "0"]
    assert rows[f"{prefix}/test_planted_faults.py"] == ["4", "0", "0", "0"]
