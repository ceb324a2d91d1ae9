"""The operator capture through repeated gradient checks (module tests' partial derivatives)."""

from selection import opindex
from tests.selection.test_opindex import write_tree

# Both tests check a total derivative, then each input's partial one (as test_modules
# does): `test_repeated` with the same function (the capture skips most of those
# repeats), `test_fresh` with a new function each time (nothing is skipped).
GRADS = """import torch
from torch.testing._internal.common_utils import TestCase, gradcheck, gradgradcheck


def make():
    return lambda x, w, b: torch.mm(x, w.t()).add(b).tanh()


class TestGrads(TestCase):
    def partials(self, check, fresh):
        x = torch.randn(4, 3, dtype=torch.double, requires_grad=True)
        w = torch.randn(2, 3, dtype=torch.double, requires_grad=True)
        b = torch.randn(2, dtype=torch.double, requires_grad=True)
        inputs = (x, w, b)
        fn = make()
        self.assertTrue(check(fn, inputs))
        for tensor in inputs:
            for other in inputs:
                other.requires_grad_(other is tensor)
            self.assertTrue(check(make() if fresh else fn, inputs))

    def test_repeated(self):
        self.partials(gradcheck, fresh=False)
        self.partials(gradgradcheck, fresh=False)

    def test_fresh(self):
        self.partials(gradcheck, fresh=True)
        self.partials(gradgradcheck, fresh=True)

    def test_two_outputs(self):
        # The undefined-grad check calls the function again once per output.
        x = torch.randn(3, dtype=torch.double, requires_grad=True)
        self.assertTrue(gradcheck(lambda t: (t.sin(), t.exp().mul(2)), (x,)))
        self.assertTrue(gradgradcheck(lambda t: (t.sin(), t.exp().mul(2)), (x,)))
"""


def test_repeated_gradient_checks_are_indexed_with_the_ops_fresh_ones_call(tmp_path):
    tree = write_tree(tmp_path / "tree", {"test/test_grads.py": GRADS})
    lines, result = opindex.run_capture(tree, ["test/test_grads.py"], tmp_path / "work")
    assert result.lost_files == []
    by_test = {line["test"]: line for line in lines}
    assert {line["outcome"] for line in lines} == {"passed"}
    repeated, fresh = by_test["test_repeated"], by_test["test_fresh"]
    # The checked function's own ops are under test; the backward ops gradcheck's
    # Jacobians call are its helpers, mm's batched backward (vmap) among them: a partial
    # check's batching differs from the total one's.
    assert {"mm.default", "tanh.default"} <= set(repeated["ops"])
    assert {"tanh_backward.default", "bmm.default"} <= set(repeated["helper_ops"])
    assert repeated["ops"] == fresh["ops"]
    assert repeated["helper_ops"] == fresh["helper_ops"]


def test_the_paused_parts_of_gradient_checks_hide_no_operator(tmp_path, monkeypatch):
    """Finite differences (paused after an input's first element) and repeats (mostly
    paused) lose nothing, helpers included: the index holds exactly what capturing every
    op of every check holds."""
    tree = write_tree(tmp_path / "tree", {"test/test_grads.py": GRADS})
    paused, _ = opindex.run_capture(tree, ["test/test_grads.py"], tmp_path / "paused")
    monkeypatch.setenv("CRCR_REUSE_CAPTURE_EVERY_CHECK", "1")
    monkeypatch.setenv("CRCR_TEST_ENV_PASSTHROUGH", "CRCR_REUSE_CAPTURE_EVERY_CHECK")
    every, _ = opindex.run_capture(tree, ["test/test_grads.py"], tmp_path / "every")
    ops = {line["test"]: (line["ops"], line["helper_ops"]) for line in paused}
    assert ops == {line["test"]: (line["ops"], line["helper_ops"]) for line in every}
    assert {"mm.default", "tanh.default"} <= set(ops["test_repeated"][0])
    assert {"sin.default", "exp.default", "mul.Tensor"} <= set(ops["test_two_outputs"][0])
