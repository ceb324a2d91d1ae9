"""Loading, validating and merging configs (in process: nothing here imports torch)."""

from __future__ import annotations

from pathlib import Path

import pytest
from crcr_reuse.loader import ConfigError, load_configs

from .conftest import TREE, TREE_TESTS

TOKENS = {"TORCH_ROOT": str(TREE)}

BAR_ONE = """\
test_suite_config:
  labels: [trunk]
  files:
    - path: ${TORCH_ROOT}/test/test_dtypes_reuse.py
      unlisted_test_mode: skip
      tests:
        # Why: basic metadata ops, fully supported.
        - names: [TestTensorBasics::test_fill, TestTensorBasics::test_view_shares_memory]
          mode: mandatory_success
        - names: [TestTensorBasics::test_add_matches_cpu]
          mode: mandatory_success
          edits: {dtypes: {exclude: [{name: bool}, {name: int64}]}}
  global:
    supported_dtypes: [{name: bfloat16}, {name: half}, {name: float32, precision: {atol: 1e-3}}]
"""


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems_of(paths: list[Path], tokens: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_configs(paths, TOKENS if tokens is None else tokens)
    return [f"{pos}: {message}" for pos, message in caught.value.problems]


def test_it_loads_a_config_with_its_tokens_dtypes_and_reasons(tmp_path: Path) -> None:
    config = load_configs([write(tmp_path, BAR_ONE)], TOKENS)
    entry = config.files[0]
    assert entry.files == (str((TREE_TESTS / "test_dtypes_reuse.py").resolve()),)
    assert entry.unlisted_test_mode == "skip"
    assert entry.tests[0].reason == "Why: basic metadata ops, fully supported."
    assert [n.text for n in entry.tests[0].names] == [
        "TestTensorBasics::test_fill",
        "TestTensorBasics::test_view_shares_memory",
    ]
    assert [d.name for d in config.global_.supported_dtypes or ()] == [
        "bfloat16",
        "float16",
        "float32",
    ]
    assert config.global_.supported_dtypes[2].precision.atol == pytest.approx(1e-3)  # type: ignore[index, union-attr]
    assert config.labels == ("trunk",)


def test_it_takes_torch_root_from_the_environment_when_no_option_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_ROOT", str(TREE))
    config = load_configs([write(tmp_path, BAR_ONE)])
    assert config.files[0].files[0].endswith("test_dtypes_reuse.py")


def test_an_option_beats_the_environment_for_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_ROOT", str(tmp_path / "nowhere"))
    config = load_configs([write(tmp_path, BAR_ONE)], TOKENS)
    assert config.files[0].files[0].endswith("test_dtypes_reuse.py")


def test_a_glob_path_lists_every_matching_file(tmp_path: Path) -> None:
    text = f"test_suite_config:\n  files:\n    - path: {TREE_TESTS}/test_*_reuse.py\n"
    config = load_configs([write(tmp_path, text)], TOKENS)
    assert {Path(p).name for p in config.files[0].files} == {
        "test_dtypes_reuse.py",
        "test_modules_reuse.py",
        "test_ops_reuse.py",
        "test_plain_reuse.py",
    }


def test_a_relative_path_is_relative_to_its_config_file() -> None:
    config = load_configs([TREE / "crcr-config.yaml"])
    assert config.files[0].files == (str((TREE_TESTS / "test_ops_reuse.py").resolve()),)


def test_a_torch_spyre_style_config_loads_when_it_uses_shared_fields(tmp_path: Path) -> None:
    text = """\
test_suite_config:
  labels: [regression]
  files:
    - path: ${TORCH_ROOT}/test/test_ops_reuse.py
      unlisted_test_mode: skip
      tests:
        - names:
            - TestOpsReuse::test_matches_cpu
          mode: mandatory_success
          tags:
            - model_1
  global:
    supported_dtypes:
      - name: float16
      - name: float32
        force_xfail: true
    supported_ops:
      - name: add
        dtypes:
          - name: float16
            precision:
              atol: 1e-3
              rtol: 1e-3
      - name: mul
"""
    config = load_configs([write(tmp_path, text)], TOKENS)
    add = config.global_.supported_ops[0]  # type: ignore[index]
    assert add.dtypes[0].precision.rtol == pytest.approx(1e-3)  # type: ignore[index, union-attr]
    assert config.global_.supported_dtypes[1].force_xfail  # type: ignore[index]


def test_a_torch_spyre_field_crcr_lacks_is_named_in_the_error(tmp_path: Path) -> None:
    text = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_ops_reuse.py
      tests:
        - names: [TestOpsReuse::test_matches_cpu]
          mode: mandatory_success
          edits:
            ops:
              include:
                - name: mul
                  sample_inputs_func: {args: [{value: 1}]}
"""
    path = write(tmp_path, text)
    assert problems_of([path]) == [
        f"{path}:11:19: unknown key 'sample_inputs_func' in an op in edits.ops.include "
        "(torch-spyre's model-op sample inputs are not supported by crcr; for a Torch Spyre "
        "config run `python -m crcr_reuse import-spyre`); allowed: name, dtypes, "
        "force_xfail, description, tags"
    ]


def test_configs_with_the_same_path_merge_their_tests_and_globals(tmp_path: Path) -> None:
    first = write(tmp_path, BAR_ONE, "a.yaml")
    second = write(
        tmp_path,
        """\
test_suite_config:
  labels: [smoke]
  files:
    - path: ${TORCH_ROOT}/test/test_dtypes_reuse.py
      tests:
        - names: [TestTensorBasics::test_matmul]
          mode: xfail
  global:
    supported_dtypes: [{name: float64}, {name: bfloat16}]
    supported_ops: [{name: add}]
""",
        "b.yaml",
    )
    config = load_configs([first, second], TOKENS)
    assert len(config.files) == 1
    assert [t.mode for t in config.files[0].tests] == ["mandatory_success"] * 2 + ["xfail"]
    assert config.files[0].unlisted_test_mode == "skip"
    assert config.labels == ("trunk", "smoke")
    names = [d.name for d in config.global_.supported_dtypes or ()]
    assert names == ["bfloat16", "float16", "float32", "float64"]
    assert [o.name for o in config.global_.supported_ops or ()] == ["add"]


def test_a_config_reads_over_a_list_of_files_as_it_reads_over_the_disk(tmp_path: Path) -> None:
    """Where no test tree is on disk (crcr's pages read configs over the inventory), paths
    and globs match a given list of files exactly as they match the files on disk."""
    from crcr_reuse.loader import load_text

    text = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_*_reuse.py
      unlisted_test_mode: skip
    - path: ${TORCH_ROOT}/test/**/test_deep.py
    - path: ${TORCH_ROOT}/test/test_[!p]*.py
    - path: ${TORCH_ROOT}/test/test_?uiet.py
"""
    names = [
        "test/test_ops_reuse.py", "test/test_plain_reuse.py", "test/nested/x_reuse.py",
        "test/test_deep.py", "test/a/b/test_deep.py", "test/test_quiet.py",
    ]  # fmt: skip
    root = tmp_path.resolve()
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    tokens = {"TORCH_ROOT": str(root)}
    on_disk = load_text(text, "c.yaml", tokens, root)
    listed = load_text(text, "c.yaml", tokens, root, tree={str(root / name) for name in names})
    assert [entry.files for entry in listed.files] == [entry.files for entry in on_disk.files]
    assert [len(entry.files) for entry in listed.files] == [2, 2, 3, 1]
    with pytest.raises(ConfigError, match="path '.*test_gone.py' matches no file"):
        load_text(
            "test_suite_config:\n  files:\n    - path: ${TORCH_ROOT}/test/test_gone.py\n",
            "c.yaml", tokens, root, tree={str(root / name) for name in names},
        )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "generic", "variant"),
    [
        ("test_cumprod_hangs", "test_cumprod_hangs", ""),
        ("test_cumprod_hangs_privateuseone", "test_cumprod_hangs", "privateuseone"),
        ("test_cumprod_hangs_privateuseone_float32", "test_cumprod_hangs", "privateuseone_float32"),
        ("test_cumprod_privateuseone", "test_cumprod", "privateuseone"),
        ("test_unknown_privateuseone", "test_unknown_privateuseone", ""),
    ],
)
def test_a_generated_name_leads_back_to_its_longest_generic_test(
    name: str, generic: str, variant: str
) -> None:
    from crcr_reuse.static_scan import generic_name, name_prefixes

    candidates = ["test_cumprod", "test_cumprod_hangs", "test_lerp"]
    assert generic_name(name, candidates) == (generic, variant)
    assert generic in name_prefixes(name)


def test_an_opinfo_variant_spelled_with_a_hyphen_is_a_valid_op_name(tmp_path: Path) -> None:
    """Found on test_ops.py: stage 4 wrote `nn.functional.interpolate.nearest-exact` (an
    OpInfo of op_db) into an exclude list, and the device's collection refused the config."""
    text = BAR_ONE.replace(
        "{dtypes: {exclude: [{name: bool}, {name: int64}]}}",
        "{ops: {exclude: [{name: nn.functional.interpolate.nearest-exact}]}}",
    )
    config = load_configs([write(tmp_path, text)], TOKENS)
    excluded = config.files[0].tests[1].edits.ops.exclude
    assert [op.name for op in excluded] == ["nn.functional.interpolate.nearest-exact"]
    bad = text.replace("nn.functional.interpolate.nearest-exact", "interpolate-nearest")
    (problem,) = problems_of([write(tmp_path, bad, "bad.yaml")])
    assert "'interpolate-nearest' is not a valid op name" in problem
