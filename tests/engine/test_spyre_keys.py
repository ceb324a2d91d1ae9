"""Torch Spyre's newer keys take effect in a real pytest run on the reference device:
a label selection (`--reuse-labels`), `no_grad`, `force_xfail` on one dtype, and a
bare method name. One run (module-scoped) on a small tree written here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import Run, run_pytest

TEST_FILE = """\
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestKeys(TestCase):
    @dtypes(torch.float32, torch.float16)
    def test_only_float32_is_right(self, device, dtype):
        self.assertEqual(torch.ones(2, device=device, dtype=dtype).dtype, torch.float32)

    def test_records_no_graph(self, device):
        self.assertFalse(torch.is_grad_enabled())

    def test_records_a_graph(self, device):
        self.assertTrue(torch.is_grad_enabled())

    def test_smoke_only(self, device):
        pass

    def test_core_only(self, device):
        pass


instantiate_device_type_tests(TestKeys, globals())

if __name__ == "__main__":
    run_tests()
"""

CONFIG = """\
test_suite_config:
  labels: [core, smoke]
  files:
    - path: test/test_keys.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [test_records_no_graph]
          mode: mandatory_success
          no_grad: true
        - names: [TestKeys::test_smoke_only]
          mode: mandatory_success
          labels: [smoke]
        - names: [TestKeys::test_core_only]
          mode: mandatory_success
          labels: [core]
    - path: test/test_core_file.py
      labels: [core]
      unlisted_test_mode: mandatory_success
  global:
    supported_dtypes: [{name: float32}, {name: float16, force_xfail: true}]
"""


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tree = tmp_path_factory.mktemp("spyre-keys")
    (tree / "test").mkdir()
    (tree / "test" / "test_keys.py").write_text(TEST_FILE)
    # A file only `core` selects: importing it under `smoke` would break the run.
    (tree / "test" / "test_core_file.py").write_text("raise RuntimeError('imported')\n")
    (tree / "pytest.ini").write_text("[pytest]\n")
    (tree / "cfg.yaml").write_text(CONFIG)
    return run_pytest(
        [f"--reuse-config={tree / 'cfg.yaml'}", "--reuse-labels=smoke"], tree, tree=tree
    )


def outcomes(run: Run) -> dict[str, str]:
    return {name: run.by_name(name)["outcome"] for name in run.names()}


def test_a_label_selection_deselects_the_tests_of_other_labels_and_counts_them(
    smoke_run: Run,
) -> None:
    assert "test_core_only_privateuseone" not in smoke_run.names()
    collection = smoke_run.report["collection"]
    assert collection["deselected_by_labels"] == 1
    assert [Path(p).name for p in collection["files_deselected_by_labels"]] == ["test_core_file.py"]
    assert "not selected by labels smoke: 1 deselected, 1 files not collected" in smoke_run.output
    smoke = smoke_run.by_name("test_smoke_only_privateuseone")
    assert smoke["outcome"] == "passed"
    assert {"testtype__core", "testtype__smoke"} <= set(smoke["markers"])


def test_no_grad_runs_only_its_tests_without_autograd(smoke_run: Run) -> None:
    found = outcomes(smoke_run)
    # Named by its bare method name; the unlisted test keeps autograd on.
    assert found["test_records_no_graph_privateuseone"] == "passed"
    assert found["test_records_a_graph_privateuseone"] == "passed"


def test_force_xfail_on_one_dtype_makes_only_its_variants_xfail(smoke_run: Run) -> None:
    found: dict[str, Any] = outcomes(smoke_run)
    assert found["test_only_float32_is_right_privateuseone_float32"] == "passed"
    assert found["test_only_float32_is_right_privateuseone_float16"] == "xfailed"
    half = smoke_run.by_name("test_only_float32_is_right_privateuseone_float16")
    assert "dtype float16 has force_xfail" in half["reason"]
    assert smoke_run.returncode == 0, smoke_run.output[-3000:]
