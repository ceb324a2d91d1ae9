"""The config writer: decisions into config text, reasons as comments, other lines untouched."""

import difflib
from pathlib import Path

import pytest
from crcr_reuse.loader import ConfigError

from selection.configwriter import ConfigWriteError, Decision, apply, standalone, validate

PARENT = """# The reference backend's config.
test_suite_config:
  labels: [trunk]
  files:
    - path: ${TORCH_ROOT}/test/test_a.py
      unlisted_test_mode: skip
      tests:
        # Why: both basic.
        - names: [TestA::test_one, TestA::test_two]
          mode: mandatory_success
        # Why: not yet.
        - names: [TestA::test_three]
          mode: skip
    - path: ${TORCH_ROOT}/test/test_b.py   # keeps its comment
      unlisted_test_mode: mandatory_success
  global:
    supported_dtypes:
      - {name: float32, precision: {atol: 1e-5}}
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ("test_a.py", "test_b.py", "test_c.py"):
        (tmp_path / "test").mkdir(exist_ok=True)
        (tmp_path / "test" / name).write_text("")
    return tmp_path


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    removed, added = [], []
    for line in difflib.ndiff(before.splitlines(), after.splitlines()):
        if line.startswith("- "):
            removed.append(line[2:])
        elif line.startswith("+ "):
            added.append(line[2:])
    return removed, added


def test_a_written_config_reloads_and_differs_only_in_the_changed_entries(tree):
    decisions = [
        Decision(
            "test/test_a.py",
            "TestA",
            "test_three",
            "mandatory_success",
            "aten::lgamma is supported now.",
        ),
        Decision(
            "test/test_a.py",
            "TestA",
            "test_two",
            "xfail",
            "numerical mismatch of 0.25 on the device.",
        ),
        Decision(
            "test/test_b.py",
            "TestB",
            "test_x",
            "mandatory_success",
            "drops lgamma.",
            {"ops": {"exclude": [{"name": "lgamma"}]}},
        ),
        Decision(
            "test/test_c.py", "TestC", "test_y", "skip", "crashes the test process (SIGSEGV)."
        ),
    ]
    text = apply(PARENT, decisions)
    config = validate(text, tree)
    assert len(config.files) == 3
    removed, added = changed_lines(PARENT, text)
    # The diff removes only these lines: every other line of the parent is still there,
    # byte for byte and in order.
    assert removed == [
        "        - names: [TestA::test_one, TestA::test_two]",
        "        # Why: not yet.",
        "          mode: skip",
    ]
    assert "        # Why: numerical mismatch of 0.25 on the device." in added
    assert "          edits: {ops: {exclude: [{name: lgamma}]}}" in added
    assert "    - path: ${TORCH_ROOT}/test/test_c.py" in added


def test_rewriting_a_single_name_entry_replaces_its_comment_in_place():
    text = apply(
        PARENT,
        [Decision("test/test_a.py", "TestA", "test_three", "xfail", "flaky: passed on a retry.")],
    )
    assert (
        "        # Why: flaky: passed on a retry.\n        - names: [TestA::test_three]\n          mode: xfail\n"
        in text
    )
    assert "not yet" not in text
    assert text.count("\n") == PARENT.count("\n")


def test_an_empty_config_gets_its_first_files(tree):
    text = apply(
        "test_suite_config:\n  files: []\n",
        [Decision("test/test_a.py", "TestA", "test_one", "skip", "cuda only.")],
    )
    assert validate(text, tree).files[0].tests[0].mode == "skip"


def test_a_parent_that_is_not_a_test_config_is_refused():
    with pytest.raises(ConfigWriteError):
        apply("just: text\n", [Decision("test/test_a.py", "TestA", "test_one", "skip", "x")])


def test_validation_names_the_problem(tree):
    with pytest.raises(ConfigError, match="mode"):
        validate(
            apply(PARENT, [Decision("test/test_a.py", "TestA", "test_one", "sometimes", "x")]), tree
        )


def test_a_standalone_config_runs_only_the_decisions_with_the_parents_global_section(tree):
    text = standalone(PARENT, [
        Decision("test/test_c.py", "TestC", "test_y", "mandatory_success", "fine."),
        Decision("test/test_c.py", "TestC", "test_z", "skip", "not run."),
    ])  # fmt: skip
    config = validate(text, tree)
    assert [f.path for f in config.files] == ["${TORCH_ROOT}/test/test_c.py"]
    assert [t.names[0].text for t in config.files[0].tests] == ["TestC::test_y"]
    assert "      - {name: float32, precision: {atol: 1e-5}}" in text
