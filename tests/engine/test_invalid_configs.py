"""Invalid configs: each is rejected with file:line:column, and a pytest run collects nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from crcr_reuse.loader import ConfigError, load_configs

from .conftest import RUN_TIMEOUT, TREE, Run, clean_env, heavy_run

FILE = "${TORCH_ROOT}/test/test_dtypes_reuse.py"


def one_test(entry: str) -> str:
    """A config with one tests entry (given as YAML lines under '- ')."""
    return f"test_suite_config:\n  files:\n    - path: {FILE}\n      tests:\n        - {entry}\n"


def edit(kind: str, way: str, item: str) -> str:
    """A config whose one tests entry has one item (YAML after '- ') in edits.KIND.WAY."""
    head = "names: [test_fill]\n          mode: mandatory_success\n          edits:\n"
    return one_test(f"{head}            {kind}:\n              {way}:\n                - {item}")


def custom_module(*keys: str) -> str:
    """A config including custom module M with these keys (one YAML line each), line 11 on."""
    return edit("modules", "include", "\n                  ".join(["name: M", *keys]))


LINEAR = "module_path: torch.nn.Linear"
TENSOR = "forward_inputs: {args: [{tensor: %s}]}"


# (case id, {file name: text}, "file:line:column", a fragment of the message)
CASES: list[tuple[str, dict[str, str], str, str]] = [
    ("unknown top-level key", {"c.yaml": "test_suite_cfg:\n  files: []\n"}, "c.yaml:1:1", "unknown key 'test_suite_cfg'"),
    ("unknown key in a files entry", {"c.yaml": f"test_suite_config:\n  files:\n    - path: {FILE}\n      unlisted_mode: skip\n"}, "c.yaml:4:7", "unknown key 'unlisted_mode'"),
    ("unknown key in a tests entry", {"c.yaml": one_test("names: [test_fill]\n          mode: skip\n          why: no")}, "c.yaml:7:11", "unknown key 'why'"),
    ("bad mode", {"c.yaml": one_test("names: [test_fill]\n          mode: sometimes")}, "c.yaml:6:17", "mode must be one of"),
    ("bad unlisted_test_mode", {"c.yaml": f"test_suite_config:\n  files:\n    - path: {FILE}\n      unlisted_test_mode: ignore\n"}, "c.yaml:4:27", "unlisted_test_mode must be one of"),
    ("unknown dtype", {"c.yaml": "test_suite_config:\n  global:\n    supported_dtypes: [{name: float33}]\n"}, "c.yaml:3:31", "unknown dtype 'float33'"),
    ("bad op name form", {"c.yaml": "test_suite_config:\n  global:\n    supported_ops: [{name: add-sub}]\n"}, "c.yaml:3:28", "not a valid op name"),
    ("bad regex", {"c.yaml": one_test("names: ['test_(unclosed']\n          mode: skip")}, "c.yaml:5:19", "not a valid regex"),
    ("name with two separators", {"c.yaml": one_test("names: [A::b::c]\n          mode: skip")}, "c.yaml:5:19", "more than one '::'"),
    ("path that matches no file", {"c.yaml": "test_suite_config:\n  files:\n    - path: ${TORCH_ROOT}/test/test_nothing_*.py\n"}, "c.yaml:3:13", "matches no file"),
    ("unset token", {"c.yaml": "test_suite_config:\n  files:\n    - path: ${TORCH_DEVICE_ROOT}/tests/test_x.py\n"}, "c.yaml:3:13", "${TORCH_DEVICE_ROOT} is not set"),
    ("unknown token", {"c.yaml": "test_suite_config:\n  files:\n    - path: ${TORCH_HOME}/test/test_x.py\n"}, "c.yaml:3:13", "unknown token '${TORCH_HOME}'"),
    ("broken YAML", {"c.yaml": "test_suite_config:\n  files: [\n    - oops\n"}, "c.yaml:3:5", "invalid YAML"),
    ("duplicate key", {"c.yaml": one_test("names: [test_fill]\n          mode: skip\n          mode: xfail")}, "c.yaml:7:11", "duplicate key 'mode'"),
    ("precision that is not a number", {"c.yaml": "test_suite_config:\n  global:\n    supported_dtypes:\n      - {name: float32, precision: {atol: tight}}\n"}, "c.yaml:4:43", "precision.atol must be a number"),
    ("empty names", {"c.yaml": one_test("names: []\n          mode: skip")}, "c.yaml:5:18", "names must not be empty"),
    ("missing mode", {"c.yaml": one_test("names: [test_fill]")}, "c.yaml:5:11", "needs a 'mode'"),
    ("a label that is not a name", {"c.yaml": "test_suite_config:\n  labels: [smoke tests]\n"}, "c.yaml:2:12", "label 'smoke tests' is not a label name"),
    ("a suite_ selection written as a label", {"c.yaml": f"test_suite_config:\n  files:\n    - path: {FILE}\n      labels: [suite_inductor]\n"}, "c.yaml:4:16", "label 'suite_inductor' is a selection, not a label"),
    ("labels of a tests entry that are not a list", {"c.yaml": one_test("names: [test_fill]\n          mode: skip\n          labels: smoke")}, "c.yaml:7:19", "labels must be a list"),
    ("no_grad that is not a boolean", {"c.yaml": one_test("names: [test_fill]\n          mode: skip\n          no_grad: sometimes")}, "c.yaml:7:20", "no_grad must be true or false"),
    ("force_xfail that is not a boolean", {"c.yaml": "test_suite_config:\n  global:\n    supported_ops: [{name: add, force_xfail: maybe}]\n"}, "c.yaml:3:46", "force_xfail must be true or false"),
    ("conflicting unlisted_test_mode when merging", {"a.yaml": f"test_suite_config:\n  files:\n    - path: {FILE}\n      unlisted_test_mode: skip\n", "b.yaml": f"test_suite_config:\n  files:\n    - path: {FILE}\n      unlisted_test_mode: xfail\n"}, "b.yaml:4:27", "conflicting unlisted_test_mode"),
    ("bypass_device_restrictions that is not a boolean", {"c.yaml": f"test_suite_config:\n  files:\n    - path: {FILE}\n      bypass_device_restrictions: cuda\n"}, "c.yaml:4:35", "bypass_device_restrictions must be true or false"),
    ("bypass_device_restrictions of a tests entry that is a list", {"c.yaml": one_test("names: [TestCudaOnly::test_streams]\n          mode: mandatory_success\n          bypass_device_restrictions: [cuda]")}, "c.yaml:7:39", "bypass_device_restrictions must be true or false"),
    ("conflicting bypass_device_restrictions when merging", {"a.yaml": f"test_suite_config:\n  files:\n    - path: {FILE}\n      bypass_device_restrictions: true\n", "b.yaml": f"test_suite_config:\n  files:\n    - path: {FILE}\n      bypass_device_restrictions: false\n"}, "b.yaml:4:35", "conflicting bypass_device_restrictions for '${TORCH_ROOT}/test/test_dtypes_reuse.py': 'false' here, 'true' at"),
    ("conflicting modes for one name when merging", {"a.yaml": one_test("names: [TestTensorBasics::test_fill]\n          mode: skip"), "b.yaml": one_test("names: [TestTensorBasics::test_fill]\n          mode: xfail")}, "b.yaml:5:19", "conflicting mode for 'TestTensorBasics::test_fill'"),
    ("an input tensor with an unknown init", {"c.yaml": custom_module(LINEAR, TENSOR % "{shape: [2], dtype: float32, init: gaussian}")}, "c.yaml:12:87", "init must be one of rand, randn, randint"),
    ("an input tensor loaded from a file", {"c.yaml": custom_module(LINEAR, TENSOR % "{shape: [2], dtype: float32, init: file}")}, "c.yaml:12:87", "(init: file) are not supported by crcr"),
    ("a randint input without init_args.high", {"c.yaml": custom_module(LINEAR, TENSOR % "{shape: [2], dtype: int64, init: randint}")}, "c.yaml:12:52", "a tensor with init randint needs init_args.high"),
    ("an input tensor in a dtype crcr does not build", {"c.yaml": custom_module(LINEAR, TENSOR % "{shape: [2], dtype: float8_e4m3fn}")}, "c.yaml:12:72", "dtype 'float8_e4m3fn' is not one crcr builds tensors in"),
    ("an unknown key in an input tensor", {"c.yaml": custom_module(LINEAR, TENSOR % "{shape: [2], dtype: float32, layout: strided}")}, "c.yaml:12:81", "unknown key 'layout' in a tensor"),
    ("a module_path that is not an import path", {"c.yaml": custom_module("module_path: Linear")}, "c.yaml:11:32", "module_path 'Linear' is not an import path"),
    ("module inputs without a module_path", {"c.yaml": custom_module("constructor_inputs: {args: [{value: 4}]}")}, "c.yaml:10:19", "a custom module needs a 'module_path'"),
    ("a py input that is more than a literal", {"c.yaml": custom_module(LINEAR, "forward_inputs: {args: [{py: \"__import__('os')\"}]}")}, "c.yaml:12:48", "is not a literal"),
    ("an input argument of two kinds", {"c.yaml": custom_module(LINEAR, "forward_inputs: {args: [{value: 1, py: '2'}]}")}, "c.yaml:12:43", "needs exactly one of tensor, tensor_list, value, py"),
    ("a malformed config reference", {"c.yaml": custom_module(LINEAR, "constructor_inputs: {args: [{value: '<config:GraniteConfig>'}]}")}, "c.yaml:12:55", "is not a config reference"),
    ("forward_inputs beside sample_inputs_func", {"c.yaml": custom_module(LINEAR, "forward_inputs: {args: []}", "sample_inputs_func: {args: []}")}, "c.yaml:13:39", "not both"),
    ("custom module keys on an excluded module", {"c.yaml": edit("modules", "exclude", "{name: M, module_path: torch.nn.Linear}")}, "c.yaml:10:29", "unknown key 'module_path'"),
    ("an op tag that is not a marker name", {"c.yaml": edit("ops", "include", "{name: add, tags: [not a marker]}")}, "c.yaml:10:38", "tag 'not a marker' is not a valid marker name"),
    ("tags on an excluded op", {"c.yaml": edit("ops", "exclude", "{name: add, tags: [fp32operation]}")}, "c.yaml:10:31", "unknown key 'tags' in an op in edits.ops.exclude"),
    ("conflicting dtype precision when merging", {"a.yaml": "test_suite_config:\n  global:\n    supported_dtypes: [{name: float16}]\n", "b.yaml": "test_suite_config:\n  global:\n    supported_dtypes: [{name: float16, precision: {atol: 0.1}}]\n"}, "b.yaml:3:24", "conflicting settings for dtype 'float16'"),
]  # fmt: skip


def write_case(directory: Path, files: dict[str, str]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in files.items():
        (directory / name).write_text(text)
        paths.append(directory / name)
    return paths


def test_the_table_holds_at_least_fifteen_invalid_configs() -> None:
    assert len(CASES) >= 15


@pytest.mark.parametrize(("case", "files", "where", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_it_rejects_an_invalid_config_with_its_position(
    tmp_path: Path, case: str, files: dict[str, str], where: str, fragment: str
) -> None:
    paths = write_case(tmp_path, files)
    with pytest.raises(ConfigError) as caught:
        load_configs(paths, {"TORCH_ROOT": str(TREE)})
    shown = str(caught.value)
    assert f"{tmp_path}/{where}: " in shown
    assert fragment in shown


# One interpreter runs pytest.main once per case (each a full pytest run with the
# plugin): the same checks as separate processes, without paying startup 22 times.
DRIVER = """
import contextlib, io, json, sys
import pytest
results = {}
for case, options in json.loads(sys.argv[1]).items():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = pytest.main(["-p", "no:django", "-p", "no:cacheprovider", *options])
    results[case] = [int(code), out.getvalue(), err.getvalue(), "torch" in sys.modules]
print(json.dumps(results))
"""


@heavy_run("invalid_configs")
def _invalid_config_runs(workdir: Path) -> Any:
    cases = {}
    for index, (case, files, _, _) in enumerate(CASES):
        paths = write_case(workdir / f"case{index}", files)
        report = workdir / f"case{index}" / "report.json"
        cases[case] = [f"--rootdir={TREE}", f"--reuse-json={report}"] + [
            f"--reuse-config={path}" for path in paths
        ]
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(cases)],
        cwd=TREE,
        env=clean_env(TORCH_ROOT=str(TREE)),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=True,
    )
    results = json.loads(done.stdout.splitlines()[-1])
    return {
        case: (Run(code, out, err, report={"torch_imported": torch}), cases[case])
        for case, (code, out, err, torch) in results.items()
    }


@pytest.mark.heavy_runs("invalid_configs")
@pytest.mark.parametrize(("case", "files", "where", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_a_pytest_run_with_an_invalid_config_collects_nothing(
    background: Any, case: str, files: dict[str, str], where: str, fragment: str
) -> None:
    run, options = background.result("invalid_configs")[case]
    assert run.returncode == 4  # pytest's usage error: the run never started
    assert "crcr reuse: invalid config, nothing collected" in run.output
    assert f"/{where}: " in run.output
    assert fragment in run.output
    assert "test session starts" not in run.output  # the session never began
    assert not Path(options[1].removeprefix("--reuse-json=")).exists()  # no report: no test ran
    assert not run.report["torch_imported"]  # rejected before torch was even imported
