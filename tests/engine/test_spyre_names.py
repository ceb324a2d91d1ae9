"""Names as Torch Spyre matches them: attribute names, exact before patterns, full matches.

A small tree of its own reproduces Spyre's ``test_inductor_ops.py`` case with a
metaclass written here: each generated method wraps a base function with
``functools.wraps`` (so it keeps the base's ``__name__``) and is named after a
prefix, as Spyre's ``ParameterizedTestMeta`` names them. A config in Spyre's shape
goes through ``import-spyre`` and then the plugin; ``lint`` reads a config whose
patterns only base names match.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from crcr_reuse.cli import main
from crcr_reuse.spyre import import_text

from .conftest import TREE, Run, clean_env, heavy_run, run_pytest

OPS_FILE = '''\
import functools
import unittest

from torch.testing._internal.common_device_type import instantiate_device_type_tests


class GenerateFromBase(type):
    """CASES maps (prefix, base function) to {suffix: arguments}: one method
    prefix_suffix per case, wrapping the base; the bases themselves are removed."""

    def __new__(mcs, name, bases, namespace):
        cases = namespace.get("CASES", {})
        for (prefix, base), arguments in cases.items():
            for suffix, args in arguments.items():
                namespace[f"{prefix}_{suffix}"] = mcs.bind(namespace[base], args)
        for _, base in cases:
            namespace.pop(base, None)
        return super().__new__(mcs, name, bases, namespace)

    @staticmethod
    def bind(function, args):
        @functools.wraps(function)
        def test(self):
            return function(self, *args)

        return test


def test_binary_op(self, n):
    self.assertEqual(n * 2, n + n)


def test_mm_relaxed(self, n):
    self.assertEqual(n * n, n**2)


def test_reduce_keepdim0_cpu(self, dim):
    raise AssertionError("the device cannot reduce yet")


def test_plain(self):
    self.assertTrue(True)


BODY = {
    "__module__": __name__,
    "CASES": {
        ("test_mm", "test_binary_op"): {"small": (2,), "square": (3,)},
        ("test_bmm", "test_binary_op"): {"batched": (4,)},
        ("test_large_matmul", "test_mm_relaxed"): {"a": (64,), "b": (128,)},
        ("test_reduce_keepdim0", "test_reduce_keepdim0_cpu"): {"sum": (0,), "amax": (1,)},
        ("test_sum_keepdim0", "test_reduce_keepdim0_cpu"): {"2d": (0,), "3d": (1,)},
        ("test_max_keepdim0", "test_reduce_keepdim0_cpu"): {"2d": (1,)},
    },
    "test_binary_op": test_binary_op,
    "test_mm_relaxed": test_mm_relaxed,
    "test_reduce_keepdim0_cpu": test_reduce_keepdim0_cpu,
    "test_plain": test_plain,
}
del test_binary_op, test_mm_relaxed, test_reduce_keepdim0_cpu, test_plain

# A plain unittest class, as Spyre writes it; and the same tests in a device-type
# class, as Spyre's runner wraps every plain class (instantiate_device_type_tests).
TestOps = GenerateFromBase("TestOps", (unittest.TestCase,), dict(BODY))
TestOpsOnDevice = GenerateFromBase("TestOpsOnDevice", (unittest.TestCase,), dict(BODY))
instantiate_device_type_tests(TestOpsOnDevice, globals())
'''

# Spyre's shape: no mode (Spyre: mandatory_success), `description` for a reason.
SPYRE_CONFIG = """\
test_suite_config:
  files:
    - path: tests/test_spyre_ops.py
      unlisted_test_mode: skip
      tests:
        - names:
            - TestOps::test_(addmm|mm|bmm|einsum|matmul|linear).*
            - TestOpsOnDevice::test_(addmm|mm|bmm|einsum|matmul|linear).*
          description: matrix products run on the device
        - names:
            - TestOps::test_large_matmul.*
            - TestOpsOnDevice::test_large_matmul.*
          tags: [slow__plat_x86_64]
        - names: [TestOps::test_reduce_keepdim0.*, TestOpsOnDevice::test_reduce_keepdim0.*]
          mode: xfail
"""

# What Spyre runs from SPYRE_CONFIG: generated method -> (mode, tags).
SPYRE_RUNS = {
    "test_mm_small": ("mandatory_success", []),
    "test_mm_square": ("mandatory_success", []),
    "test_bmm_batched": ("mandatory_success", []),
    "test_large_matmul_a": ("mandatory_success", ["slow__plat_x86_64"]),
    "test_large_matmul_b": ("mandatory_success", ["slow__plat_x86_64"]),
    "test_reduce_keepdim0_sum": ("xfail", []),
    "test_reduce_keepdim0_amax": ("xfail", []),
}
UNLISTED = {"test_sum_keepdim0_2d", "test_sum_keepdim0_3d", "test_max_keepdim0_2d", "test_plain"}

LINT_CONFIG = """\
test_suite_config:
  files:
    - path: tests/test_spyre_ops.py
      tests:
        - names: ["TestOps::test_mm_rel.*", TestOps::test_reduce_keepdim0_cpu]
          mode: mandatory_success
        - names: ["TestOps::test_(addmm|mm|bmm|einsum|matmul|linear).*"]
          mode: mandatory_success
"""


def make_tree(workdir: Path) -> Path:
    tree = workdir / "tree"
    (tree / "tests").mkdir(parents=True, exist_ok=True)
    (tree / "pytest.ini").write_text("[pytest]\n")
    (tree / "tests" / "test_spyre_ops.py").write_text(OPS_FILE)
    (tree / "spyre.yaml").write_text(SPYRE_CONFIG)
    (tree / "lint.yaml").write_text(LINT_CONFIG)
    return tree


def _cli(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crcr_reuse", *args],
        cwd=tree,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _record(run: Run, cls: str, name: str) -> dict[str, Any]:
    """The record of ``cls::name`` (a device-type class: its device class)."""
    device = {"TestOpsOnDevice": "TestOpsOnDevicePRIVATEUSEONE"}.get(cls, cls)
    found = [r for r in run.report["tests"] if r["nodeid"].endswith(f"::{device}::{name}")]
    assert len(found) == 1, f"{cls}::{name}: {len(found)} records"
    return found[0]


@heavy_run("spyre_names")
def _spyre_names(workdir: Path) -> dict[str, Any]:
    """import-spyre, then the plugin on the imported config, then lint (strict) twice."""
    tree = make_tree(workdir)
    imported = _cli(tree, "import-spyre", "spyre.yaml", "-o", "run.yaml")
    run = run_pytest([f"--reuse-config={tree / 'run.yaml'}", "-rs"], workdir, tree=tree)
    lint = _cli(tree, "lint", "--config", "lint.yaml", "--strict")
    clean = _cli(tree, "lint", "--config", "run.yaml", "--strict")
    return {"import": imported, "run": run, "lint": lint, "clean": clean}


@pytest.mark.heavy_runs("spyre_names")
def test_a_spyre_config_runs_what_spyre_runs_by_attribute_names(background: Any) -> None:
    runs = background.result("spyre_names")
    assert runs["import"].returncode == 0, runs["import"].stderr
    run: Run = runs["run"]
    assert run.returncode == 0, run.output[-3000:]
    for cls, suffix in (("TestOps", ""), ("TestOpsOnDevice", "_privateuseone")):
        for name, (mode, tags) in SPYRE_RUNS.items():
            record = _record(run, cls, name + suffix)
            assert record["mode"] == mode, name
            assert [m for m in record["markers"] if m.startswith("slow__")] == tags, name
            # Keyed by its attribute name, never by the base function it wraps.
            assert record["test"].endswith(f"::{cls}::{name}")
        for name in UNLISTED:
            # On the device, a config-skipped test stands for its variants, named as it is.
            record = _record(run, cls, name)
            assert (record["outcome"], record["mode"]) == ("skipped", "skip")
            assert record["test"].endswith(f"::{cls}::{name}")
    assert run.report["summary"] == {"passed": 10, "xfailed": 4, "skipped": 8}
    assert run.report["collection"]["unmatched"] == []


@pytest.mark.heavy_runs("spyre_names")
def test_a_pattern_never_catches_a_method_through_its_base_name(background: Any) -> None:
    run: Run = background.result("spyre_names")["run"]
    # test_large_matmul_* wrap test_mm_relaxed, which the matrix pattern fully matches.
    large = _record(run, "TestOps", "test_large_matmul_a")["entry"]["matched"]
    assert large == "TestOps::test_large_matmul.*"
    on_device = _record(run, "TestOpsOnDevice", "test_large_matmul_b_privateuseone")
    assert on_device["entry"]["matched"] == "TestOpsOnDevice::test_large_matmul.*"
    # test_sum_keepdim0_* wrap test_reduce_keepdim0_cpu, which test_reduce_keepdim0.* matches.
    assert _record(run, "TestOps", "test_sum_keepdim0_2d")["mode"] == "skip"
    mm = _record(run, "TestOps", "test_mm_small")
    assert mm["reason"] == "matrix products run on the device"


@pytest.mark.heavy_runs("spyre_names")
def test_lint_flags_a_pattern_that_only_a_base_name_matches(background: Any) -> None:
    runs = background.result("spyre_names")
    lint = runs["lint"]
    assert lint.returncode == 1, lint.stdout + lint.stderr[-3000:]
    why = "(functools.wraps): tests go by their attribute names, as in Torch Spyre"
    assert lint.stdout.splitlines() == [
        "lint.yaml:5:19: 'TestOps::test_mm_rel.*' matches only the base name "
        f"'test_mm_relaxed' of test_large_matmul_a, test_large_matmul_b {why}",
        "lint.yaml:5:45: 'TestOps::test_reduce_keepdim0_cpu' matches only the base name "
        "'test_reduce_keepdim0_cpu' of test_max_keepdim0_2d, test_reduce_keepdim0_amax, "
        f"test_reduce_keepdim0_sum, test_sum_keepdim0_2d, test_sum_keepdim0_3d {why}",
    ]
    clean = runs["clean"]
    assert clean.returncode == 0, clean.stdout + clean.stderr[-3000:]


def test_the_importer_notes_each_name_spyre_may_give_to_another_entry() -> None:
    spyre = SPYRE_CONFIG + (
        "        - names: [TestOps::test_large_matmul_b]\n"
        "          edits: {dtypes: {include: [{name: float16}]}}\n"
    )
    _, report = import_text(spyre, "spyre.yaml")
    text = report.text()
    assert text.splitlines()[-2:] == [
        "per entry, where crcr's name matching differs from Spyre's:",
        "- spyre.yaml:16:19: 'TestOps::test_large_matmul_b' is also named by the entry at "
        "line 10: crcr applies only this one (exact names before patterns, in order); "
        "Spyre picks one per variant's dtype and merges their edits",
    ]
    assert "7  names with a class part: crcr matches it against the test's class" in text


def test_the_importer_notes_nothing_where_both_pick_the_same_entry() -> None:
    _, report = import_text(SPYRE_CONFIG, "spyre.yaml")
    assert report.notes == []
    assert "per entry" not in report.text()


def test_the_importer_notes_a_name_two_configs_give_once_at_the_entry_crcr_applies() -> None:
    first = SPYRE_CONFIG.replace("        - names: [TestOps::test_reduce_keepdim0.*", (
        "        - names: [TestOps::test_reduce_keepdim0_sum]\n"
        "          edits: {dtypes: {include: [{name: float16}]}}\n"
        "        - names: [TestOps::test_reduce_keepdim0.*"
    ))  # fmt: skip
    second = (
        "test_suite_config:\n  files:\n    - path: tests/test_spyre_ops.py\n      tests:\n"
        "        - names: [TestOps::test_reduce_keepdim0_sum]\n          mode: skip\n"
    )
    _, report = import_text(first, "a.yaml")
    import_text(second, "b.yaml", report)  # imported together: merged in this order
    assert report.notes == [
        "a.yaml:14:19: 'TestOps::test_reduce_keepdim0_sum' is also named by the entry at lines "
        "16, b.yaml:5: crcr applies only this one (exact names before patterns, in order); "
        "Spyre picks one per variant's dtype and merges their edits"
    ]


def test_explain_finds_a_generated_method_by_its_own_name_then_its_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = make_tree(tmp_path)
    text, _ = import_text(SPYRE_CONFIG, "spyre.yaml")
    (tree / "run.yaml").write_text(text)
    test_id = f"{tree}/tests/test_spyre_ops.py::TestOps::test_large_matmul_a"
    assert main(["explain", "--config", str(tree / "run.yaml"), test_id]) == 0
    assert "by regex (full match) 'TestOps::test_large_matmul.*'" in capsys.readouterr().out
    # torch's @parametrize: the source method, named by the config, is found after.
    (tree / "plain.yaml").write_text(
        "test_suite_config:\n  files:\n    - path: ${TORCH_ROOT}/test/test_plain_reuse.py\n"
        "      tests:\n        - names: [TestParametrizedPlain::test_arange_length]\n"
        "          mode: xfail\n"
    )
    plain = f"{TREE}/test/test_plain_reuse.py::TestParametrizedPlain::test_arange_length_n_1"
    explain = ["explain", "--config", str(tree / "plain.yaml"), "--torch-root", str(TREE)]
    assert main([*explain, plain]) == 0
    out = capsys.readouterr().out
    assert "literal name 'TestParametrizedPlain::test_arange_length'" in out
    assert "mode: xfail" in out
