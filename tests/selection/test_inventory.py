"""Repo memory: scanning a test tree, incremental re-scans, content hashes, diffs, queries."""

from pathlib import Path

import pytest

from selection import inventory
from selection.models import TestFile, UpstreamTest
from selection.source_facts import parse_file

OPS_FILE = '''# Owner(s): ["module: tests"]
# OpInfo tests over a slice of op_db.
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops, onlyCUDA, dtypes
from torch.testing._internal.common_dtype import all_types_and
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

_NAMES = ("add", "sub")
_ops = [op for op in op_db if op.name in _NAMES]


def _helper(x):
    return x


class TestSlice(TestCase):
    @ops(_ops)
    def test_matches_cpu(self, device, dtype, op):
        """Each op's device result matches the CPU."""
        _helper(op)

    @onlyCUDA
    @dtypes(*all_types_and(torch.half))
    def test_streams(self, device, dtype):
        pass

    def test_plain(self, device):
        pass


instantiate_device_type_tests(TestSlice, globals())
'''
DIST_FILE = '''"""Collective communication between processes (all_reduce, broadcast)."""
from torch.testing._internal.common_utils import TestCase


class TestCollectives(TestCase):
    def test_all_reduce(self):
        pass
'''


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_test_records_its_decorators_restrictions_spans_and_summary():
    parsed = parse_file("test/test_slice.py", OPS_FILE.encode())
    tests = {t.test_name: t for t in parsed.tests}
    assert set(tests) == {"test_matches_cpu", "test_streams", "test_plain"}
    assert tests["test_matches_cpu"].ops == ["add", "sub"]
    assert tests["test_matches_cpu"].docstring == "Each op's device result matches the CPU."
    assert tests["test_matches_cpu"].summary.startswith("slice: Each op's device result")
    assert tests["test_streams"].device_restrictions == ["onlyCUDA"]
    assert "float16" in tests["test_streams"].dtypes and "int64" in tests["test_streams"].dtypes
    assert all(t.device_generic for t in parsed.tests)
    assert parsed.summary.startswith("OpInfo tests over a slice of op_db.")


DEVICES_FILE = """from torch.testing._internal.common_device_type import deviceCountAtLeast, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestDevices(TestCase):
    @deviceCountAtLeast(2)
    def test_two(self, devices):
        pass

    @deviceCountAtLeast(1)
    def test_one_or_more(self, devices):
        pass


instantiate_device_type_tests(TestDevices, globals())
"""


def test_a_device_count_restriction_keeps_its_count():
    """@deviceCountAtLeast(1) runs on one device: the count tells stage 3 which need two."""
    tests = {t.test_name: t for t in parse_file("f", DEVICES_FILE.encode()).tests}
    assert tests["test_two"].device_restrictions == ["deviceCountAtLeast=2"]
    assert tests["test_one_or_more"].device_restrictions == ["deviceCountAtLeast=1"]


def test_the_content_hash_follows_what_a_test_parametrizes_over_not_its_comments():
    base = {t.test_name: t.content_hash for t in parse_file("f", OPS_FILE.encode()).tests}
    commented = OPS_FILE.replace("        _helper(op)", "        _helper(op)  # a comment")
    widened = OPS_FILE.replace('_NAMES = ("add", "sub")', '_NAMES = ("add", "sub", "mul")')
    helper = OPS_FILE.replace("    return x", "    return x + 1")
    after_comment = {t.test_name: t.content_hash for t in parse_file("f", commented.encode()).tests}
    after_widen = {t.test_name: t.content_hash for t in parse_file("f", widened.encode()).tests}
    after_helper = {t.test_name: t.content_hash for t in parse_file("f", helper.encode()).tests}
    assert after_comment == base
    assert after_widen["test_matches_cpu"] != base["test_matches_cpu"]
    assert after_widen["test_plain"] == base["test_plain"]
    assert after_helper["test_matches_cpu"] != base["test_matches_cpu"]


def test_a_file_that_does_not_parse_is_kept_with_its_error():
    parsed = parse_file("test/test_broken.py", b"def test_x(:\n")
    assert parsed.tests == [] and "invalid syntax" in parsed.error


@pytest.mark.django_db
def test_a_rescan_reuses_unchanged_files_and_the_diff_names_what_changed(tmp_path):
    tree = write_tree(
        tmp_path, {"test/test_slice.py": OPS_FILE, "test/distributed/test_c10d.py": DIST_FILE}
    )
    first = inventory.scan(tree, "a" * 40, embed=False)
    assert first.stats["parsed"] == 2 and first.stats["tests"] == 4
    changed = OPS_FILE.replace(
        "    def test_plain(self, device):\n        pass\n",
        "    def test_new(self, device):\n        pass\n",
    )
    changed = changed.replace('("add", "sub")', '("add", "mul")')
    write_tree(tmp_path, {"test/test_slice.py": changed})
    second = inventory.scan(tree, "b" * 40, embed=False)
    assert second.stats["parsed"] == 1 and second.stats["reused"] == 1
    assert UpstreamTest.objects.filter(file__snapshot=second).count() == 4
    diff = inventory.diff(first, second)
    assert diff.added == [("test/test_slice.py", "TestSlice", "test_new")]
    assert diff.removed == [("test/test_slice.py", "TestSlice", "test_plain")]
    assert diff.changed == [("test/test_slice.py", "TestSlice", "test_matches_cpu")]
    assert diff.unchanged == 2
    assert (
        TestFile.objects.get(snapshot=second, path="test/distributed/test_c10d.py").area
        == "distributed"
    )


@pytest.mark.django_db
def test_a_renamed_copy_has_the_facts_of_its_original_and_a_summary_naming_itself(tmp_path):
    plain = "from torch.testing._internal.common_utils import TestCase\n\n\nclass TestQuiet(TestCase):\n    def test_one(self):\n        pass\n"
    tree = write_tree(
        tmp_path,
        {"test/test_slice.py": OPS_FILE, "test/nn/test_slice_copy.py": OPS_FILE,
         "test/test_quiet.py": plain, "test/test_hush.py": plain},
    )  # fmt: skip
    snapshot = inventory.scan(tree, "e" * 40, embed=False)
    tests = {
        (t.file.path, t.test_name): t
        for t in UpstreamTest.objects.filter(file__snapshot=snapshot).select_related("file")
    }
    for name in ("test_matches_cpu", "test_streams", "test_plain"):
        original, copy = (
            tests[("test/test_slice.py", name)],
            tests[("test/nn/test_slice_copy.py", name)],
        )
        assert (copy.content_hash, copy.ops, copy.dtypes) == (
            original.content_hash, original.ops, original.dtypes,
        )  # fmt: skip
    summaries = dict(snapshot.files.values_list("path", "summary"))
    assert summaries["test/nn/test_slice_copy.py"] == summaries["test/test_slice.py"]
    # Without a header comment or docstring, a file is described by its own name.
    assert summaries["test/test_quiet.py"].startswith("quiet")
    assert summaries["test/test_hush.py"].startswith("hush")


@pytest.mark.django_db
def test_embeddings_answer_which_file_matches_a_phrase(tmp_path):
    tree = write_tree(
        tmp_path, {"test/test_slice.py": OPS_FILE, "test/distributed/test_c10d.py": DIST_FILE}
    )
    snapshot = inventory.scan(tree, "c" * 40)
    files = inventory.query(snapshot, "collective communication across processes", kind="files")
    assert files[0].path == "test/distributed/test_c10d.py"
    tests = inventory.query(snapshot, "streams on a cuda device", limit=1)
    assert tests[0].test_name == "test_streams"
    # A re-scan of the same files reuses their vectors instead of computing them again.
    again = inventory.scan(tree, "d" * 40)
    assert again.stats["reused"] == 2
    assert all(f.embedding for f in again.files.all())
