"""Failure reports with each source file parsed once per process: the same reports, less parsing."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from .conftest import clean_env

# Two helper files failing at the same line in statements of different extents (a cache
# keyed by anything less than the file would show the wrong one), a test failing twice in
# one of them, and generated code (no file: parsed per report). Each
# file is longer than PADDING lines: pytest also parses a frame's few-line excerpt.
PADDING = 30
TAIL = "".join(f"\n\ndef other_{n}():\n    return {n}\n" for n in range(PADDING // 4))
FILES = {
    "helpers_a.py": 'def check(value):\n    assert (\n        value\n        == 1\n    ), "not one"\n'
    + TAIL,
    "helpers_b.py": 'def check(value):\n    assert value == 2, (\n        "not two"\n    )\n'
    + TAIL,
    "test_fails.py": """import linecache

import helpers_a, helpers_b

# Two sources under one name that is no file (as generated code has): each is put in
# linecache when it runs, and each report must show its own statement.
SOURCES = [
    "def check(value):\\n    assert (\\n        value == 3\\n    ), 'not three'\\n    return 3\\n",
    "def check(value):\\n    assert value == 4, 'not four'\\n    return (\\n        4\\n    )\\n",
]
checks = []
for source in SOURCES:
    namespace = {}
    exec(compile(source, "<generated>", "exec"), namespace)
    checks.append((source, namespace["check"]))


def generated(index, value):
    source, check = checks[index]
    linecache.cache["<generated>"] = (len(source), None, source.splitlines(True), "<generated>")
    check(value)


def test_a_first():
    helpers_a.check(5)


def test_a_again():
    helpers_a.check(6)


def test_b():
    helpers_b.check(7)


def test_generated_first():
    generated(0, 8)


def test_generated_second():
    generated(1, 9)
"""
    + TAIL,
    "conftest.py": """import ast, json

from crcr_reuse import failure_reports

PADDING = PADDING_LINES
parsed = []
parse = ast.parse


def counting(source, filename="<unknown>", *args, **kwargs):
    if filename == "source" and source.count("\\n") > PADDING:  # pytest's, of a whole file
        parsed.append(source.splitlines()[0])
    return parse(source, filename, *args, **kwargs)


ast.parse = counting


def pytest_configure(config):
    config.installed = failure_reports.install()


def pytest_unconfigure(config):
    with open("counts.json", "w") as out:
        json.dump({"installed": config.installed, "lines": parsed}, out)
""".replace("PADDING_LINES", str(PADDING)),
}


def run(tree: Path, **env: str) -> tuple[dict[str, str], dict[str, object]]:
    junit = tree / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={junit}"],
        cwd=tree,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    reports = {
        case.get("name", ""): failure.text or ""
        for case in ElementTree.parse(junit).getroot().iter("testcase")
        for failure in case.iter("failure")
    }
    return reports, json.loads((tree / "counts.json").read_text())


def test_each_file_is_parsed_once_per_process_and_the_reports_stay_the_same(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    for name, text in FILES.items():
        (tree / name).write_text(text)

    shared, shared_counts = run(tree)
    own, own_counts = run(tree, CRCR_REUSE_TRACEBACK_CACHE="0")

    assert shared_counts["installed"] is True and own_counts["installed"] is False
    assert sorted(shared) == [
        "test_a_again", "test_a_first", "test_b", "test_generated_first", "test_generated_second"
    ]  # fmt: skip
    assert shared == own  # word for word
    assert "        == 1\n" in shared["test_a_again"] and "not one" in shared["test_a_again"]
    assert '"not two"' in shared["test_b"] and "== 1" not in shared["test_b"]
    assert "        value == 3\n" in shared["test_generated_first"]
    assert "assert value == 4, 'not four'" in shared["test_generated_second"]
    assert "return (" not in shared["test_generated_second"]
    # pytest alone parses test_fails.py for every report and helpers_a.py for both of its;
    # shared, each file once.
    assert own_counts["lines"].count("import linecache") == 5
    assert shared_counts["lines"] == [
        "import linecache",
        "def check(value):",
        "def check(value):",
    ]
