"""Which entry and mode a test gets, and which variants survive (in process, no torch)."""

from __future__ import annotations

from pathlib import Path

import pytest
from crcr_reuse.loader import load_configs
from crcr_reuse.matching import FileRules, Rules

from .conftest import TREE, TREE_TESTS

CONFIG = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_*_reuse.py
      unlisted_test_mode: xfail
      tests:
        - names: ['TestPlainMath::test_.*']
          mode: skip
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      tests:
        - names: ['TestParametrizedPlain::test_(arange|range)']
          mode: skip
        - names: ['test_.*']
          mode: xfail_strict
        - names: [TestPlainMath::test_sum]
          mode: xfail
        - names: [test_sum]
          mode: mandatory_success
        - names: ['TestFlaky::test_flaky']
          mode: mandatory_success
          edits:
            dtypes: {exclude: [{name: float16}], include: [{name: float64, precision: {atol: 0.5}}]}
            ops: {include: [{name: lgamma}], exclude: [{name: add}]}
            modules: {exclude: [{name: torch.nn.ReLU}]}
  global:
    supported_dtypes: [{name: float16}, {name: float32, precision: {atol: 0.01}}, {name: int8, force_xfail: true}]
    supported_ops: [{name: add}, {name: mul, dtypes: [{name: float32}]}, {name: div, force_xfail: true}]
    supported_modules: [torch.nn.Linear, torch.nn.ReLU]
"""


@pytest.fixture
def rules(tmp_path: Path) -> Rules:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    return Rules(load_configs([path], {"TORCH_ROOT": str(TREE)}))


def plain(rules: Rules) -> FileRules:
    found = rules.for_file(TREE_TESTS / "test_plain_reuse.py")
    assert found is not None
    return found


def test_an_exact_path_entry_comes_before_a_glob_entry(rules: Rules) -> None:
    assert [entry.path for entry in plain(rules).entries] == [
        "${TORCH_ROOT}/test/test_plain_reuse.py",
        "${TORCH_ROOT}/test/test_*_reuse.py",
    ]


def test_a_literal_name_beats_a_regex_that_comes_first(rules: Rules) -> None:
    decision = plain(rules).decide("TestPlainMath", "test_sum")
    assert decision.mode == "xfail"
    assert decision.pattern is not None and decision.pattern.text == "TestPlainMath::test_sum"


def test_a_name_matches_before_a_source_name_within_literals_then_within_regexes(
    rules: Rules,
) -> None:
    math = plain(rules)
    # torch's @parametrize source method is matched after the test's own name.
    assert math.decide("TestPlainMath", "test_sum", source="test_other").mode == "xfail"
    assert math.decide("TestPlainMath", "test_other", source="test_sum").mode == "xfail"
    # A literal on the source name still beats a regex on the name.
    decision = math.decide("TestPlainMath", "test_gone", source="test_sum")
    assert decision.pattern is not None and decision.pattern.text == "TestPlainMath::test_sum"


def test_a_base_name_is_never_matched_only_noted(rules: Rules) -> None:
    math = plain(rules)
    math.note_base_name("TestPlainMath", "test_sum", "test_large_a")
    decision = math.decide("TestPlainMath", "test_large_a")
    assert decision.pattern is not None and decision.pattern.text == "test_.*"
    literal = next(
        p for e in math.entries for t in e.tests for p in t.names if p.text == "test_sum"
    )
    assert rules.base_name_matches(literal) == [("test_sum", ["test_large_a"])]


def test_the_class_part_of_a_name_counts(rules: Rules) -> None:
    assert plain(rules).decide("TestPlainStrings", "test_sum").mode == "mandatory_success"


def test_a_regex_name_must_match_the_whole_name(rules: Rules) -> None:
    # 'test_(arange|range)' is found inside 'test_arange_length' but does not match all of it.
    decision = plain(rules).decide("TestParametrizedPlain", "test_arange_length")
    assert decision.mode == "xfail_strict"
    assert decision.pattern is not None and decision.pattern.text == "test_.*"


def test_a_literal_name_must_match_exactly(rules: Rules) -> None:
    # 'TestFlaky::test_flaky' is a prefix of the real name, which is not enough.
    assert plain(rules).decide("TestFlaky", "test_flaky_counter").mode == "xfail_strict"


def test_a_test_no_entry_names_gets_the_unlisted_mode(rules: Rules) -> None:
    ops = rules.for_file(TREE_TESTS / "test_ops_reuse.py")
    assert ops is not None
    decision = ops.decide("TestOpsReuse", "test_matches_cpu")
    assert decision.mode == "xfail" and decision.entry is None
    assert decision.reason.startswith("unlisted (unlisted_test_mode: xfail")


def test_a_regex_in_a_glob_entry_still_applies_to_other_files(rules: Rules) -> None:
    dtypes = rules.for_file(TREE_TESTS / "test_dtypes_reuse.py")
    assert dtypes is not None
    assert dtypes.decide("TestPlainMath", "test_anything").mode == "skip"
    assert dtypes.decide("TestTensorBasics", "test_fill").mode == "xfail"


def test_an_unlisted_file_is_not_in_the_rules(rules: Rules) -> None:
    assert rules.for_file(TREE / "test" / "conftest.py") is None
    assert not rules.lists_file(TREE / "crcr-config.yaml")


def test_global_lists_filter_and_edits_override_them(rules: Rules) -> None:
    unlisted = plain(rules).decide("TestPlainMath", "test_passes_today").filters
    assert unlisted.dtype_allowed("float16") and not unlisted.dtype_allowed("float64")
    assert unlisted.op_allowed(("add", "add")) and not unlisted.op_allowed(("lgamma", "lgamma"))
    edited = plain(rules).decide("TestFlaky", "test_flaky").filters
    assert not edited.dtype_allowed("float16")  # excluded by the entry
    assert edited.dtype_allowed("float64")  # included although global lacks it
    assert edited.op_allowed(("lgamma", "lgamma"))  # included although global lacks it
    assert not edited.op_allowed(("add", "add"))  # excluded although global has it
    assert not edited.module_allowed("nn.ReLU") and edited.module_allowed("nn.Linear")
    assert not edited.module_allowed("nn.Tanh")


def test_an_ops_own_dtypes_narrow_its_variants(rules: Rules) -> None:
    filters = plain(rules).decide("TestPlainMath", "test_passes_today").filters
    assert filters.dtype_allowed("float32", ("mul", "mul"))
    assert not filters.dtype_allowed("float16", ("mul", "mul"))
    assert filters.dtype_allowed("float16", ("add", "add"))


def test_the_most_specific_precision_wins(rules: Rules) -> None:
    edited = plain(rules).decide("TestFlaky", "test_flaky").filters
    assert edited.tolerance("float64").atol == 0.5  # type: ignore[union-attr]
    assert edited.tolerance("float32").atol == 0.01  # type: ignore[union-attr]
    assert edited.tolerance("float16") is None


def test_force_xfail_names_its_place_in_the_config(rules: Rules) -> None:
    filters = plain(rules).decide("TestPlainMath", "test_passes_today").filters
    assert "dtype int8 has force_xfail" in (filters.forced_xfail(["int8"]) or "")
    assert "op div has force_xfail" in (filters.forced_xfail([], ("div", "div")) or "")
    assert filters.forced_xfail(["float32"], ("add", "add")) is None


def test_names_that_matched_nothing_are_reported(rules: Rules) -> None:
    plain(rules).decide("TestPlainMath", "test_sum")
    unmatched = {pattern.text for pattern in rules.unmatched_patterns()}
    assert "TestFlaky::test_flaky" in unmatched
    assert "TestPlainMath::test_sum" not in unmatched


RESTRICTIONS = """\
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
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      tests:
        - names: ['TestPlainMath::.*']
          mode: mandatory_success
          bypass_device_restrictions: true
"""


def test_a_tests_entry_bypasses_device_restrictions_or_leaves_it_to_its_files_entry(
    tmp_path: Path,
) -> None:
    path = tmp_path / "restrictions.yaml"
    path.write_text(RESTRICTIONS)
    rules = Rules(load_configs([path], {"TORCH_ROOT": str(TREE)}))
    dtypes = rules.for_file(TREE_TESTS / "test_dtypes_reuse.py")
    assert dtypes is not None
    file_setting = f"{path}:4:35"
    assert str(dtypes.decide("TestTensorBasics", "test_cpu_only").restrictions_lifted_by) == (
        file_setting
    )
    assert str(dtypes.decide("TestTensorBasics", "test_matmul").restrictions_lifted_by) == (
        file_setting  # unlisted: the files entry decides
    )
    assert not dtypes.decide("TestTensorBasics", "test_fill").bypasses_restrictions
    assert str(plain(rules).decide("TestPlainMath", "test_sum").restrictions_lifted_by) == (
        f"{path}:13:11"
    )
    assert not plain(rules).decide("TestPlainStrings", "test_sum").bypasses_restrictions


def test_asking_whether_a_class_bypasses_restrictions_uses_none_of_its_names(
    tmp_path: Path,
) -> None:
    path = tmp_path / "restrictions.yaml"
    path.write_text(RESTRICTIONS)
    rules = Rules(load_configs([path], {"TORCH_ROOT": str(TREE)}))
    assert plain(rules).bypasses_restrictions("TestPlainMath", ["test_sum"])
    assert not plain(rules).bypasses_restrictions("TestPlainStrings", ["test_sum"])
    # The class may stay uninstantiated: its name still counts as matching nothing.
    assert "TestPlainMath::.*" in {pattern.text for pattern in rules.unmatched_patterns()}
