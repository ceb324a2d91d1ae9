"""The operator index: what real tests call under the capture, and enabling an operator."""

from pathlib import Path

import pytest
from crcr_reuse.opcapture import graph_ops

from selection import enabling, opindex
from selection.models import CapturedTest, OpUsage, Proposal
from tests.factories import make_backend, make_config

TREE = {
    "test/test_indexed.py": """import torch
from torch.testing import make_tensor
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_utils import TestCase
from torch.testing._internal.opinfo.core import OpInfo, SampleInput


def _samples(op, device, dtype, requires_grad, **kwargs):
    yield SampleInput(make_tensor((3,), device=device, dtype=dtype, low=0.5, high=2.0))


_ops = [
    OpInfo("abs", op=torch.abs, dtypes=(torch.float32,), sample_inputs_func=_samples),
    OpInfo("lgamma", op=torch.lgamma, dtypes=(torch.float32,), sample_inputs_func=_samples),
]


class TestIndexed(TestCase):
    @ops(_ops)
    def test_op(self, device, dtype, op):
        sample = next(iter(op.sample_inputs(device, dtype)))
        self.assertEqual(op(sample.input).cpu(), op(sample.input.cpu()))

    @dtypes(torch.float32)
    def test_lgamma(self, device, dtype):
        x = make_tensor((4,), device=device, dtype=dtype, low=0.5, high=3.0)
        self.assertEqual(torch.lgamma(x).cpu(), torch.lgamma(x.cpu()))

    def test_add(self, device):
        a = torch.ones(3, device=device)
        self.assertEqual((a + a).cpu(), torch.full((3,), 2.0))

    def test_compiled(self, device):
        fn = torch.compile(lambda x: torch.sin(x) * 2, backend="aot_eager")
        self.assertEqual(fn(torch.ones(3, device=device)).cpu(), torch.sin(torch.ones(3)) * 2)


instantiate_device_type_tests(TestIndexed, globals())
""",
}


# A renamed copy: the capture runs the file once and gives the copy the same rows.
TREE["test/test_indexed_copy.py"] = TREE["test/test_indexed.py"]


def write_tree(root: Path, files: dict[str, str] = TREE) -> Path:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def ops_of(test: str, path: str = "test/test_indexed.py") -> dict[tuple[str, str], bool]:
    rows = OpUsage.objects.filter(file_path=path, test_name=test)
    rows = rows.values_list("opinfo", "op", "is_helper")
    return {(opinfo, op): helper for opinfo, op, helper in rows}


@pytest.mark.django_db
def test_the_capture_indexes_ops_under_test_apart_from_helpers_and_enabling_an_op_proposes_what_now_passes(
    tmp_path,
):
    tree = write_tree(tmp_path)
    result = opindex.capture(tree, ["test/test_indexed.py", "test/test_indexed_copy.py"])
    assert result.processes == 1 and result.tests == 8 and result.reused_files == 1
    copy = "test/test_indexed_copy.py"
    for test in ("test_op", "test_lgamma", "test_add", "test_compiled"):
        assert ops_of(test, copy) == ops_of(test) != {}
    variants = CapturedTest.objects.filter(test_name="test_op").values_list("variants", flat=True)
    assert list(variants) == [2, 2]

    # An OpInfo test tests its declared op; make_tensor's ops are helpers; assertEqual is not seen.
    op_test = ops_of("test_op")
    assert op_test[("abs", "abs.default")] is False
    assert op_test[("lgamma", "lgamma.default")] is False
    assert op_test[("abs", "uniform_.default")] is True
    assert not any(op.startswith(("eq.", "isnan.")) for _, op in op_test)
    assert ops_of("test_add")[("", "add.Tensor")] is False
    # A compiled test's ops come from the graphs torch logs, not from the dispatch mode.
    compiled = CapturedTest.objects.get(file_path="test/test_indexed.py", test_name="test_compiled")
    assert compiled.compiled
    assert {op for _, op in ops_of("test_compiled")} >= {"sin.default", "mul.Tensor"}
    assert set(CapturedTest.objects.get(file_path=copy, test_name="test_op").opinfos) == {
        "abs",
        "lgamma",
    }
    assert sorted(opindex.tests_using("lgamma")) == [
        ("test/test_indexed.py", "TestIndexed", "test_lgamma"),
        ("test/test_indexed.py", "TestIndexed", "test_op"),
        (copy, "TestIndexed", "test_lgamma"),
        (copy, "TestIndexed", "test_op"),
    ]

    # Storing the same capture again updates the index instead of adding to it.
    rows = OpUsage.objects.count()
    recorded = ops_of("test_add")
    line = {
        "file": "test/test_indexed.py", "class": "TestIndexed", "test": "test_add",
        "ops": [op for (_, op), helper in recorded.items() if not helper],
        "helper_ops": [op for (_, op), helper in recorded.items() if helper],
    }  # fmt: skip
    opindex.store([line])
    assert OpUsage.objects.count() == rows
    assert ops_of("test_add") == recorded
    assert CapturedTest.objects.filter(test_name="test_add").count() == 2  # one per file

    backend = make_backend("reference")
    make_config(backend, "test_suite_config:\n  files: []\n")
    run = enabling.enable_operator(backend, "lgamma", tree)
    assert run.error == ""
    assert sorted(run.summary["waiting"]) == [
        "test/test_indexed.py::TestIndexed::test_lgamma",
        "test/test_indexed.py::TestIndexed::test_op",
        "test/test_indexed_copy.py::TestIndexed::test_lgamma",
        "test/test_indexed_copy.py::TestIndexed::test_op",
    ]
    proposed = Proposal.objects.filter(backend=backend)
    assert sorted(p.test_name for p in proposed) == ["test_lgamma"] * 2 + ["test_op"] * 2
    assert all(p.mode == "mandatory_success" and p.stage == "enable_op" for p in proposed)
    assert "aten::lgamma" in proposed[0].reason


def test_files_with_the_same_text_under_the_same_conftest_files_are_captured_once(tmp_path):
    tree = write_tree(
        tmp_path,
        {"test/test_a.py": "x = 1\n", "test/test_b.py": "x = 1\n", "test/test_c.py": "x = 2\n",
         "test/nn/test_d.py": "x = 1\n", "test/nn/test_e.py": "x = 1\n",
         "test/dist/test_f.py": "x = 1\n", "test/dist/conftest.py": "import os\n"},
    )  # fmt: skip
    files = ["test/test_a.py", "test/test_b.py", "test/test_c.py", "test/nn/test_d.py",
             "test/nn/test_e.py", "test/dist/test_f.py"]  # fmt: skip
    assert opindex.same_text(tree, files) == {
        "test/test_a.py": ["test/test_b.py", "test/nn/test_d.py", "test/nn/test_e.py"],
        "test/test_c.py": [],
        "test/dist/test_f.py": [],  # its folder's conftest.py may change what it runs
    }


@pytest.mark.django_db
def test_storing_the_capture_of_thousands_of_tests_named_one_by_one_replaces_their_rows():
    # An upgrade's diff names its tests one by one; SQLite refused one chained OR of them.
    lines = [
        {"file": f"test/test_{n % 7}.py", "class": "TestMany", "test": f"test_{n}",
         "ops": ["add.Tensor"], "helper_ops": ["empty.memory_format"]}
        for n in range(1500)
    ]  # fmt: skip
    assert opindex.store(lines) == 3000
    assert opindex.store(lines) == 3000
    assert CapturedTest.objects.count() == 1500 and OpUsage.objects.count() == 3000


def test_graph_ops_reads_the_operators_of_a_logged_graph():
    text = 'sin: "f32[3]" = torch.ops.aten.sin.default(arg0_1)\nmul = torch.ops.aten.mul.Tensor(sin, 2)\nx = torch.ops.prims.convert_element_type.default(mul)'
    assert graph_ops(text) == {"sin.default", "mul.Tensor", "prims::convert_element_type.default"}


# The first process dies in `test_b` (as one killed at the capture's time limit does); a
# file beside the test says it already died once.
DIES_ONCE = """import os
import signal
from pathlib import Path

import torch
from torch.testing._internal.common_utils import TestCase

DIED = Path(__file__).with_name("died-once")


class TestLong(TestCase):
    def test_a(self):
        self.assertEqual(torch.ones(2).sum().item(), 2.0)

    def test_b(self):
        if not DIED.exists():
            DIED.write_text("")
            os.kill(os.getpid(), signal.SIGKILL)
        self.assertEqual(torch.zeros(2).sum().item(), 0.0)

    def test_c(self):
        self.assertEqual(torch.arange(3).sum().item(), 3)
"""


def test_a_capture_process_that_dies_partway_goes_on_where_it_stopped(tmp_path):
    """A file whose capture outlives its process (test_ops.py's was killed at the hour's
    limit with 15 of its 43 tests not run) loses no test and runs none twice."""
    tree = write_tree(tmp_path / "tree", {"test/test_long.py": DIES_ONCE})
    lines, result = opindex.run_capture(tree, ["test/test_long.py"], tmp_path / "work")
    assert (tree / "test" / "died-once").exists()
    assert result.lost_files == []
    assert result.processes == 2
    assert sorted(line["test"] for line in lines) == ["test_a", "test_b", "test_c"]
    assert {line["outcome"] for line in lines} == {"passed"}


# test_ops.py's TestRefsOpsInfo: a device-type test whose parameter named `op` is a name,
# not an OpInfo.
NAMED_OPS = """import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, parametrize


class TestNamedOps(TestCase):
    @parametrize("op", ["abs", "neg"])
    def test_named(self, device, op):
        x = torch.ones(2, device=device)
        self.assertEqual(getattr(torch, op)(x).abs().sum().item(), 2.0)


instantiate_device_type_tests(TestNamedOps, globals(), only_for="cpu")
"""


def test_a_parameter_named_op_that_is_no_opinfo_is_captured_as_a_plain_test(tmp_path):
    tree = write_tree(tmp_path / "tree", {"test/test_named.py": NAMED_OPS})
    lines, _ = opindex.run_capture(tree, ["test/test_named.py"], tmp_path / "work")
    assert [(line["test"], line["outcome"], line["opinfo"]) for line in lines] == [
        ("test_named", "passed", ""),
        ("test_named", "passed", ""),
    ]
    assert {"abs.default", "neg.default"} <= {op for line in lines for op in line["ops"]}
