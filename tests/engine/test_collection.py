"""Collection through the plugin on the upstream-style tree: filters, extensions, markers, modes.

Three real ``pytest --collect-only`` runs share one config: the whole tree,
``-m op__add`` and ``-m dtype__float16`` (the project-tree versions of the bars
checked on PyTorch's own files by bench/upstream_check.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import TREE, TREE_TESTS, Run, clean_env, heavy_run, run_pytest

pytestmark = pytest.mark.heavy_runs("collect", "collect_op_add", "collect_float16")

CONFIG = """\
test_suite_config:
  labels: [trunk, smoke]
  files:
    - path: ${TORCH_ROOT}/test/test_dtypes_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestTensorBasics::test_view_shares_memory, TestTensorBasics::test_sum_over_dim]
          mode: mandatory_success
        - names: [TestTensorBasics::test_fill]
          mode: mandatory_success
          tags: [model__llama]
          edits: {dtypes: {exclude: [{name: bool}, {name: int64}]}}
        - names: ['TestTensorBasics::test_.*_cpu']
          mode: xfail
          edits: {dtypes: {include: [{name: int8}]}}
    - path: ${TORCH_ROOT}/test/test_ops_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestOpsReuse::test_matches_cpu]
          mode: mandatory_success
          edits: {ops: {include: [{name: hypot}, {name: sigmoid}]}}
        - names: [TestOpsReuse::test_returns_device_tensors]
          mode: xfail_strict
    - path: ${TORCH_ROOT}/test/test_modules_reuse.py
      unlisted_test_mode: mandatory_success
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [TestPlainMath::test_sum]
          mode: xfail
        - names: [TestPlainMath::test_wrong_on_purpose]
          mode: skip
  global:
    supported_dtypes: [{name: bfloat16}, {name: float16}, {name: float32}]
    supported_ops: [{name: add}, {name: sub}, {name: mul, dtypes: [{name: float32}]}, {name: abs}, {name: lgamma}]
    supported_modules: [torch.nn.Linear]
"""
SUPPORTED = {"bfloat16", "float16", "float32"}


def collect(workdir: Path, *extra: str) -> Run:
    config = workdir / "config.yaml"
    config.write_text(CONFIG)
    return run_pytest(
        ["--collect-only", "-q", f"--reuse-config={config}", *extra],
        workdir,
        clean_env(TORCH_ROOT=str(TREE)),
    )


heavy_run("collect")(collect)
heavy_run("collect_op_add")(
    lambda w: collect(w, "-m", "op__add", str(TREE_TESTS / "test_ops_reuse.py"))
)
heavy_run("collect_float16")(
    lambda w: collect(w, "-m", "dtype__float16", str(TREE_TESTS / "test_dtypes_reuse.py"))
)


@pytest.fixture(scope="module")
def full(background: Any) -> Run:
    run = background.result("collect")
    assert run.returncode == 0, run.output[-3000:]
    return run


def in_file(run: Run, name: str) -> dict[str, dict[str, Any]]:
    return {n: r for n, r in run.records().items() if n.startswith(f"test/{name}::")}


def names_in(run: Run, name: str) -> set[str]:
    return {nodeid.rsplit("::", 1)[-1] for nodeid in in_file(run, name)}


def test_it_collects_exactly_the_device_variants_the_config_keeps(full: Run) -> None:
    assert names_in(full, "test_dtypes_reuse.py") == {
        "test_view_shares_memory_privateuseone_float32",
        "test_sum_over_dim_dim_0_privateuseone_float32",
        "test_sum_over_dim_dim_1_privateuseone_float32",
        "test_fill_privateuseone_bfloat16",
        "test_fill_privateuseone_float16",
        "test_fill_privateuseone_float32",
        # the regex entry: declared dtypes kept by the global list, plus the included int8
        "test_add_matches_cpu_privateuseone_bfloat16",
        "test_add_matches_cpu_privateuseone_float16",
        "test_add_matches_cpu_privateuseone_float32",
        "test_add_matches_cpu_privateuseone_int8",
    }
    assert all("PRIVATEUSEONE" in nodeid for nodeid in in_file(full, "test_dtypes_reuse.py"))


def test_every_dtype_variant_carries_its_dtype_marker_and_tags(full: Run) -> None:
    fill = full.by_name("test_fill_privateuseone_float16")
    assert fill["dtype"] == "float16" and fill["mode"] == "mandatory_success"
    assert set(fill["markers"]) >= {"dtype__float16", "model__llama", "testtype__trunk"}
    assert {"testtype__smoke", "mode__mandatory_success"} <= set(fill["markers"])
    assert fill["entry"]["names"] == ["TestTensorBasics::test_fill"]


def test_a_regex_name_full_matches_and_the_rest_is_skipped_and_counted(full: Run) -> None:
    added = full.by_name("test_add_matches_cpu_privateuseone_int8")
    assert added["mode"] == "xfail" and added["entry"]["matched"] == "TestTensorBasics::test_.*_cpu"
    assert "test_cpu_only" not in " ".join(names_in(full, "test_dtypes_reuse.py"))
    per_file = full.report["collection"]["per_file"][str(TREE_TESTS / "test_dtypes_reuse.py")]
    assert per_file["skipped_generic"] == 4  # matmul, cpu_only, known_wrong, repr
    # sum_over_dim: float64 x2; fill: 10 declared - 3 kept; add_matches_cpu: float64, int64
    assert per_file["filtered_variants"] == 2 + 7 + 2


def test_ops_follow_the_global_list_and_edits_ops_include_really_adds_ops(full: Run) -> None:
    matches = [
        r for r in in_file(full, "test_ops_reuse.py").values() if "test_matches_cpu_" in r["nodeid"]
    ]
    assert {r["op"] for r in matches} == {"add", "sub", "mul", "abs", "lgamma", "hypot", "sigmoid"}
    assert {r["dtype"] for r in matches if r["op"] == "mul"} == {"float32"}
    assert {r["dtype"] for r in matches if r["op"] == "sigmoid"} == SUPPORTED  # not in @ops' list
    assert all(r["dtype"] in SUPPORTED for r in matches)
    returns = [
        r
        for r in in_file(full, "test_ops_reuse.py").values()
        if "test_returns_device" in r["nodeid"]
    ]
    assert {r["op"] for r in returns} == {"add", "sub", "mul", "abs", "lgamma"}  # no edits there
    assert all(r["mode"] == "xfail_strict" and r["dtype"] is None for r in returns)
    assert (
        "op__sigmoid" in full.by_name("test_matches_cpu_sigmoid_privateuseone_float32")["markers"]
    )


def test_modules_are_filtered_and_marked(full: Run) -> None:
    assert names_in(full, "test_modules_reuse.py") == {
        "test_forward_matches_cpu_nn_Linear_privateuseone_float32"
    }
    record = full.by_name("test_forward_matches_cpu_nn_Linear_privateuseone_float32")
    assert record["module"] == "torch.nn.Linear" and "module__torch_nn_Linear" in record["markers"]


def test_unittest_style_tests_get_their_modes_and_the_class_counts(full: Run) -> None:
    plain = {n.split("::", 1)[1]: r for n, r in in_file(full, "test_plain_reuse.py").items()}
    assert plain["TestPlainMath::test_sum"]["mode"] == "xfail"
    assert plain["TestPlainStrings::test_sum"]["mode"] == "mandatory_success"
    assert "TestPlainMath::test_wrong_on_purpose" not in plain
    assert plain["TestParametrizedPlain::test_arange_length_n_2"]["mode"] == "mandatory_success"
    assert full.report["collection"]["deselected_by_config"] == 1


def test_a_class_upstream_instantiates_only_for_cuda_is_reported(full: Run) -> None:
    [reported] = full.report["collection"]["not_instantiated"]
    assert reported["class"] == "TestCudaOnly" and reported["only_for"] == "cuda"
    assert "not instantiated for privateuse1: TestCudaOnly" in full.stdout


def test_the_terminal_summary_counts_what_the_config_skipped(full: Run) -> None:
    assert "skip: " in full.stdout and "not collected by the config" in full.stdout
    stats = full.report["collection"]
    line = f"skip: {stats['skipped_variants'] + 1} not collected by the config"
    assert line in full.stdout


def test_marker_op_add_selects_exactly_the_add_variants_of_supported_dtypes(
    background: Any, full: Run
) -> None:
    run = background.result("collect_op_add")
    assert run.returncode == 0, run.output[-3000:]
    assert run.names() == {
        "test_matches_cpu_add_privateuseone_bfloat16",
        "test_matches_cpu_add_privateuseone_float16",
        "test_matches_cpu_add_privateuseone_float32",
        "test_returns_device_tensors_add_privateuseone",
    }
    expected = {
        n for n, r in in_file(full, "test_ops_reuse.py").items() if "op__add" in r["markers"]
    }
    assert set(run.records()) == expected


def test_marker_dtype_float16_selects_exactly_the_float16_variants(
    background: Any, full: Run
) -> None:
    run = background.result("collect_float16")
    assert run.returncode == 0, run.output[-3000:]
    expected = {
        nodeid
        for nodeid, record in in_file(full, "test_dtypes_reuse.py").items()
        if "dtype__float16" in record["markers"]
    }
    assert set(run.records()) == expected
    assert run.names() == {
        "test_fill_privateuseone_float16",
        "test_add_matches_cpu_privateuseone_float16",
    }
    in_ops = [
        r for r in in_file(full, "test_ops_reuse.py").values() if "dtype__float16" in r["markers"]
    ]
    assert {r["op"] for r in in_ops} == {"add", "sub", "abs", "lgamma", "hypot", "sigmoid"}
    assert all(r["dtype"] == "float16" for r in in_ops)
