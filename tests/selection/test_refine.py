"""Stage 4: correcting proposals from device results, and flaky history from CI runs."""

from pathlib import Path

import pytest
from crcr_reuse.outcomes import TestRecord as Attempt

from runs.models import Run, Shard, TestResult, Trigger
from selection.refine import correct, flaky_history, observe
from tests.factories import make_backend, make_config

TREE = Path("/tree")
FILE = "test/test_x.py"


def record(
    name: str,
    outcome: str,
    message: str = "",
    op: str = "",
    dtype: str = "float32",
    attempt: int = 1,
    test: str = "test_a",
    module: str = "",
) -> Attempt:
    props = (
        [["crcr_test", f"{TREE}/{FILE}::TestX::{test}"], ["dtype", dtype]]
        + ([["op", op]] if op else [])
        + ([["module", module]] if module else [])
    )
    return Attempt(
        f"{FILE}::TestXPRIVATEUSE1::{name}",
        outcome,
        message=message,
        properties=props,
        attempt=attempt,
    )


UNSUPPORTED = "NotImplementedError: Could not run 'aten::lgamma.out' with arguments from the 'PrivateUse1' backend."
MISMATCH = "AssertionError: Tensor-likes are not close!\nGreatest absolute difference: {abs} at index (0,)\nGreatest relative difference: {rel} at index (0,)"


def seen(*records: Attempt):
    return observe(list(records), TREE)[(FILE, "TestX", "test_a")]


def test_a_pass_confirms_and_an_unexpected_pass_promotes():
    assert correct("mandatory_success", {}, seen(record("test_a_float32", "passed"))) is None
    promoted = correct("xfail", {}, seen(record("test_a_float32", "xpassed")))
    assert promoted.mode == "mandatory_success"
    strict = correct("xfail_strict", {}, seen(record("test_a_float32", "xpassed_strict")))
    assert strict.mode == "mandatory_success" and "XPASS" in strict.reason


def test_an_unsupported_op_means_skip_naming_it_or_dropping_only_its_opinfo_or_module():
    whole = correct("mandatory_success", {}, seen(record("test_a_float32", "failed", UNSUPPORTED)))
    assert whole.mode == "skip" and "aten::lgamma.out" in whole.reason
    partial = correct("mandatory_success", {}, seen(
        record("test_a_lgamma_float32", "failed", UNSUPPORTED, op="lgamma"),
        record("test_a_abs_float32", "passed", op="abs"),
    ))  # fmt: skip
    assert partial.mode == "mandatory_success"
    assert partial.edits == {"ops": {"exclude": [{"name": "lgamma"}]}}
    modules = correct("mandatory_success", {}, seen(
        record("test_a_nn_CTCLoss_float32", "failed", UNSUPPORTED, module="torch.nn.CTCLoss"),
        record("test_a_nn_Linear_float32", "passed", module="torch.nn.Linear"),
    ))  # fmt: skip
    assert modules.mode == "mandatory_success" and "drops module torch.nn.CTCLoss" in modules.reason
    assert modules.edits == {"modules": {"exclude": [{"name": "torch.nn.CTCLoss"}]}}
    # Found on test_unary_ufuncs.py: a `_refs` OpInfo lacking an operator and another failing
    # otherwise skipped the whole test, its passing OpInfos with it.
    mixed = correct("mandatory_success", {}, seen(
        record("test_a_lgamma_float32", "failed", UNSUPPORTED, op="_refs.lgamma"),
        record("test_a_sin_float32", "failed", MISMATCH.format(abs=0.5, rel=0.5), op="_refs.sin"),
        record("test_a_abs_float32", "passed", op="abs"),
    ))  # fmt: skip
    assert mixed.mode == "mandatory_success"
    assert mixed.edits == {"ops": {"exclude": [{"name": "_refs.lgamma"}, {"name": "_refs.sin"}]}}
    assert "aten::lgamma.out is not supported; 1 more fail otherwise" in mixed.reason


def test_a_dtype_the_device_fails_is_dropped_as_the_variant_names_it():
    """Found on test_binary_ufuncs.py: `test_pow`'s float16 variant computes in ComplexHalf
    and fails "pow not implemented for 'ComplexHalf'"; stage 4 dropped complex32, the
    dtype the message names, so the float16 variant still failed in the real run."""
    complex_half = "NotImplementedError: \"pow\" not implemented for 'ComplexHalf'"
    dropped = correct("mandatory_success", {}, seen(
        record("test_a_float16", "failed", complex_half, dtype="float16"),
        record("test_a_float32", "passed", dtype="float32"),
    ))  # fmt: skip
    assert dropped.mode == "mandatory_success"
    assert dropped.edits == {"dtypes": {"exclude": [{"name": "float16"}]}}
    assert "drops dtype float16" in dropped.reason and "ComplexHalf" in dropped.reason


def test_a_numerical_mismatch_becomes_a_tolerance_edit_when_small_and_xfail_when_not():
    small = correct(
        "mandatory_success",
        {},
        seen(record("test_a_float32", "failed", MISMATCH.format(abs="0.00021", rel="0.0003"))),
    )
    assert small.mode == "mandatory_success"
    assert small.edits == {
        "dtypes": {"include": [{"name": "float32", "precision": {"atol": 0.00042, "rtol": 0.0006}}]}
    }
    large = correct(
        "mandatory_success",
        {},
        seen(record("test_a_float32", "failed", MISMATCH.format(abs="0.25", rel="0.5"))),
    )
    assert large.mode == "xfail" and "0.25" in large.reason


def test_crashes_and_hangs_are_skipped_and_other_failures_xfailed():
    crashed = Attempt(
        f"{FILE}::TestXPRIVATEUSE1::test_a_privateuseone_float32",
        "crashed",
        message="the test process was killed by signal SIGSEGV (11)",
    )
    found = observe([crashed], TREE, known=[(FILE, "TestX", "test_a")])
    assert correct("mandatory_success", {}, found[(FILE, "TestX", "test_a")]).mode == "skip"
    hang = correct(
        "mandatory_success",
        {},
        seen(record("test_a_float32", "failed", "crcr: test timed out after 30 s: x")),
    )
    assert hang.mode == "skip" and "hangs" in hang.reason
    other = correct(
        "mandatory_success", {}, seen(record("test_a_float32", "failed", "ValueError: bad shape"))
    )
    assert other.mode == "xfail" and other.reason.endswith("ValueError: bad shape")


def test_only_the_opinfos_that_fail_otherwise_are_dropped_and_the_test_stays_required():
    """Found on test_ops.py: `test_python_ref_errors` passes on 124 of its 138 OpInfos and
    fails on `_refs.where` alone (the device's error message differs from the CPU's);
    stage 4 made the whole test xfail, so its 124 passing variants counted as misses."""
    message = 'Exception: "Expected all tensors to be on the same device" does not match "Tensor on device privateuseone:0 is not on the expected device cpu!"'
    one = correct("mandatory_success", {}, seen(
        record("test_a__refs_where_float32", "failed", message, op="_refs.where"),
        record("test_a__refs_abs_float32", "passed", op="_refs.abs"),
        record("test_a__refs_add_float32", "passed", op="_refs.add"),
    ))  # fmt: skip
    assert one.mode == "mandatory_success"
    assert one.edits == {"ops": {"exclude": [{"name": "_refs.where"}]}}
    assert one.reason.startswith("drops OpInfo _refs.where: it fails on the device (Exception:")
    # A large mismatch or a crash in one OpInfo drops it too; in every OpInfo, the test goes.
    crashed = correct("mandatory_success", {}, seen(
        record("test_a_abs_float32", "crashed", "killed by signal SIGSEGV (11)", op="abs"),
        record("test_a_sin_float32", "failed", MISMATCH.format(abs=0.5, rel=0.5), op="sin"),
        record("test_a_add_float32", "passed", op="add"),
    ))  # fmt: skip
    assert (
        crashed.mode == "mandatory_success" and "drops OpInfo abs, sin: they fail" in crashed.reason
    )
    everywhere = correct("mandatory_success", {}, seen(
        record("test_a_abs_float32", "failed", "ValueError: bad shape", op="abs"),
        record("test_a_sin_float32", "failed", "ValueError: bad shape", op="sin"),
    ))  # fmt: skip
    assert everywhere.mode == "xfail"
    # A small mismatch in one OpInfo still gets a tolerance, not a drop.
    small = correct("mandatory_success", {}, seen(
        record("test_a_sin_float32", "failed", MISMATCH.format(abs="0.0001", rel="0.0001"), op="sin"),
        record("test_a_add_float32", "passed", op="add"),
    ))  # fmt: skip
    assert small.mode == "mandatory_success" and "tolerance" in small.reason


def test_a_pass_on_retry_is_flaky():
    flaky = correct("mandatory_success", {}, seen(
        record("test_a_float32", "failed", "AssertionError: 1 != 2"),
        record("test_a_float32", "passed", attempt=2),
    ))  # fmt: skip
    assert flaky.mode == "xfail" and flaky.flaky


@pytest.mark.django_db
def test_flaky_history_lists_the_recent_runs_where_a_test_passed_only_on_retry():
    backend = make_backend()
    config = make_config(backend)
    key = (FILE, "TestX", "test_a")
    for outcomes in [("failed", "passed"), ("passed",), ("failed", "passed")]:
        trigger = Trigger.objects.create(
            backend=backend, kind=Trigger.Kind.MANUAL, pytorch_sha="a" * 40
        )
        run = Run.objects.create(
            trigger=trigger, backend=backend, job_name="job", backend_version="1", pytorch_sha="a" * 40,
            test_suite_sha="a" * 40, config_version=config,
        )  # fmt: skip
        shard = Shard.objects.create(run=run, index=0)
        for attempt, outcome in enumerate(outcomes, start=1):
            TestResult.objects.create(
                shard=shard, run=run, attempt=attempt, node_id=f"{FILE}::TestXPRIVATEUSE1::test_a_float32",
                file_path=FILE, class_name="TestX", test_name="test_a", outcome=outcome,
            )  # fmt: skip
    history = flaky_history(backend.pk, {key})
    assert len(history[key]) == 2
