"""crcr's config as PyTorch's own ``set_test_configs(...)`` call, and back.

The bar: the exported module, loaded by plain pytest (no crcr plugin) after the
reference device, makes torch's own instantiation run the variants crcr's plugin
collects with the same config, except exactly what the export names as inexpressible;
and ``import-pytorch`` of that module gives crcr the same selection back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from crcr_reuse.cli import main
from crcr_reuse.launcher import PytestRun, TestEnvironment
from crcr_reuse.pytorch_export import (
    BYPASS,
    DTYPES_NON_OPS,
    ONLY_FOR,
    OP_INCLUDE,
    SKIP_OUTSIDE,
    UNLISTED,
    XFAIL_NON_OPS,
)
from crcr_reuse.pytorch_import import (
    BYPASS_SCOPE,
    OP_DTYPES_NO_ALLOWLIST,
    OTHER_DECORATOR,
    TEST_DTYPE_SKIP,
)

from .conftest import ROOT, TREE, clean_env, heavy_run

DEVICE = "crcr_reuse.reference_device"

# A small file in the style of PyTorch's test_ops.py: @ops tests over a few OpInfos
# (div has three variants: full names div.no_rounding_mode, div.trunc_rounding...).
OPS_FILE = """\
import unittest

import torch
from torch.testing._internal.common_device_type import (
    OpDTypes, dtypes, instantiate_device_type_tests, ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

_ops = [op for op in op_db if op.name in ("add", "sub", "mul", "div", "neg", "abs")]


class TestOpsConfig(TestCase):
    @ops(_ops, allowed_dtypes=(torch.float32, torch.float64, torch.int64, torch.float16))
    def test_values(self, device, dtype, op):
        pass

    @ops(_ops, dtypes=OpDTypes.none)
    def test_device(self, device, op):
        pass

    @ops(_ops, allowed_dtypes=(torch.float32,))
    def test_known_broken(self, device, dtype, op):
        pass

    @dtypes(torch.float32, torch.int64, torch.float16)
    def test_plain_dtypes(self, device, dtype):
        pass

    def test_cpu_only(self, device):
        pass


class TestMore(TestCase):
    @ops(_ops, allowed_dtypes=(torch.float32,))
    def test_more(self, device, dtype, op):
        pass


instantiate_device_type_tests(TestOpsConfig, globals())
instantiate_device_type_tests(TestMore, globals())


class TestPlain(unittest.TestCase):
    def test_plain(self):
        pass
"""
CONFIG = """\
test_suite_config:
  files:
    - path: test_config_ops.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [TestOpsConfig::test_values]
          mode: mandatory_success
          edits:
            ops: {exclude: [{name: sub}]}
            dtypes: {exclude: [{name: int64}]}
        - names: [TestOpsConfig::test_known_broken]
          mode: xfail_strict
        - names: [TestOpsConfig::test_cpu_only, TestPlain::test_plain]
          mode: skip
        - names: [TestMore::test_more]
          mode: mandatory_success
          edits:
            ops: {include: [{name: neg}]}
  global:
    supported_ops: [{name: add}, {name: div}, {name: sub}, {name: mul, dtypes: [{name: float32}]}]
    supported_dtypes: [{name: float32}, {name: float64}, {name: int64}, {name: bfloat16}]
"""
# Records, after collection, what torch's own decorators made of each generated test.
RECORDER = """\
import json
import os


def pytest_collection_finish(session):
    states = {}
    for item in session.items:
        fn = getattr(item, "obj", None)
        if getattr(fn, "__unittest_skip__", False):
            states[item.nodeid] = "skip"
        elif getattr(fn, "__unittest_expecting_failure__", False):
            states[item.nodeid] = "xfail"
        else:
            states[item.nodeid] = "run"
    with open(os.environ["CRCR_RECORD_OUT"], "w") as handle:
        json.dump(states, handle)
"""
# What a crcr mode means in torch's terms.
EXPECTED_STATE = {"mandatory_success": "run", "xfail": "xfail", "xfail_strict": "xfail"}


@dataclass
class Chain:
    export: subprocess.CompletedProcess[str]
    module: str  # the exported module's text
    pytorch: dict[str, str]  # node id -> run / skip / xfail, under torch's machinery alone
    crcr: dict[str, str]  # node id -> mode, collected by crcr's plugin
    imported: dict[str, str] | None = None  # the same, with the config import-pytorch wrote
    import_run: subprocess.CompletedProcess[str] | None = None
    imported_text: str = ""


def normal(nodeid: str) -> str:
    """Class names read ...PRIVATEUSE1 or ...PRIVATEUSEONE depending on set-up order."""
    return nodeid.replace("PRIVATEUSEONE::", "PRIVATEUSE1::")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = clean_env(PYTHONPATH=str(ROOT / "engine"))
    return subprocess.run(
        [sys.executable, "-m", "crcr_reuse", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def torch_selection(tree: Path, test_file: str, module: str) -> dict[str, str]:
    """Plain pytest (no crcr plugin) with the reference device, then the exported module."""
    out = tree / "states.json"
    environment = TestEnvironment.for_device(
        None, tree, extra={"PYTORCH_TESTING_DEVICE_ONLY_FOR": "privateuse1"}
    )
    environment = environment.with_variables(
        PYTHONPATH=os.pathsep.join([str(tree), environment.variables["PYTHONPATH"]]),
        CRCR_RECORD_OUT=str(out),
    )
    plugins = ["no:django", "no:crcr_reuse", DEVICE, module, "crcr_recorder"]
    run = PytestRun(
        environment, tree, files=[test_file], collect_only=True, rootdir=tree,
        extra_args=[arg for plugin in plugins for arg in ("-p", plugin)],
    )  # fmt: skip
    done = run.run(timeout=300)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return {normal(k): v for k, v in json.loads(out.read_text()).items()}


def crcr_selection(tree: Path, test_file: str, config: Path, report: Path) -> dict[str, str]:
    """crcr's plugin collecting with the config: node id -> mode of what it runs."""
    run = PytestRun(
        TestEnvironment.for_device(DEVICE, tree), tree, configs=[config], files=[test_file],
        collect_only=True, rootdir=tree, json_report=report, extra_args=["-p", "no:django"],
    )  # fmt: skip
    done = run.run(timeout=300)
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    tests = json.loads(report.read_text())["tests"]
    return {normal(record["nodeid"]): record["mode"] for record in tests}


def selected(states: dict[str, str]) -> set[str]:
    return {nodeid for nodeid, state in states.items() if state != "skip"}


@heavy_run("pytorch_config_ops")
def _ops_chain(workdir: Path) -> Chain:
    """Export, torch's run, crcr's run, import-pytorch, crcr's run of the import."""
    tree = workdir / "tree"
    tree.mkdir()
    (tree / "test_config_ops.py").write_text(OPS_FILE)
    (tree / "cfg.yaml").write_text(CONFIG)
    (tree / "crcr_recorder.py").write_text(RECORDER)
    export = cli("export", "--format", "pytorch", "--config", "cfg.yaml", "-o", "crcr_exported.py", cwd=tree)  # fmt: skip
    chain = Chain(
        export,
        (tree / "crcr_exported.py").read_text(),
        torch_selection(tree, "test_config_ops.py", "crcr_exported"),
        crcr_selection(tree, "test_config_ops.py", tree / "cfg.yaml", tree / "crcr.json"),
    )
    chain.import_run = cli(
        "import-pytorch", "crcr_exported.py", "-o", "imported.yaml", "--path", "test_config_ops.py",
        cwd=tree,
    )  # fmt: skip
    chain.imported_text = (tree / "imported.yaml").read_text()
    chain.imported = crcr_selection(
        tree, "test_config_ops.py", tree / "imported.yaml", tree / "imported.json"
    )
    return chain


@heavy_run("pytorch_config_bundled")
def _bundled_chain(workdir: Path) -> Chain:
    """The bundled tree's config exported; test_ops_reuse.py under both machineries."""
    (workdir / "crcr_recorder.py").write_text(RECORDER)
    export = cli(
        "export", "--format", "pytorch", "--config", str(TREE / "crcr-config.yaml"),
        "-o", str(workdir / "crcr_bundled.py"), cwd=workdir,
    )  # fmt: skip
    # The bundled tree stays as it is: the modules reach pytest on PYTHONPATH.
    return Chain(
        export,
        (workdir / "crcr_bundled.py").read_text(),
        _torch_on_tree(workdir),
        crcr_selection(
            TREE, "test/test_ops_reuse.py", TREE / "crcr-config.yaml", workdir / "crcr.json"
        ),
    )


def _torch_on_tree(modules: Path) -> dict[str, str]:
    out = modules / "states.json"
    environment = TestEnvironment.for_device(
        None, TREE, extra={"PYTORCH_TESTING_DEVICE_ONLY_FOR": "privateuse1"}
    )
    environment = environment.with_variables(
        PYTHONPATH=os.pathsep.join([str(modules), environment.variables["PYTHONPATH"]]),
        CRCR_RECORD_OUT=str(out),
    )
    plugins = ["no:django", "no:crcr_reuse", DEVICE, "crcr_bundled", "crcr_recorder"]
    run = PytestRun(
        environment, TREE, files=["test/test_ops_reuse.py"], collect_only=True, rootdir=TREE,
        extra_args=[arg for plugin in plugins for arg in ("-p", plugin)],
    )  # fmt: skip
    done = run.run(timeout=300)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return {normal(k): v for k, v in json.loads(out.read_text()).items()}


def generic(nodeid: str) -> str:
    """file::Class::test of a generated id (the class without its device suffix)."""
    path, cls, name = nodeid.split("::")
    cls = cls.removesuffix("PRIVATEUSE1")
    for test in ("test_values", "test_device", "test_known_broken", "test_plain_dtypes",
                 "test_more", "test_plain", "test_cpu_only"):  # fmt: skip
        if name == test or name.startswith(test + "_"):
            return f"{path}::{cls}::{test}"
    return f"{path}::{cls}::{name}"


@pytest.mark.heavy_runs("pytorch_config_ops")
def test_torch_runs_what_crcr_runs_but_the_named_inexpressible_tests(background):
    chain = background.result("pytorch_config_ops")
    torch_runs, crcr_runs = selected(chain.pytorch), set(chain.crcr)
    # Nothing crcr runs is missing under torch's machinery...
    assert crcr_runs - torch_runs == set()
    # ...and what torch runs beyond it is exactly what the export names.
    extra = torch_runs - crcr_runs
    assert extra == {
        "test_config_ops.py::TestOpsConfigPRIVATEUSE1::test_plain_dtypes_privateuseone_float16",
        "test_config_ops.py::TestPlain::test_plain",
    }
    assert {generic(nodeid) for nodeid in extra} == {
        "test_config_ops.py::TestOpsConfig::test_plain_dtypes",
        "test_config_ops.py::TestPlain::test_plain",
    }
    assert f"# - {SKIP_OUTSIDE} (1): test_config_ops.py::TestPlain::test_plain" in chain.module
    assert f"# - {DTYPES_NON_OPS} (1): test_config_ops.py::TestOpsConfig::test_plain_dtypes" in (
        chain.module
    )
    # Named, though neg is in the test's own @ops list here, so nothing differs.
    assert f"# - {OP_INCLUDE} (1): cfg.yaml:18:29: neg" in chain.module


@pytest.mark.heavy_runs("pytorch_config_ops")
def test_torch_expects_the_failures_crcr_expects(background):
    chain = background.result("pytorch_config_ops")
    for nodeid, mode in chain.crcr.items():
        assert chain.pytorch[nodeid] == EXPECTED_STATE[mode], nodeid
    assert sum(1 for mode in chain.crcr.values() if mode == "xfail_strict") == 6


@pytest.mark.heavy_runs("pytorch_config_ops")
def test_the_export_writes_the_call_and_reports_counts_on_stderr(background):
    chain = background.result("pytorch_config_ops")
    assert chain.export.returncode == 0, chain.export.stderr
    module = chain.module
    assert "PrivateUse1TestBase.set_test_configs(" in module
    # crcr's "div" is every div variant; torch's allowlist holds full names.
    assert '"div.floor_rounding",\n        "div.no_rounding_mode",' in module
    assert '"neg",' in module  # included by one test, so allowed, and skipped for the others
    assert 'DecorateInfo(_SKIP_OP, "TestOpsConfig", "test_values")' in module  # sub there
    assert '"TestOpsConfig": ["test_cpu_only"],' in module
    lines = chain.export.stderr.splitlines()
    assert f"crcr export: cannot express {SKIP_OUTSIDE} (1): " in lines[0]
    assert lines[-1] == (
        "crcr export: 7 allowlisted ops, 21 op overrides on 7 ops, "
        "1 excluded tests in 1 classes; 3 kinds not expressible"
    )


@pytest.mark.heavy_runs("pytorch_config_ops")
def test_import_pytorch_gives_crcr_the_same_selection_back(background):
    chain = background.result("pytorch_config_ops")
    assert chain.import_run is not None and chain.import_run.returncode == 0
    assert chain.imported is not None
    # The one test torch's config could not skip comes back runnable; nothing else moves.
    assert set(chain.imported) - set(chain.crcr) == {"test_config_ops.py::TestPlain::test_plain"}
    assert set(chain.crcr) - set(chain.imported) == set()
    shared = set(chain.crcr) & set(chain.imported)
    assert {n: chain.imported[n] for n in shared} == {n: chain.crcr[n] for n in shared}
    text = chain.imported_text
    assert "- TestOpsConfig::test_cpu_only\n      mode: skip" in text
    assert "- name: mul\n      dtypes:\n      - name: float32" in text


@pytest.mark.heavy_runs("pytorch_config_bundled")
def test_the_bundled_ops_file_runs_the_same_under_both(background):
    chain = background.result("pytorch_config_bundled")
    assert chain.export.returncode == 0, chain.export.stderr
    assert selected(chain.pytorch) == set(chain.crcr)
    assert len(chain.crcr) == 59  # lgamma excluded in both tests (no kernel)
    assert not any("lgamma" in nodeid for nodeid in chain.crcr)
    assert "crcr export: cannot express per-dtype tolerances (precision) (2): " in (
        chain.export.stderr
    )


def test_a_value_that_needs_running_is_an_error_naming_the_line(tmp_path, capsys):
    source = tmp_path / "conftest.py"
    source.write_text(
        "from torch.testing._internal.common_device_type import PrivateUse1TestBase\n"
        "from torch.testing._internal.common_methods_invocations import op_db\n"
        "SUPPORTED = [op.full_name for op in op_db]\n"
        "PrivateUse1TestBase.set_test_configs(op_allowlist=SUPPORTED)\n"
    )
    output = tmp_path / "cfg.yaml"
    assert main(["import-pytorch", str(source), "-o", str(output)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {source}:3: cannot read ")
    assert not output.exists()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("x = 1\n", ":1: no set_test_configs(...) call"),
        ("B.set_test_configs(op_allowlist=['add'], skips={})\n", ":1: unknown argument 'skips'"),
        ("B.set_test_configs(\n  op_allowlist=[1, 2])\n", ":1: op_allowlist must be a list"),
        ("def broken(:\n", ":1: not Python"),
    ],
)
def test_bad_input_names_file_and_line_and_writes_nothing(tmp_path, capsys, text, problem):
    source = tmp_path / "conftest.py"
    source.write_text(text)
    output = tmp_path / "cfg.yaml"
    assert main(["import-pytorch", str(source), "-o", str(output)]) == 2
    assert problem in capsys.readouterr().err
    assert not output.exists()


def _export(tmp_path: Path, config: str, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    path = tmp_path / "cfg.yaml"
    path.write_text(config.replace("TREE", str(TREE / "test")))
    output = tmp_path / "out.py"
    assert main(["export", "--format", "pytorch", "--config", str(path), "-o", str(output)]) == 0
    return output.read_text(), capsys.readouterr().err


def test_a_config_lifting_restrictions_everywhere_sets_torchs_class_switch(tmp_path, capsys):
    module, stderr = _export(
        tmp_path,
        "test_suite_config:\n  files:\n"
        "    - {path: TREE/test_dtypes_reuse.py, unlisted_test_mode: mandatory_success,"
        " bypass_device_restrictions: true}\n",
        capsys,
    )
    assert module.endswith("PrivateUse1TestBase.bypass_device_restrictions = True\n")
    assert "set_test_configs(\n)" in module  # nothing else to say: every test runs
    assert f"cannot express {ONLY_FOR} (1): " in stderr


def test_skips_and_xfails_torch_cannot_make_are_named_per_kind(tmp_path, capsys):
    module, stderr = _export(
        tmp_path,
        "test_suite_config:\n  files:\n"
        "    - path: TREE/test_dtypes_reuse.py\n"
        "      tests:\n"
        "        - {names: [TestTensorBasics::test_fill], mode: mandatory_success,"
        " bypass_device_restrictions: true}\n"
        "        - {names: [TestTensorBasics::test_known_wrong_expectation], mode: xfail}\n"
        "    - path: TREE/test_plain_reuse.py\n"
        "      tests: [{names: [TestPlainMath::test_sum], mode: mandatory_success}]\n",
        capsys,
    )
    # Unlisted tests of the device class are excluded by name (unlisted_test_mode: skip).
    assert '"TestTensorBasics": ["test_add_matches_cpu", ' in module
    assert '"TestCudaOnly": ["test_streams"],' in module
    lines = stderr.splitlines()
    assert any(
        line.startswith(f"crcr export: cannot express {SKIP_OUTSIDE} (5): ") for line in lines
    )
    assert f"{XFAIL_NON_OPS} (1): " in stderr
    assert f"{BYPASS} (1): " in stderr
    assert f"{UNLISTED} (2): " in stderr
    assert f"# - {SKIP_OUTSIDE} (5): " in module  # the same list heads the module


HANDWRITTEN = """\
import unittest

import torch
from torch.testing._internal.common_device_type import PrivateUse1TestBase, precisionOverride
from torch.testing._internal.opinfo.core import DecorateInfo

SUPPORTED = ("add", "mul", "sub")

PrivateUse1TestBase.set_test_configs(
    op_allowlist=SUPPORTED,
    op_overrides={
        "add": [
            DecorateInfo(precisionOverride({torch.float32: 1e-2})),
            DecorateInfo(unittest.skip("broken"), "TestOps", "test_out", dtypes=[torch.float16]),
        ],
        "mul": [
            DecorateInfo(unittest.expectedFailure, "TestOps", "test_grad"),
            DecorateInfo(precisionOverride({torch.float16: 1e-1}), "TestOps", "test_grad"),
        ],
        "sub": [DecorateInfo(unittest.skip("no kernel"))],
    },
    test_exclusions={"TestCudaOnly": "*", "TestTensorBasics": ["test_cpu_only"]},
)


class TestFooOpenReg:
    bypass_device_restrictions = True
"""


# One op's dtype skip, for every test, without an allowlist: crcr has no place for it.
NO_ALLOWLIST = """\
import unittest

import torch
from torch.testing._internal.common_device_type import PrivateUse1TestBase
from torch.testing._internal.opinfo.core import DecorateInfo

PrivateUse1TestBase.set_test_configs(
    op_overrides={"add": [DecorateInfo(unittest.skip("no fp16"), dtypes=[torch.float16])]},
)
"""


@heavy_run("pytorch_config_handwritten")
def _handwritten(workdir: Path) -> list[subprocess.CompletedProcess[str]]:
    (workdir / "conftest.py").write_text(HANDWRITTEN)
    (workdir / "no_allowlist.py").write_text(NO_ALLOWLIST)
    return [
        cli("import-pytorch", "conftest.py", "-o", "cfg.yaml", cwd=workdir),
        cli("import-pytorch", "no_allowlist.py", "-o", "no_allowlist.yaml", cwd=workdir),
    ]


@pytest.mark.heavy_runs("pytorch_config_handwritten")
def test_a_handwritten_config_maps_and_reports_the_rest_once_per_kind(background, capsys):
    done = background.result("pytorch_config_handwritten")[0]
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (
        f"crcr import-pytorch: not mapped: {OTHER_DECORATOR} (2): "
        "conftest.py:13: add: precisionOverride, conftest.py:18: mul: precisionOverride"
    )
    assert f"{TEST_DTYPE_SKIP} (1): TestOps::test_out: add" in done.stderr
    assert f"{BYPASS_SCOPE} (1): conftest.py:27" in done.stderr
    text = (background.root / "pytorch_config_handwritten" / "cfg.yaml").read_text()
    assert text.startswith("# Imported by crcr from conftest.py:9 (set_test_configs).\n")
    document = yaml.safe_load(text)["test_suite_config"]
    # sub is skipped for every test: it leaves the allowlist.
    assert document["global"] == {"supported_ops": [{"name": "add"}, {"name": "mul"}]}
    entry = document["files"][0]
    assert entry["path"] == "${TORCH_ROOT}/test/test_*.py"
    assert entry["bypass_device_restrictions"] is True
    assert entry["tests"] == [
        {"names": ["TestCudaOnly::.*"], "mode": "skip"},
        {
            "names": ["TestOps::test_grad"],
            "mode": "mandatory_success",
            "edits": {"ops": {"include": [{"name": "mul", "force_xfail": True}]}},
        },
        {"names": ["TestTensorBasics::test_cpu_only"], "mode": "skip"},
    ]
    # crcr's loader takes it as it is (the bundled tree as ${TORCH_ROOT}).
    config = background.root / "pytorch_config_handwritten" / "cfg.yaml"
    assert main(["validate", str(config), "--torch-root", str(TREE)]) == 0
    assert capsys.readouterr().out.startswith("OK: 1 config(s), 1 files entries (5 files)")


@pytest.mark.heavy_runs("pytorch_config_handwritten")
def test_one_ops_dtype_skip_without_an_allowlist_is_reported_not_dropped(background):
    done = background.result("pytorch_config_handwritten")[1]
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"crcr import-pytorch: not mapped: {OP_DTYPES_NO_ALLOWLIST} (1): add\n"
    text = (background.root / "pytorch_config_handwritten" / "no_allowlist.yaml").read_text()
    assert "global" not in yaml.safe_load(text)["test_suite_config"]
