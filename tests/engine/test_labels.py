"""Labels at suite, file and test level, `no_grad`, and choosing tests by label
(`list --labels`, as Torch Spyre's TEST_TYPE): in process, nothing here imports torch."""

from __future__ import annotations

from pathlib import Path

import pytest
from crcr_reuse.cli import main
from crcr_reuse.loader import load_configs
from crcr_reuse.matching import Rules

from .conftest import TREE_TESTS

FILE = TREE_TESTS / "test_plain_reuse.py"

CORE = f"""\
test_suite_config:
  labels: [core, device_critical]
  files:
    - path: {FILE}
      unlisted_test_mode: mandatory_success
      tests:
        - names: [TestPlainMath::test_sum]
          mode: mandatory_success
          labels: [device_critical]
          no_grad: true
        - names: [test_wrong_on_purpose]
          mode: xfail
"""

SMOKE = f"""\
test_suite_config:
  labels: [smoke]
  files:
    - path: {FILE}
      tests:
        - names: [TestPlainMath::test_passes_today]
          mode: xfail_strict
    - path: {TREE_TESTS / "test_dtypes_reuse.py"}
      labels: [nightly]
"""


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_labels_of_suite_file_and_test_and_no_grad_load(tmp_path: Path) -> None:
    config = load_configs([write(tmp_path, "core.yaml", CORE)])
    assert config.labels == ("core", "device_critical")
    first, bare = config.files[0].tests
    assert (first.labels, first.no_grad) == (("device_critical",), True)
    assert (bare.labels, bare.no_grad, bare.names[0].cls) == ((), False, None)
    # Each entry knows the labels it is chosen by and its config (they survive a merge).
    assert first.group_labels == ("core", "device_critical")
    assert first.source == str(tmp_path / "core.yaml")


def test_merged_configs_keep_each_files_own_labels(tmp_path: Path) -> None:
    config = load_configs(
        [write(tmp_path, "core.yaml", CORE), write(tmp_path / "inductor", "smoke.yaml", SMOKE)]
    )
    assert config.labels == ("core", "device_critical", "smoke")
    rules = Rules(config).for_file(FILE)
    assert rules is not None
    # The first config's entry, the second's (merged into the same files entry), unlisted.
    adds, today, unlisted = (
        rules.decide("TestPlainMath", name)
        for name in ("test_sum", "test_passes_today", "test_mul")
    )
    assert adds.labels == ("core", "device_critical") and adds.no_grad
    assert today.labels == ("smoke",) and not today.no_grad
    assert unlisted.labels == ("core", "device_critical")

    def chosen(*labels: str) -> list[bool]:
        return [d.selected_by(labels) for d in (adds, today, unlisted)]

    # Spyre: a config is chosen by its labels, and a tests entry's own labels narrow it.
    assert chosen("smoke") == [False, True, False]
    assert chosen("core") == [False, False, True]
    assert chosen("device_critical") == [True, False, True]
    assert chosen("smoke", "core") == [False, True, True]
    # suite_<group>: the configs in folder <group>; full: everything.
    assert chosen("suite_inductor") == [False, True, False]
    assert chosen("full") == [True, True, True]


def test_list_counts_only_the_tests_a_label_selection_keeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configs = [
        write(tmp_path, "core.yaml", CORE),
        write(tmp_path / "inductor", "smoke.yaml", SMOKE),
    ]
    args = [a for c in configs for a in ("--config", str(c))]
    code, everything = run_cli(capsys, "list", *args)
    assert code == 0 and "not selected" not in everything
    code, smoke = run_cli(capsys, "list", *args, "--labels", "smoke")
    plain = next(line for line in smoke.splitlines() if "test_plain_reuse.py" in line).split()
    # Only test_passes_today is left (the smoke config's entry).
    assert code == 0 and plain[1:] == ["0", "0", "1", "0"]
    assert "not selected by labels smoke:" in smoke
    code, nightly = run_cli(capsys, "list", *args, "--labels=nightly,suite_inductor")
    dtypes = next(line for line in nightly.splitlines() if "test_dtypes_reuse.py" in line)
    assert code == 0 and dtypes.split()[1:] != ["0", "0", "0", "0"]
    code, shown = run_cli(capsys, "list", *args, "--labels", "not a label")
    assert code == 1 and "'not a label' is not a label" in shown


def test_explain_and_merge_show_labels_and_no_grad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, "core.yaml", CORE)
    code, shown = run_cli(
        capsys, "explain", f"{FILE}::TestPlainMath::test_sum", "--config", str(config)
    )
    assert code == 0
    assert "labels: core, device_critical; runs under torch.no_grad()" in shown
    assert "testtype__core, testtype__device_critical, mode__" in shown
    code, merged = run_cli(capsys, "merge", str(config))
    assert code == 0 and "labels:\n      - device_critical\n      no_grad: true" in merged
    again = load_configs([write(tmp_path / "again", "merged.yaml", merged)])
    assert again.files[0].tests[0].no_grad and again.files[0].tests[0].labels == (
        "device_critical",
    )
