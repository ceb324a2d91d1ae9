"""The main job end to end on a small tree: stages 1-4 on the reference device, then the
config written from the approved proposals; and an upgrade that classifies only the diff."""

import difflib
from pathlib import Path

import pytest

from selection import configwriter, inventory, pipeline, upgrade
from selection.models import CapturedTest, Proposal, SelectionRun
from selection.proposals import save_proposals
from tests.factories import make_backend, make_config, make_user

TINY = '''"""Tensor arithmetic on the device."""
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, onlyCUDA
from torch.testing._internal.common_utils import TestCase


class TestTiny(TestCase):
    @dtypes(torch.float32)
    def test_add(self, device, dtype):
        a = torch.ones(4, device=device, dtype=dtype)
        self.assertEqual((a + a).cpu(), torch.full((4,), 2.0))

    @dtypes(torch.float32)
    def test_lgamma(self, device, dtype):
        x = torch.linspace(0.5, 3.0, 6, device=device, dtype=dtype)
        self.assertEqual(torch.lgamma(x).cpu(), torch.lgamma(x.cpu()))

    @dtypes(torch.float64)
    def test_addcmul(self, device, dtype):
        a = torch.ones(4, device=device, dtype=dtype)
        self.assertEqual(torch.addcmul(a, a, a).cpu(), torch.full((4,), 2.0, dtype=dtype))

    @onlyCUDA
    def test_streams(self, device):
        torch.cuda.synchronize(device)

    def test_wrong(self, device):
        self.assertEqual(torch.ones(2, device=device).sum().item(), 3.0)

    def test_add_backward(self, device):
        torch.ones(2, device=device, requires_grad=True).sum().backward()


instantiate_device_type_tests(TestTiny, globals())
'''
DIST = """from torch.testing._internal.common_utils import TestCase


class TestC10d(TestCase):
    def test_all_reduce(self):
        pass
"""
PARENT = """test_suite_config:
  labels: [trunk]
  files:
    - path: ${TORCH_ROOT}/test/test_tiny.py
      unlisted_test_mode: skip
      tests:
        # Why: written by hand before the pipeline ran.
        - names: [TestTiny::test_wrong]
          mode: xfail
  global:
    supported_dtypes: [{name: float32}, {name: float64}]
"""
FAULTS = (
    '{"faults": [{"op": "addcmul", "dtypes": ["float64"], "kind": "deviation", "amount": 0.25}]}'
)


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.django_db
def test_the_pipeline_leaves_device_checked_proposals_in_the_review_queue(tmp_path, monkeypatch):
    monkeypatch.setenv("CRCR_REFDEV_FAULTS", FAULTS)
    tree = write_tree(tmp_path, {"test/test_tiny.py": TINY, "test/distributed/test_c10d.py": DIST})
    backend = make_backend(
        "reference", extension_points=["eager"], scope_preference="no autograd yet"
    )
    make_config(backend, PARENT)
    stages = []
    run = pipeline.run_for_backend(
        backend, tree, "1" * 40, progress=lambda s, d, t: stages.append(s)
    )
    assert run.status == SelectionRun.Status.DONE, run.error
    summary = run.summary
    assert (
        "does not hook distributed"
        in summary["stage1"]["excluded"]["test/distributed/test_c10d.py"]
    )
    assert any(s.startswith("stage 4") for s in stages)

    proposals = {p.test_name: p for p in Proposal.objects.filter(backend=backend)}
    assert proposals["test_add"].mode == "mandatory_success"
    assert proposals["test_add"].evidence["device"]["passed"] == 1
    assert (proposals["test_lgamma"].mode, proposals["test_lgamma"].stage) == ("skip", "classify")
    assert "aten::lgamma" in proposals["test_lgamma"].reason
    assert proposals["test_lgamma"].evidence["unsupported_ops"] == ["lgamma.default"]
    assert (proposals["test_addcmul"].mode, proposals["test_addcmul"].stage) == ("xfail", "refine")
    assert "0.25" in proposals["test_addcmul"].reason
    assert (
        proposals["test_streams"].mode == "skip" and "@onlyCUDA" in proposals["test_streams"].reason
    )
    assert (proposals["test_add_backward"].mode, proposals["test_add_backward"].stage) == (
        "skip",
        "coarse",
    )
    # The config already says xfail for test_wrong, and the device agrees: nothing to review.
    assert "test_wrong" not in proposals
    assert CapturedTest.objects.get(test_name="test_add").variants == 1
    # The run's summary keeps every decision as the config would write it.
    kept = {d.test_name: d for d in pipeline.config_decisions(summary["decisions"])}
    assert (kept["test_addcmul"].file_path, kept["test_addcmul"].class_name) == (
        "test/test_tiny.py",
        "TestTiny",
    )
    assert (kept["test_addcmul"].mode, kept["test_addcmul"].reason) == (
        "xfail",
        proposals["test_addcmul"].reason,
    )

    # Approved proposals make a config that loads, and changes only their entries.
    reviewer = make_user("rita", "reviewer")
    for proposal in proposals.values():
        proposal.review(reviewer, approve=True)
    approved = Proposal.objects.filter(backend=backend, status=Proposal.Status.APPROVED)
    text = configwriter.apply(PARENT, [
        configwriter.Decision(p.file_path, p.class_name, p.test_name, p.mode, p.reason, p.edits)
        for p in approved
    ])  # fmt: skip
    configwriter.validate(text, tree)
    removed = [
        line
        for line in difflib.ndiff(PARENT.splitlines(), text.splitlines())
        if line.startswith("- ")
    ]
    assert removed == []
    assert "        # Why: " + proposals["test_addcmul"].reason in text


@pytest.mark.django_db
def test_a_decision_without_device_evidence_does_not_reopen_one_approved_on_device_evidence():
    backend = make_backend("reference")
    key = ("test/test_tiny.py", "TestTiny", "test_addcmul")
    refined = pipeline.Decision(
        key, "xfail", "numerical mismatch", Proposal.Stage.REFINE, evidence={"device": {}}
    )
    save_proposals(backend, None, [refined], PARENT)
    Proposal.objects.get().review(make_user("rita", "reviewer"), approve=True)
    static = pipeline.Decision(
        key, "mandatory_success", "all ops supported", Proposal.Stage.CLASSIFY
    )
    assert save_proposals(backend, None, [static], PARENT)["unchanged"] == 1
    fresh = pipeline.Decision(
        key, "mandatory_success", "passes now", Proposal.Stage.REFINE, evidence={"device": {}}
    )
    assert save_proposals(backend, None, [fresh], PARENT)["created"] == 1


HELPERS = '''"""Operators the CPU capture sees that the device never receives."""
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.testing._internal.common_device_type import (
    OpDTypes, dtypes, instantiate_device_type_tests, ops,
)
from torch.testing._internal.common_methods_invocations import op_db, python_ref_db
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase

EXP = [op for op in op_db if op.name == "exp"]
REF_EXP = [op for op in python_ref_db if op.name == "_refs.exp"]
LOSS_AND_LINEAR = [m for m in module_db if m.module_cls in (torch.nn.Linear, torch.nn.MultiMarginLoss)]
REF_ERRORS = [op for op in python_ref_db if op.name in ("_refs.where", "_refs.neg", "_refs.tril")]


class TestHelpers(TestCase):
    @dtypes(torch.float32)
    def test_promoted_add(self, device, dtype):
        wide = torch.promote_types(dtype, torch.float16)
        a = torch.ones(4, device=device, dtype=wide)
        self.assertEqual((a + a).cpu(), torch.full((4,), 2.0))

    @ops(EXP, allowed_dtypes=[torch.float32])
    def test_exp_checked_on_host(self, device, dtype, op):
        x = torch.linspace(0.5, 3.0, 6, device=device, dtype=dtype)
        host = x.cpu()
        self.assertTrue(float(torch.lgamma(host).abs().sum()) < 10)
        self.assertEqual(op(x).cpu(), torch.exp(host))

    @ops(EXP, allowed_dtypes=[torch.float32])
    def test_exp_checked_on_device(self, device, dtype, op):
        x = torch.linspace(0.5, 3.0, 6, device=device, dtype=dtype)
        self.assertTrue(float(torch.lgamma(x).abs().sum()) < 10)
        self.assertEqual(op(x).cpu(), torch.exp(x.cpu()))

    @ops(REF_EXP, allowed_dtypes=[torch.float32])
    def test_exp_reference(self, device, dtype, op):
        x = torch.linspace(0.5, 3.0, 6, device=device, dtype=dtype)
        self.assertEqual(op(x).cpu(), torch.exp(x.cpu()))

    @modules(LOSS_AND_LINEAR, allowed_dtypes=[torch.float32])
    def test_module_forward(self, device, dtype, module_info, training):
        for entry in module_info.module_inputs_func(
            module_info, device=device, dtype=dtype, requires_grad=False, training=training
        ):
            built = module_info.module_cls(
                *entry.constructor_input.args, **entry.constructor_input.kwargs
            ).to(device=device, dtype=dtype)
            built(*entry.forward_input.args, **entry.forward_input.kwargs)

    @ops(REF_ERRORS, dtypes=OpDTypes.none)
    def test_ref_errors(self, device, op):
        mode = FakeTensorMode()
        fake = lambda x: FakeTensor.from_tensor(x, mode) if isinstance(x, torch.Tensor) else x
        for error in op.error_inputs(device):
            sample = error.sample_input.transform(fake)
            with self.assertRaisesRegex(error.error_type, error.error_regex):
                op(sample.input, *sample.args, **sample.kwargs)


instantiate_device_type_tests(TestHelpers, globals())
'''
HELPERS_PARENT = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_helpers.py
  global:
    supported_dtypes: [{name: float32}]
"""


@pytest.mark.django_db
def test_operators_the_device_never_receives_do_not_make_a_test_skipped(tmp_path):
    """promote_types decomposes above the device's key: no reason to skip. lgamma in a
    test's checks may run on host tensors: stage 4 tries the test, and the device decides.
    torch._refs call prims::exp, written once for every backend: found on
    test_unary_ufuncs.py, whose `_refs.*` OpInfos were dropped as unsupported. A `@modules`
    test drops the modules that call what the device lacks, as an `@ops` test drops
    OpInfos: found on test_modules.py, whose tests over module_db were skipped whole. An
    OpInfo failing otherwise is dropped too: found on test_ops.py, whose
    `test_python_ref_errors` fails only `_refs.where` (the device words a cross-device
    error differently) and was made xfail for all its OpInfos."""
    tree = write_tree(tmp_path, {"test/test_helpers.py": HELPERS})
    backend = make_backend("reference", extension_points=["eager"])
    make_config(backend, HELPERS_PARENT)
    run = pipeline.run_for_backend(backend, tree, "2" * 40)
    assert run.status == SelectionRun.Status.DONE, run.error
    proposals = {p.test_name: p for p in Proposal.objects.filter(backend=backend)}

    promoted = proposals["test_promoted_add"]
    assert (promoted.mode, promoted.stage) == ("mandatory_success", "classify"), promoted.reason
    assert "promote_types.default" in promoted.evidence["off_device_ops"]
    assert promoted.evidence["device"]["passed"] == 1

    on_host = proposals["test_exp_checked_on_host"]
    assert (on_host.mode, on_host.stage) == ("mandatory_success", "refine"), on_host.reason
    assert "aten::lgamma" in on_host.reason and "never reached the device" in on_host.reason

    on_device = proposals["test_exp_checked_on_device"]
    assert (on_device.mode, on_device.stage) == ("skip", "classify"), on_device.reason
    assert "aten::lgamma" in on_device.reason
    assert on_device.evidence["device"]["failed"] >= 1

    reference = proposals["test_exp_reference"]
    assert reference.mode == "mandatory_success", reference.reason
    assert reference.evidence["device"]["passed"] == 1

    module_test = proposals["test_module_forward"]
    assert module_test.mode == "mandatory_success", module_test.reason
    assert module_test.edits == {"modules": {"exclude": [{"name": "torch.nn.MultiMarginLoss"}]}}
    assert "aten::multi_margin_loss" in module_test.reason
    assert module_test.evidence["device"]["passed"] >= 1
    assert module_test.evidence["device"]["failed"] == 0

    errors = proposals["test_ref_errors"]
    assert errors.mode == "mandatory_success", errors.reason
    assert errors.edits == {"ops": {"exclude": [{"name": "_refs.where"}]}}
    assert "not on the expected device" in errors.reason


GRADIENTS = '''"""Gradient checks: gradcheck's own operators are not the test's (issue 34)."""
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, gradcheck


class TestGradients(TestCase):
    def test_gradient_checked_on_host(self, device):
        x = torch.rand(3, 4, dtype=torch.double, requires_grad=True)
        self.assertTrue(gradcheck(lambda t: t.unbind(), (x,), check_forward_ad=True))

    def test_gradient_checked_on_device(self, device):
        x = torch.rand(3, 4, device=device, dtype=torch.double, requires_grad=True)
        self.assertTrue(gradcheck(lambda t: t.unbind(), (x,), check_forward_ad=True))


instantiate_device_type_tests(TestGradients, globals())
'''
GRADIENTS_PARENT = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_gradients.py
  global:
    supported_dtypes: [{name: float32}, {name: float64}]
"""


@pytest.mark.django_db
def test_an_operator_only_gradcheck_calls_is_tried_on_the_device(tmp_path):
    """Found on test_view_ops.py: gradcheck normalises its probe vectors with
    linalg_vector_norm, which the reference device lacks. Tests that gradcheck host tensors
    pass on the device; the CPU capture cannot tell, so gradcheck's own operators are
    helpers and stage 4 decides. The control checks device tensors and stays skipped."""
    tree = write_tree(tmp_path, {"test/test_gradients.py": GRADIENTS})
    backend = make_backend("reference", extension_points=["eager"])
    make_config(backend, GRADIENTS_PARENT)
    run = pipeline.run_for_backend(backend, tree, "3" * 40)
    assert run.status == SelectionRun.Status.DONE, run.error
    proposals = {p.test_name: p for p in Proposal.objects.filter(backend=backend)}

    on_host = proposals["test_gradient_checked_on_host"]
    assert (on_host.mode, on_host.stage) == ("mandatory_success", "refine"), on_host.reason
    assert "linalg_vector_norm" in on_host.reason

    on_device = proposals["test_gradient_checked_on_device"]
    assert on_device.mode == "skip", on_device.reason
    assert "linalg_vector_norm" in on_device.reason


GENERATED = '''"""Tests a file adds to its class when imported, as test_torch.py's add_neg_dim_tests."""
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestNegDim(TestCase):
    def test_written(self):
        self.assertEqual(torch.ones(2, 3).sum(-1), torch.full((2,), 3.0))


def make_neg_dim_test(name):
    def neg_dim_test(self):
        x = torch.ones(4, 5)
        self.assertEqual(getattr(x, name)(-1), getattr(x, name)(1))

    return neg_dim_test


for name in ("sum", "cumsum"):
    setattr(TestNegDim, f"test_{name}_neg_dim", make_neg_dim_test(name))


class TestNotImplemented(TestCase):  # as test_binary_ufuncs.py's generate_not_implemented_tests
    pass


def make_not_implemented_test(op):
    @dtypes(torch.float32, torch.int64)
    def test(self, device, dtype):
        self.assertIs(getattr(torch.ones((), device=device, dtype=dtype), op)(object()), NotImplemented)

    return test


for op in ("__add__", "__mul__"):
    setattr(TestNotImplemented, f"test_{op}_not_implemented", make_not_implemented_test(op))
instantiate_device_type_tests(TestNotImplemented, globals())
'''


SUBCLASS = """import torch
from torch.testing._internal.common_utils import TestCase


class TestSubclass(TestCase):
    def test_subclass_built_from_a_tensor(self):
        class Sub(torch.Tensor):
            pass

        self.assertIsInstance(Sub(torch.ones(2)) + 1, Sub)

    def test_broken_upstream(self):
        self.assertEqual(torch.ones(2).sum(), 3.0)
"""


@pytest.mark.django_db
def test_test_torchs_import_time_and_subclass_tests_are_proposed_from_their_cpu_run(tmp_path):
    """Found on test_torch.py: 37 `*_neg_dim` tests are set on TestTorch when the file is
    imported; the source scan cannot see them, so they got no proposal at all. Found on
    test_binary_ufuncs.py: 36 device tests set on TestBinaryUfuncs by one function, all
    `__name__` "test": the capture keyed them as one test named `test`. And
    `test_subclass_preserved` builds a Tensor subclass, which fails under the capture's
    dispatch mode only: it was proposed xfail as broken upstream."""
    files = {"test/test_generated.py": GENERATED, "test/test_subclass.py": SUBCLASS}
    tree = write_tree(tmp_path, files)
    backend = make_backend("reference", extension_points=["eager"])
    make_config(backend, "test_suite_config:\n  files: []\n")
    run = pipeline.run_for_backend(backend, tree, "4" * 40, device=False)
    assert run.status == SelectionRun.Status.DONE, run.error
    proposals = {p.test_name: p for p in Proposal.objects.filter(backend=backend)}
    assert set(proposals) == {
        "test_written", "test_sum_neg_dim", "test_cumsum_neg_dim",
        "test___add___not_implemented", "test___mul___not_implemented",
        "test_subclass_built_from_a_tensor", "test_broken_upstream",
    }  # fmt: skip
    not_implemented = proposals["test___mul___not_implemented"]
    assert (not_implemented.class_name, not_implemented.mode) == (
        "TestNotImplemented", "mandatory_success"
    )  # fmt: skip
    generated = proposals["test_cumsum_neg_dim"]
    assert (generated.class_name, generated.mode) == ("TestNegDim", "mandatory_success")
    assert "host CPU" in generated.reason  # a plain test, like the class's written one
    assert proposals["test_subclass_built_from_a_tensor"].mode == "mandatory_success"
    assert proposals["test_broken_upstream"].mode == "xfail"  # still fails without the mode


@pytest.mark.django_db
def test_an_upgrade_classifies_only_what_changed(tmp_path):
    tree = write_tree(tmp_path / "old", {"test/test_tiny.py": TINY})
    backend = make_backend("reference", extension_points=["eager"])
    make_config(backend, PARENT.replace("test_wrong]", "test_wrong, TestTiny::test_streams]"))
    inventory.scan(tree, "1" * 40, embed=False)
    changed = TINY.replace(
        "torch.full((4,), 2.0))\n", "torch.full((4,), 2.0), atol=0, rtol=0)\n", 1
    )
    changed = changed.replace(
        "    @onlyCUDA\n    def test_streams(self, device):\n        torch.cuda.synchronize(device)\n\n",
        "",
    )
    changed = changed.replace(
        "    def test_wrong(",
        "    def test_new(self, device):\n        self.assertTrue(True)\n\n    def test_wrong(",
    )
    new_tree = write_tree(tmp_path / "new", {"test/test_tiny.py": changed})
    run = upgrade.upgrade(backend, "2" * 40, new_tree, "1" * 40, device=False)
    summary = run.summary
    assert summary["diff"]["added"] == [["test/test_tiny.py", "TestTiny", "test_new"]]
    assert summary["diff"]["changed"] == [["test/test_tiny.py", "TestTiny", "test_add"]]
    assert summary["diff"]["removed"] == [["test/test_tiny.py", "TestTiny", "test_streams"]]
    assert summary["classified"] == 2
    assert summary["removed_entries"] == [
        {"file": "test/test_tiny.py", "name": "TestTiny::test_streams", "mode": "xfail"}
    ]
    new = Proposal.objects.get(backend=backend, test_name="test_new")
    assert (new.mode, new.stage, new.evidence["upgrade"]["change"]) == (
        "mandatory_success",
        "upgrade",
        "added",
    )
