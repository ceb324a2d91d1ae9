"""Device restrictions, opt-in: ``bypass_device_restrictions`` on a files or tests entry.

A tree of its own, run once on the reference device: one file opts in as a whole
(one of its tests opts out again), the other keeps upstream's restrictions but for
one tests entry. Opted in, a class upstream instantiates ``only_for="cuda"`` (or
``except_for`` privateuse1) runs on the device and ``@onlyCUDA``/``@onlyOn`` tests run
instead of being skipped; elsewhere nothing changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import Run, heavy_run, run_pytest

pytestmark = pytest.mark.heavy_runs("device_restrictions")

HEADER = """\
import torch
from torch.testing._internal.common_device_type import (
    instantiate_device_type_tests,
    onlyCPU,
    onlyCUDA,
    onlyOn,
)
from torch.testing._internal.common_utils import TestCase


def on_the_device(test, device):
    test.assertEqual(torch.device(device).type, torch._C._get_privateuse1_backend_name())
    test.assertEqual(torch.ones(3, device=device).sum().item(), 3)
"""

OPTED_IN = (
    HEADER
    + """

class TestCudaOnly(TestCase):
    def test_ones_sum(self, device):
        on_the_device(self, device)


class TestNotOnPrivateUse1(TestCase):
    def test_ones_sum(self, device):
        on_the_device(self, device)


class TestGated(TestCase):
    @onlyCUDA
    def test_cuda_gated(self, device):
        on_the_device(self, device)

    @onlyOn(["cuda", "xpu"])
    def test_listed_gated(self, device):
        on_the_device(self, device)

    @onlyCPU
    def test_cpu_gated(self, device):
        raise AssertionError("its entry keeps upstream's restriction: it never runs here")


instantiate_device_type_tests(TestCudaOnly, globals(), only_for="cuda")
instantiate_device_type_tests(TestNotOnPrivateUse1, globals(), except_for=["privateuse1"])
instantiate_device_type_tests(TestGated, globals())
"""
)

DEFAULT = (
    HEADER
    + """

class TestCudaOnly(TestCase):
    def test_ones_sum(self, device):
        raise AssertionError("upstream instantiates this class only for CUDA")


class TestCudaOnlyPicked(TestCase):
    @onlyCUDA
    def test_picked(self, device):
        on_the_device(self, device)

    @onlyCUDA
    def test_left(self, device):
        raise AssertionError("not opted in: @onlyCUDA skips it")


class TestGated(TestCase):
    @onlyCUDA
    def test_cuda_gated(self, device):
        raise AssertionError("not opted in: @onlyCUDA skips it")


instantiate_device_type_tests(TestCudaOnly, globals(), only_for="cuda")
instantiate_device_type_tests(TestCudaOnlyPicked, globals(), only_for="cuda")
instantiate_device_type_tests(TestGated, globals())
"""
)

CONFIG = """\
test_suite_config:
  files:
    - path: test/test_opted_in.py
      unlisted_test_mode: mandatory_success
      bypass_device_restrictions: true
      tests:
        - names: [TestGated::test_cpu_gated]
          mode: mandatory_success
          bypass_device_restrictions: false
    - path: test/test_default.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [TestCudaOnlyPicked::test_picked]
          mode: mandatory_success
          bypass_device_restrictions: true
"""


@heavy_run("device_restrictions")
def _device_restrictions(workdir: Path) -> Run:
    tree = workdir / "tree"
    (tree / "test").mkdir(parents=True, exist_ok=True)
    (tree / "pytest.ini").write_text("[pytest]\n")
    (tree / "test" / "test_opted_in.py").write_text(OPTED_IN)
    (tree / "test" / "test_default.py").write_text(DEFAULT)
    (tree / "config.yaml").write_text(CONFIG)
    return run_pytest([f"--reuse-config={tree / 'config.yaml'}", "-rs"], workdir, tree=tree)


@pytest.fixture(scope="module")
def run(background: Any) -> Run:
    return background.result("device_restrictions")


def outcomes(run: Run, path: str) -> dict[str, str]:
    """Outcome by node id (without the file) of the tests collected in one file."""
    return {
        nodeid.split("::", 1)[1]: record["outcome"]
        for nodeid, record in run.records().items()
        if nodeid.startswith(f"{path}::")
    }


def test_an_opted_in_file_runs_its_restricted_classes_and_gated_tests_on_the_device(
    run: Run,
) -> None:
    assert run.returncode == 0, run.output[-3000:]
    assert outcomes(run, "test/test_opted_in.py") == {
        "TestCudaOnlyPRIVATEUSEONE::test_ones_sum_privateuseone": "passed",
        "TestNotOnPrivateUse1PRIVATEUSEONE::test_ones_sum_privateuseone": "passed",
        "TestGatedPRIVATEUSEONE::test_cuda_gated_privateuseone": "passed",
        "TestGatedPRIVATEUSEONE::test_listed_gated_privateuseone": "passed",
        # its tests entry says false: upstream's @onlyCPU holds
        "TestGatedPRIVATEUSEONE::test_cpu_gated_privateuseone": "skipped",
    }


def test_without_the_switch_upstreams_restrictions_hold(run: Run) -> None:
    assert outcomes(run, "test/test_default.py") == {
        "TestCudaOnlyPickedPRIVATEUSEONE::test_picked_privateuseone": "passed",
        "TestCudaOnlyPickedPRIVATEUSEONE::test_left_privateuseone": "skipped",
        "TestGatedPRIVATEUSEONE::test_cuda_gated_privateuseone": "skipped",
    }
    [reported] = run.report["collection"]["not_instantiated"]
    assert (reported["class"], reported["only_for"]) == ("TestCudaOnly", "cuda")
    assert reported["file"].endswith("test/test_default.py")
    assert "not instantiated for privateuse1: TestCudaOnly" in run.stdout


def test_a_test_left_restricted_is_skipped_with_torchs_reason(run: Run) -> None:
    assert "Only runs on cuda" in run.by_name("test_left_privateuseone")["message"]
    assert "Only runs on cpu" in run.by_name("test_cpu_gated_privateuseone")["message"]
    assert "5 passed, 3 skipped" in run.stdout
