"""Failure classification against real PyTorch failure text, verdicts, disabled tests."""

import json
from pathlib import Path

import pytest
import yaml

from runs.triage import (
    RULES_PATH,
    Category,
    DisabledTests,
    LastGreen,
    Verdict,
    classify,
    decide_verdict,
    load_disabled_tests,
    makes_run_red,
    parse_disabled_tests,
    parse_rules,
)
from tests.data import FIXTURES

FAILURES = Path(__file__).parent / "fixtures" / "failures"
FIXTURE_FILES = sorted(FAILURES.glob("*.txt"))

# What the unsupported-op and unsupported-dtype fixtures must name.
EXPECTED_OPS = {
    "unsupported_op_1": ("empty", "empty.memory_format"),
    "unsupported_op_2": ("add", "add.out"),
    "unsupported_op_3": ("empty_strided", "empty_strided"),
    "unsupported_op_4": ("isin", "isin.Tensor_Tensor_out"),
    "unsupported_op_5": ("searchsorted", "searchsorted.Tensor"),
}
EXPECTED_DTYPES = {
    "unsupported_dtype_1": "complex32",
    "unsupported_dtype_2": "float8_e4m3fn",
    "unsupported_dtype_3": "float16",
    "unsupported_dtype_4": "float16",
    "unsupported_dtype_5": "bfloat16",
}


def category_of(fixture: Path) -> str:
    return fixture.stem.rsplit("_", 1)[0]


def test_there_is_a_fixture_for_every_category():
    assert {category_of(f) for f in FIXTURE_FILES} == {c.value for c in Category}


@pytest.mark.parametrize("fixture", FIXTURE_FILES, ids=lambda f: f.stem)
def test_each_real_failure_is_classified_by_its_fixture_name(fixture):
    result = classify(fixture.read_text())

    assert result.category == category_of(fixture)
    if result.category != Category.OTHER:
        assert result.rule and result.line
    if fixture.stem in EXPECTED_OPS:
        assert (result.op, result.op_overload) == EXPECTED_OPS[fixture.stem]
    if fixture.stem in EXPECTED_DTYPES:
        assert result.dtype == EXPECTED_DTYPES[fixture.stem]


def test_the_error_a_traceback_ends_in_wins_over_one_it_caught_earlier():
    text = (FAILURES / "numerical_mismatch_3.txt").read_text()
    assert "Could not run 'aten::empty.memory_format'" in text

    result = classify(text)

    assert result.category == Category.NUMERICAL_MISMATCH
    assert result.op is None


def test_reading_from_the_end_an_earlier_match_decides_when_later_lines_match_nothing():
    result = classify(
        "ModuleNotFoundError: No module named 'torch_npu'",
        "During handling of the above exception, another exception occurred:\n"
        "RuntimeError: backend failed to load",
    )

    assert result.category == Category.TEST_ERROR
    assert result.line == "ModuleNotFoundError: No module named 'torch_npu'"


def test_on_one_line_the_rule_higher_in_the_file_wins():
    # An abort caused by a missing operator is classified by the operator.
    result = classify((FAILURES / "unsupported_op_5.txt").read_text())

    assert result.category == Category.UNSUPPORTED_OP
    assert result.rule == "operator-not-implemented-for-device"


def test_quoted_source_lines_do_not_decide():
    traceback = (
        'Traceback (most recent call last):\n  File "test_x.py", line 9, in test_y\n'
        "    except subprocess.TimeoutExpired: raise ValueError('bad')\n"
        "ValueError: bad"
    )

    assert classify("", traceback).category == Category.OTHER


def test_an_operator_outside_aten_keeps_its_namespace():
    result = classify(
        "NotImplementedError: Could not run 'torchvision::nms' with arguments from the "
        "'PrivateUse1' backend."
    )

    assert (result.op, result.op_overload) == ("torchvision::nms", "torchvision::nms")


def test_a_team_can_add_a_rule_and_it_applies_in_file_order():
    data = yaml.safe_load(RULES_PATH.read_text())
    data["rules"].insert(
        0,
        {"name": "spyre-compiler-crash", "category": "crash", "patterns": ["DtException: \\w+"]},
    )

    result = classify("DtException: SENCORES_HUNG", rules=parse_rules(data))

    assert (result.category, result.rule) == (Category.CRASH, "spyre-compiler-crash")


@pytest.mark.parametrize(
    ("rule", "error"),
    [
        ({"name": "x", "category": "nonsense", "patterns": ["a"]}, "unknown category"),
        ({"name": "x", "category": "crash", "patterns": ["("]}, "bad pattern"),
        ({"name": "x", "category": "crash", "patterns": []}, "non-empty"),
        ({"name": "x", "category": "crash", "patterns": ["a"], "colour": 1}, "unknown keys"),
        ({"category": "crash", "patterns": ["a"]}, "name"),
    ],
)
def test_a_bad_rule_is_refused_with_its_reason(rule, error):
    with pytest.raises(ValueError, match=error):
        parse_rules({"rules": [rule]})


def test_the_shipped_rules_load_and_cover_every_category_but_other():
    categories = {rule.category for rule in parse_rules(yaml.safe_load(RULES_PATH.read_text()))}

    assert categories == set(Category) - {Category.OTHER}


# --- verdicts ---------------------------------------------------------------------------


def test_a_failure_that_passed_in_the_last_green_run_is_a_regression_and_makes_the_run_red():
    result = decide_verdict(Category.NUMERICAL_MISMATCH, last_green=LastGreen.PASSED)

    assert result.verdict == Verdict.REGRESSION
    assert makes_run_red([result])


def test_a_failure_that_passed_on_retry_is_flaky():
    result = decide_verdict("crash", last_green="passed", passed_on_retry=True)

    assert result.verdict == Verdict.FLAKY
    assert not makes_run_red([result])


def test_a_failure_already_failing_in_the_last_green_run_is_known():
    assert decide_verdict("other", last_green="failed").verdict == Verdict.KNOWN


def test_a_test_disabled_upstream_is_known_and_carries_its_issue():
    disabled = parse_disabled_tests({"test_x (__main__.TestY)": ["42", "https://x/42", []]})[0]

    result = decide_verdict("other", last_green="passed", disabled=disabled)

    assert (result.verdict, result.issue_url) == (Verdict.KNOWN, "https://x/42")


def test_infra_failures_never_make_a_run_red():
    verdicts = [
        decide_verdict("infra", last_green="passed"),
        decide_verdict("timeout", last_green="passed", infra_timeout=True),
    ]

    assert [v.verdict for v in verdicts] == [Verdict.INFRA, Verdict.INFRA]
    assert not makes_run_red(verdicts)


def test_a_test_timing_out_on_its_own_after_passing_is_a_regression():
    assert decide_verdict("timeout", last_green="passed").verdict == Verdict.REGRESSION


def test_a_new_test_failing_is_a_regression():
    assert decide_verdict("unsupported_op", last_green="absent").verdict == Verdict.REGRESSION


def test_only_regressions_make_a_run_red():
    assert not makes_run_red(["flaky", "known", "infra"])
    assert makes_run_red(["flaky", "regression"])


# --- disabled tests ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def disabled() -> DisabledTests:
    return load_disabled_tests(FIXTURES / "disabled-tests-condensed.json")


def test_a_disabled_tests_file_keeps_its_linux_and_all_platform_entries(disabled):
    # 10 entries: every platform (1), Linux among others (4), other platforms only (5).
    assert len(disabled) == 5
    assert disabled.lookup("test_set_stride_cpu", "TestTorchDeviceTypeCPU") is None  # dynamo
    assert disabled.lookup("test_save_load_large_tensor", "TestSerialization") is not None


def test_an_entry_for_every_platform_matches_exactly(disabled):
    entry = disabled.lookup("test_fallback_to_cpu", "PrivateUse1FallbackTest")

    assert entry is not None
    assert entry.issue_url == "https://github.com/pytorch/pytorch/issues/191204"
    assert disabled.lookup("test_fallback_to_cpu", "PrivateUse1FallbackTestPRIVATEUSEONE") is None


def test_a_cuda_generated_test_covers_our_generated_test(disabled):
    for our_class in ("TestNestedTensorOpInfoPRIVATEUSEONE", "TestNestedTensorOpInfoPRIVATEUSE1"):
        entry = disabled.lookup("test_backward_cumprod_privateuseone_float64", our_class)

        assert entry is not None and entry.issue == "187412"
    assert disabled.lookup("test_backward_cumprod_privateuseone_float32", our_class) is None


def test_a_cpu_generated_test_covers_our_generated_test(disabled):
    entry = disabled.lookup(
        "test_dtensor_op_db_linalg_svd_privateuseone_float32",
        "TestMultiThreadedDTensorOpsPRIVATEUSEONE",
    )

    assert entry is not None and entry.issue == "190377"


def test_an_entry_for_rocm_only_does_not_apply(disabled):
    assert disabled.lookup("test_Conv2d_groups_cuda", "TestNN") is None


def test_the_real_disabled_tests_file_parses_and_matches_our_generated_tests(real_data):
    path = real_data / "disabled-tests-condensed.json"
    data = json.loads(path.read_text())
    applicable = [v for v in data.values() if not v[2] or "linux" in v[2]]

    disabled = load_disabled_tests(path)

    assert len(parse_disabled_tests(data)) == len(data)
    assert len(disabled) == len(applicable) > 0
    # Entries of PyTorch CI's file on 2026-12-05 that name tests a privateuse1 backend runs.
    found = disabled.lookup("test_backend_simple", "PrivateUse1BackendTest")
    assert found is not None and found.issue == "188688"
    found = disabled.lookup(
        "test_backward_prod_privateuseone_float32", "TestNestedTensorOpInfoPRIVATEUSEONE"
    )
    assert found is not None and found.issue == "140556"
    assert disabled.lookup("test_Embedding_discontiguous_cuda", "TestNN") is None  # rocm only


def test_a_device_token_in_a_class_without_device_suffix_is_part_of_the_name():
    disabled = DisabledTests(
        parse_disabled_tests({"test_embedding_cuda (__main__.TestNN)": ["1", "https://x/1", []]})
    )

    assert disabled.lookup("test_embedding_cuda", "TestNN") is not None
    assert disabled.lookup("test_embedding_privateuseone", "TestNN") is None
    assert disabled.lookup("test_embedding", "TestNN") is None


def test_a_real_backend_name_is_matched_too():
    disabled = DisabledTests(
        parse_disabled_tests({"test_foo_cuda_int64 (__main__.TestBarCUDA)": ["1", "u", ["linux"]]}),
        backend="spyre",
    )

    assert disabled.lookup("test_foo_spyre_int64", "TestBarSPYRE") is not None
    assert disabled.lookup("test_foo_spyre_float32", "TestBarSPYRE") is None


def test_a_malformed_disabled_tests_entry_is_refused():
    with pytest.raises(ValueError, match="malformed entry"):
        parse_disabled_tests({"test_x TestY": ["1", "u", []]})
