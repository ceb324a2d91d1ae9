"""Every collected test id is planned and run, whatever characters it holds: spaces,
brackets and unicode in torch's generated names and in pytest's parameter ids."""

import textwrap

import pytest
from crcr_reuse.launcher import PytestRun, TestEnvironment, collected_ids

from runs import planning
from runs.crash_pinning import Executor, ShardSpec

ODD = textwrap.dedent(
    """
    import pytest
    from torch.testing._internal.common_utils import (
        TestCase, instantiate_parametrized_tests, parametrize,
    )

    @instantiate_parametrized_tests
    class TestOddIds(TestCase):
        @parametrize("s", ["a b", "ü[x]", "c#d", "plain"])
        def test_text(self, s):
            self.assertTrue(s)

        def test_fails(self):
            self.assertEqual(1, 2)

    @pytest.mark.parametrize("s", ["a b", "ü[x]"])
    def test_pytest_text(s):
        assert s
    """
)
CONFIG = """\
test_suite_config:
  files:
    - path: test/test_odd_ids.py
      unlisted_test_mode: mandatory_success
"""
FILE = "test/test_odd_ids.py"
EXPECTED = {
    f"{FILE}::TestOddIds::test_text_s_a b": "passed",
    f"{FILE}::TestOddIds::test_text_s_ü[x]": "passed",
    f"{FILE}::TestOddIds::test_text_s_c#d": "passed",
    f"{FILE}::TestOddIds::test_text_s_plain": "passed",
    f"{FILE}::TestOddIds::test_fails": "failed",
    f"{FILE}::test_pytest_text[a b]": "passed",
    # pytest writes a parameter's non-ASCII characters escaped in its id.
    f"{FILE}::test_pytest_text[\\xfc[x]]": "passed",
}


@pytest.fixture(scope="module")
def planned_and_run(tmp_path_factory) -> tuple[list[str], dict[str, str]]:
    """The tree's ids as planning collects them, then one shard of them run."""
    root = tmp_path_factory.mktemp("odd")
    tree = root / "tree"
    (tree / "test").mkdir(parents=True)
    (tree / "pytest.ini").write_text("[pytest]\n")
    (tree / FILE).write_text(ODD)
    config = tree / "crcr-config.yaml"
    config.write_text(CONFIG)
    environment = TestEnvironment.for_device(
        "crcr_reuse.reference_device", tree, tmpdir=root / "tmp"
    )
    pytest_run = PytestRun(environment, tree, configs=[config])
    ids = planning.collect(pytest_run)
    spec = ShardSpec(ids=ids, workdir=root / "shard", pytest=pytest_run, timeout=300)
    records = Executor(spec, should_retry=lambda record: False).run()
    return ids, {record.node_id: record.outcome for record in records}


def test_planning_keeps_every_collected_id_whatever_its_characters(planned_and_run):
    ids, _ = planned_and_run
    assert sorted(ids) == sorted(EXPECTED)


def test_a_shard_runs_each_of_them_and_gives_it_its_outcome(planned_and_run):
    _, outcomes = planned_and_run
    assert outcomes == EXPECTED


def test_the_listing_ends_before_pytest_s_summary_and_warnings():
    # A warning's test id repeated in pytest's summary is not a second test.
    stdout = textwrap.dedent(
        """\

        a plugin's note before the listing
        test/a.py::test_one
        test/a.py::test_two[x y]

        =============================== warnings summary ===============================
        test/a.py::test_one
          /tree/test/a.py:3: UserWarning: look at a::b
            warnings.warn("look at a::b")

        2 tests collected in 0.01s
        """
    )
    assert collected_ids(stdout) == ["test/a.py::test_one", "test/a.py::test_two[x y]"]
