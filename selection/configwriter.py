"""Turn decisions about tests into config text, each entry with its reason as a comment.

`apply()` edits a parent config: ruamel.yaml reads it (round-trip mode, which
keeps every node's line and column), and only the lines of the entries that
change are rewritten; every other line is copied byte for byte. Per decision:
- an entry whose `names` is exactly this test is rewritten in place;
- an entry naming this test among others loses that name (rewritten), and
- a new entry is added at the end of the file's `tests` (a new `files` entry,
  `unlisted_test_mode: skip`, when the config does not list the file yet);
the comment block right above a written entry becomes `# Why: <reason>`. An entry
rewritten in place keeps its descriptions: one with a `description` gets the decision's
reason there (the loader reads a description before the comment above), and an edits
item the decision names again keeps its own description.

`standalone()` writes a fresh config for exactly a set of decisions (stage 4
runs those), and `validate()` loads a text with the reuse framework's strict
loader against a test tree.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crcr_reuse.yaml_limits import YamlLimitError, check
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

ROOT_TOKEN = "${TORCH_ROOT}/"
PLAIN = re.compile(r"^[A-Za-z_$][\w.:\-/${}]*$")


class ConfigWriteError(Exception):
    """The parent config cannot take the decisions (not a test config, or invalid)."""


@dataclass(frozen=True)
class Decision:
    """One test's outcome as the config records it."""

    file_path: str  # relative to the PyTorch checkout: test/test_ops.py
    class_name: str
    test_name: str
    mode: str
    reason: str
    edits: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.class_name}::{self.test_name}" if self.class_name else self.test_name


def _document(parent: str) -> Any:
    """The parent config, round trip; YamlLimitError before ruamel reads a text past the
    YAML limits (a stored config predating them, or an admin's edit)."""
    check(parent, "the parent config", ruamel=True)
    return YAML(typ="rt").load(parent)


# -- rendering ------------------------------------------------------------------------------


def flow(value: Any) -> str:
    """A value in YAML flow style, as people write configs by hand."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{flow(k)}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:.3g}"
        mantissa, _, exponent = text.partition("e")
        if exponent and "." not in mantissa:
            text = f"{mantissa}.0e{exponent}"  # YAML 1.1 readers need the dot to see a float
        return text
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if (
        PLAIN.match(text)
        and not text.endswith(":")
        and text.lower() not in ("null", "true", "false", "yes", "no", "on", "off")
    ):
        return text
    return json.dumps(text)


def entry_lines(
    decision: Decision, dash: int, names: Sequence[str] | None = None, described: bool = False
) -> list[str]:
    """A tests entry's lines; ``described``: the reason as its `description` key, not as
    the `# Why:` comment above it."""
    pad = " " * dash
    lines = [] if described else [f"{pad}# Why: {one_line(decision.reason)}"]
    lines.append(f"{pad}- names: {flow(list(names or [decision.name]))}")
    lines.append(f"{pad}  mode: {decision.mode}")
    if described:
        lines.append(f"{pad}  description: {flow(one_line(decision.reason))}")
    if decision.edits:
        lines.append(f"{pad}  edits: {flow(decision.edits)}")
    return lines


def _with_old_descriptions(decision: Decision, old: Any) -> Decision:
    """The decision with the descriptions of the entry it replaces carried over: an edits
    item (kind, way, name) it writes again keeps the description it had."""
    found: dict[tuple[str, ...], str] = {}
    old_edits = old.get("edits") if isinstance(old, CommentedMap) else None
    for kind, change in (old_edits or {}).items():
        for way, items in (change or {}).items() if isinstance(change, dict) else ():
            for item in items if isinstance(items, list) else ():
                if isinstance(item, dict) and item.get("description") and item.get("name"):
                    found[(kind, way, str(item["name"]))] = str(item["description"])
    if not found:
        return decision
    edits = {
        kind: {
            way: [_described_item(item, found, (kind, way)) for item in items]
            for way, items in change.items()
        }
        if isinstance(change, dict)
        else change
        for kind, change in decision.edits.items()
    }
    return dataclasses.replace(decision, edits=edits)


def _described_item(item: Any, found: dict[tuple[str, ...], str], where: tuple[str, str]) -> Any:
    description = found.get((*where, str(item.get("name")))) if isinstance(item, dict) else None
    if description is None or "description" in item:
        return item
    name, *rest = item.items()
    return dict([name, ("description", description), *rest])


def one_line(text: str) -> str:
    return " ".join(text.split())


def file_key(path: str) -> str:
    """A files entry's path as a checkout-relative path (tokens and ./ removed)."""
    return path.removeprefix(ROOT_TOKEN).removeprefix("./")


# -- applying to a parent ----------------------------------------------------------------------


@dataclass
class _Edit:
    start: int  # first line replaced (0-based)
    end: int  # one past the last line replaced
    lines: list[str]
    # Among insertions at one line, a higher rank is applied first and so lands last.
    rank: int = 0


def apply(parent: str, decisions: Iterable[Decision]) -> str:
    """The parent config with the decisions written in; untouched lines stay identical."""
    decisions = list(decisions)
    if not decisions:
        return parent
    lines = parent.splitlines()
    try:
        document = _document(parent)
    except YamlLimitError as error:
        raise ConfigWriteError(str(error)) from None  # "the parent config:L:C: YAML limit: …"
    except Exception as error:  # ruamel raises many kinds; all mean "not YAML"
        raise ConfigWriteError(f"the parent config is not YAML: {error}") from error
    suite = document.get("test_suite_config") if isinstance(document, CommentedMap) else None
    if not isinstance(suite, CommentedMap):
        raise ConfigWriteError("the parent config has no test_suite_config mapping")
    edits: list[_Edit] = []
    files = suite.get("files")
    by_file: dict[str, list[Decision]] = {}
    for decision in decisions:
        by_file.setdefault(decision.file_path, []).append(decision)
    new_files: list[str] = []
    for path, group in by_file.items():
        index = _find_file(files, path)
        if index is None:
            new_files += _new_file_lines(path, group, _files_dash(files, lines, suite))
        else:
            edits += _edit_file(files, index, group, lines)
    if new_files:
        appended = _append_files(suite, files, lines, new_files)
        appended.rank = 1  # after the last listed file's own new tests
        edits.append(appended)
    for edit in sorted(edits, key=lambda e: (e.start, e.end, e.rank), reverse=True):
        lines[edit.start : edit.end] = edit.lines
    return "\n".join(lines) + "\n"


def _find_file(files: Any, path: str) -> int | None:
    if not isinstance(files, CommentedSeq):
        return None
    for index, entry in enumerate(files):
        written = file_key(str(entry.get("path", ""))) if isinstance(entry, CommentedMap) else ""
        if written == path or (written and path.endswith("/" + written)):
            return index
    return None


def _edit_file(
    files: CommentedSeq, index: int, group: list[Decision], lines: list[str]
) -> list[_Edit]:
    entry = files[index]
    tests = entry.get("tests")
    edits: list[_Edit] = []
    appended: list[str] = []
    dash = _tests_dash(entry, lines)
    for decision in group:
        found = _find_test(tests, decision)
        if found is None:
            appended += entry_lines(decision, dash)
            continue
        start, end = _item_span(tests, found, lines)
        names = [str(n) for n in tests[found].get("names", [])]
        comment_start = _comment_start(lines, start)
        item_dash = _indent(lines[start])
        if len(names) == 1:
            described = "description" in tests[found]
            written = _with_old_descriptions(decision, tests[found])
            edits.append(
                _Edit(comment_start, end, entry_lines(written, item_dash, None, described))
            )
            continue
        kept = [n for n in names if n != decision.name]
        rewritten = list(lines[comment_start:end])
        names_row = next(
            n for n in range(start - comment_start, len(rewritten)) if "names" in rewritten[n]
        )
        if rewritten[names_row].rstrip().endswith("]"):
            key_part = rewritten[names_row].split("names", 1)[0]
            rewritten[names_row] = f"{key_part}names: {flow(kept)}"
            edits.append(_Edit(comment_start, end, rewritten))
        else:
            raise ConfigWriteError(
                f"{decision.name}: its entry lists names in block style; edit it by hand"
            )
        appended += entry_lines(decision, dash)
    if appended:
        edits.append(_append_tests(entry, tests, lines, appended))
    return edits


def _find_test(tests: Any, decision: Decision) -> int | None:
    if not isinstance(tests, CommentedSeq):
        return None
    for index, test in enumerate(tests):
        names = (
            [str(n) for n in (test.get("names") or [])] if isinstance(test, CommentedMap) else []
        )
        if decision.name in names:
            return index
    return None


def _item_span(seq: CommentedSeq, index: int, lines: list[str]) -> tuple[int, int]:
    """(first line, one past the last line) of a sequence item, trailing comments excluded."""
    start = seq.lc.item(index)[0]
    dash = _indent(lines[start])
    end = start + 1
    while end < len(lines):
        text = lines[end]
        if text.strip() and not text.lstrip().startswith("#") and _indent(text) <= dash:
            break
        end += 1
    while end > start + 1 and (
        not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")
    ):
        end -= 1
    return start, end


def _comment_start(lines: list[str], start: int) -> int:
    """First line of the comment block right above line `start`."""
    first = start
    while first > 0 and lines[first - 1].lstrip().startswith("#"):
        first -= 1
    return first


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" "))


def _tests_dash(entry: CommentedMap, lines: list[str]) -> int:
    tests = entry.get("tests")
    if isinstance(tests, CommentedSeq) and len(tests):
        return _indent(lines[tests.lc.item(0)[0]])
    return entry.lc.key("path")[1] + 2


def _append_tests(entry: CommentedMap, tests: Any, lines: list[str], new: list[str]) -> _Edit:
    if isinstance(tests, CommentedSeq) and len(tests) and tests.fa.flow_style() is False:
        _, end = _item_span(tests, len(tests) - 1, lines)
        return _Edit(end, end, new)
    key_col = entry.lc.key("path")[1]
    last_key = list(entry.keys())[-1]
    if isinstance(tests, CommentedSeq):  # `tests: []`: the key's line is replaced
        row = entry.lc.key("tests")[0]
        return _Edit(row, row + 1, [" " * key_col + "tests:", *new])
    end = _mapping_end(entry, last_key, lines)
    return _Edit(end, end, [" " * key_col + "tests:", *new])


def _mapping_end(mapping: CommentedMap, last_key: Any, lines: list[str]) -> int:
    row, col = mapping.lc.key(last_key)
    end = row + 1
    while end < len(lines):
        text = lines[end]
        if text.strip() and not text.lstrip().startswith("#") and _indent(text) <= col:
            break
        end += 1
    while end > row + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end


def _files_dash(files: Any, lines: list[str], suite: CommentedMap) -> int:
    if isinstance(files, CommentedSeq) and len(files):
        return _indent(lines[files.lc.item(0)[0]])
    first_key = next(iter(suite.keys()))
    return suite.lc.key(first_key)[1] + 2


def _new_file_lines(path: str, group: list[Decision], dash: int) -> list[str]:
    pad = " " * dash
    out = [
        f"{pad}- path: {ROOT_TOKEN}{path}",
        f"{pad}  unlisted_test_mode: skip",
        f"{pad}  tests:",
    ]
    for decision in group:
        out += entry_lines(decision, dash + 4)
    return out


def _append_files(suite: CommentedMap, files: Any, lines: list[str], new: list[str]) -> _Edit:
    if isinstance(files, CommentedSeq) and len(files) and files.fa.flow_style() is False:
        _, end = _item_span(files, len(files) - 1, lines)
        return _Edit(end, end, new)
    key_col = next(iter(suite.lc.data.values()))[1] if suite.lc.data else 2
    if "files" in suite:  # `files: []` (or null): its line is replaced
        row = suite.lc.key("files")[0]
        return _Edit(row, row + 1, [" " * key_col + "files:", *new])
    end = _mapping_end(suite, list(suite.keys())[-1], lines)
    return _Edit(end, end, [" " * key_col + "files:", *new])


# -- a fresh config, and validation ------------------------------------------------------------


def standalone(parent: str, decisions: Iterable[Decision]) -> str:
    """A config running exactly the decisions (no other test); the parent's labels and
    global section are copied line for line."""
    lines = parent.splitlines()
    document = _document(parent) if parent.strip() else None
    suite = document.get("test_suite_config") if isinstance(document, CommentedMap) else None
    by_file: dict[str, list[Decision]] = {}
    for decision in decisions:
        if decision.mode != "skip":
            by_file.setdefault(decision.file_path, []).append(decision)
    out = ["test_suite_config:"]
    out += _copied(suite, "labels", lines)
    out.append("  files:" if by_file else "  files: []")
    for path in sorted(by_file):
        out += _new_file_lines(path, by_file[path], 4)
    out += _copied(suite, "global", lines)
    return "\n".join(out) + "\n"


def every_test(parent: str, files: Sequence[str], mode: str = "mandatory_success") -> str:
    """A config running every test of the files in one mode, with the parent's global section."""
    lines = parent.splitlines()
    document = _document(parent) if parent.strip() else None
    suite = document.get("test_suite_config") if isinstance(document, CommentedMap) else None
    out = ["test_suite_config:", *_copied(suite, "labels", lines), "  files:"]
    for path in files:
        out += [f"    - path: {ROOT_TOKEN}{path}", f"      unlisted_test_mode: {mode}"]
    out += _copied(suite, "global", lines)
    return "\n".join(out) + "\n"


def _copied(suite: Any, key: str, lines: list[str]) -> list[str]:
    """A key of the parent's suite mapping and its block, re-indented to two spaces."""
    if not isinstance(suite, CommentedMap) or key not in suite:
        return []
    row, col = suite.lc.key(key)
    end = row + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > col):
        end += 1
    while end > row + 1 and not lines[end - 1].strip():
        end -= 1
    shift = col - 2
    return [text[shift:] if shift > 0 else " " * -shift + text for text in lines[row:end]]


def validate(text: str, tree: Path) -> Any:
    """Load the text with the reuse framework's strict loader as a config at the tree's root
    (relative `path`s are from there), writing nothing; ConfigError names problems, the
    tree as `${TORCH_ROOT}` (its problems are shown on pages: no server path in them)."""
    from crcr_reuse.loader import ConfigError, load_text
    from crcr_reuse.merge import merge_configs

    try:
        return merge_configs([load_text(text, "config.yaml", {"TORCH_ROOT": str(tree)}, tree)])
    except ConfigError as error:
        roots = sorted({str(tree), os.path.realpath(tree)}, key=len, reverse=True)
        problems = []
        for pos, message in error.problems:
            for root in roots:
                message = message.replace(root, ROOT_TOKEN.rstrip("/"))
            problems.append((pos, message))
        raise ConfigError(problems) from None
