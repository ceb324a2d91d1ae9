"""Names that cannot silently miss (``lint``, attribute names) and skips that add up (JUnit).

A small tree of its own: a Spyre-style file whose unittest methods are generated
with ``functools.wraps`` (each keeps the wrapped function's ``__name__``), and a
device-type class. Two background runs feed every test: a plugin run with JUnit
and JSON reports, and ``lint`` over a config with one problem of each kind.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, Run, clean_env, heavy_run, run_pytest

GENERATED_FILE = '''\
import functools
import unittest

import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


def with_values(argument, *values):
    def mark(function):
        function.values = (argument, values)
        return function

    return mark


class GenerateVariants(type):
    """One method per value, named name_argument_index, each wrapping the original."""

    def __new__(mcs, name, bases, namespace):
        for attribute, function in list(namespace.items()):
            argument, values = getattr(function, "values", ("", ()))
            for index, value in enumerate(values):
                namespace[f"{attribute}_{argument}_{index}"] = mcs.bind(function, value)
            if hasattr(function, "values"):
                del namespace[attribute]
        return super().__new__(mcs, name, bases, namespace)

    @staticmethod
    def bind(function, value):
        @functools.wraps(function)
        def test(self):
            return function(self, value)

        return test


class TestGenerated(unittest.TestCase, metaclass=GenerateVariants):
    @with_values("alpha", 1, 2)
    def test_add(self, alpha):
        self.assertEqual(torch.add(torch.ones(2), torch.ones(2), alpha=alpha).sum().item(), 2 + 2 * alpha)

    def test_plain(self):
        self.assertTrue(True)

    def test_not_for_this_device(self):
        raise AssertionError("the config skips this test: it never runs")


class TestDevice(TestCase):
    @dtypes(torch.float32)
    def test_neg(self, device, dtype):
        raise AssertionError("the config skips this test: it is never generated")

    def test_trivial(self, device):
        self.assertTrue(True)


instantiate_device_type_tests(TestDevice, globals())
'''

RUN_CONFIG = """\
test_suite_config:
  files:
    - path: test/test_generated.py
      tests:
        - names: ["TestGenerated::test_add_alpha_.*", TestDevice::test_trivial]
          mode: mandatory_success
        # Why: the device has no such kernel.
        - names: [TestGenerated::test_not_for_this_device, TestDevice::test_neg]
          mode: skip
"""

LINT_CONFIG = """\
test_suite_config:
  files:
    - path: test/test_generated.py
      tests:
        - names: [TestGenerated::test_add_alpha_0, TestGenerated::test_gone]
          mode: mandatory_success
        - names: [TestDevice::test_neg_privateuse1_float32, TestDevicePRIVATEUSE1::test_trivial]
          mode: xfail
        - names: ["TestGenerated::test_pla.n"]
          mode: xfail
        - names: ["TestGenerated::test_pla.n"]
          mode: skip
        - names: [TestGenerated::test_add_alpha_0]
          mode: mandatory_success
"""


def make_tree(workdir: Path) -> Path:
    tree = workdir / "tree"
    (tree / "test").mkdir(parents=True, exist_ok=True)
    (tree / "pytest.ini").write_text("[pytest]\n")
    (tree / "test" / "test_generated.py").write_text(GENERATED_FILE)
    (tree / "run.yaml").write_text(RUN_CONFIG)
    (tree / "lint.yaml").write_text(LINT_CONFIG)
    return tree


@heavy_run("generated_tree")
def _generated_tree(workdir: Path) -> Run:
    tree = make_tree(workdir)
    return run_pytest([f"--reuse-config={tree / 'run.yaml'}", "-rs"], workdir, tree=tree)


@heavy_run("lint")
def _lint(workdir: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    tree = make_tree(workdir)
    runs = {}
    for name, config, strict in (
        ("strict", "lint.yaml", ["--strict"]),
        ("warnings", "lint.yaml", []),
        ("clean", "run.yaml", ["--strict"]),
    ):
        runs[name] = subprocess.run(
            [sys.executable, "-m", "crcr_reuse", "lint", "--config", config, *strict],
            cwd=tree,
            env=clean_env(PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    return runs


def _junit_cases(run: Run) -> dict[str, ET.Element]:
    root = ET.fromstring(run.junit)
    return {case.get("name", ""): case for case in root.iter("testcase")}


@pytest.mark.heavy_runs("generated_tree")
def test_methods_generated_with_functools_wraps_match_by_attribute_name(background: Any) -> None:
    run = background.result("generated_tree")
    assert run.returncode == 0, run.output[-3000:]
    for name in ("test_add_alpha_0", "test_add_alpha_1"):
        record = run.by_name(name)
        assert (record["outcome"], record["mode"]) == ("passed", "mandatory_success")
        assert record["entry"]["matched"] == "TestGenerated::test_add_alpha_.*"
    assert run.report["collection"]["unmatched"] == []


@pytest.mark.heavy_runs("generated_tree")
def test_config_skipped_tests_appear_in_junit_as_skipped_with_their_reason(
    background: Any,
) -> None:
    run = background.result("generated_tree")
    cases = _junit_cases(run)
    suite = ET.fromstring(run.junit).find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("skipped")) == ("6", "3")
    skipped = {name: case.find("skipped") for name, case in cases.items()}
    reasons = {
        name: element.get("message") for name, element in skipped.items() if element is not None
    }
    assert reasons == {
        "test_not_for_this_device": "crcr config: Why: the device has no such kernel.",
        "test_neg": "crcr config: Why: the device has no such kernel. (1 variants not generated)",
        "test_plain": "crcr config: unlisted (unlisted_test_mode: skip for test/test_generated.py)",
    }
    properties = {p.get("name"): p.get("value") for p in cases["test_neg"].iter("property")}
    assert properties["mode"] == "skip"
    assert "3 passed, 3 skipped" in run.stdout.splitlines()[-1]


@pytest.mark.heavy_runs("generated_tree")
def test_config_skipped_tests_are_counted_as_skipped_in_the_json_report(background: Any) -> None:
    run = background.result("generated_tree")
    assert run.report["summary"] == {"passed": 3, "skipped": 3}
    neg = run.by_name("test_neg")
    assert (neg["outcome"], neg["mode"], neg["reason"]) == (
        "skipped",
        "skip",
        "Why: the device has no such kernel.",
    )
    assert neg["test"].endswith("test_generated.py::TestDevice::test_neg")


@pytest.mark.heavy_runs("lint")
def test_lint_strict_fails_with_one_line_per_problem(background: Any) -> None:
    strict = background.result("lint")["strict"]
    assert strict.returncode == 1, strict.stderr[-3000:]
    assert strict.stdout.splitlines() == [
        "lint.yaml:5:52: dead name 'TestGenerated::test_gone': it matches no collected test",
        "lint.yaml:7:19: 'TestDevice::test_neg_privateuse1_float32' names a generated variant: "
        "write the generic name 'TestDevice::test_neg'",
        "lint.yaml:7:61: 'TestDevicePRIVATEUSE1::test_trivial' names a generated variant: "
        "write the generic name 'TestDevice::test_trivial'",
        "lint.yaml:11:19: conflicting modes for 'TestGenerated::test_pla.n': skip here, xfail at 9:19",
        "lint.yaml:13:19: duplicate name 'TestGenerated::test_add_alpha_0' (first listed at 5:19)",
    ]


@pytest.mark.heavy_runs("lint")
def test_lint_without_strict_warns_and_a_clean_config_passes(background: Any) -> None:
    runs = background.result("lint")
    warnings = runs["warnings"]
    assert warnings.returncode == 0
    assert len(warnings.stdout.splitlines()) == 5
    assert all(line.startswith("warning: lint.yaml:") for line in warnings.stdout.splitlines())
    clean = runs["clean"]
    assert clean.returncode == 0, clean.stdout + clean.stderr[-3000:]
    assert clean.stdout.startswith("OK: every name")
