"""Selecting tests by label, as Torch Spyre's ``TEST_TYPE`` does (``--reuse-labels``).

A selection is one or more of (a test is kept when any of them keeps it):
- ``full``: every test (also what no selection means);
- ``suite_<group>``: the tests of configs lying in a folder named ``<group>`` or whose
  file name is ``<group>`` or starts with ``<group>_`` (Spyre's config-folder groups);
- any other label: the tests whose group labels list it (a files entry's ``labels``,
  else its config's; a config without labels counts as ``full`` only), and, when their
  tests entry has ``labels`` of its own, whose entry lists it too.
The rest are deselected and counted (``deselected_by_labels``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .schema import LABEL_FORM, Config

if TYPE_CHECKING:
    import yaml

    from .loader import _Reader

FULL = "full"
SUITE_PREFIX = "suite_"


def parse_selection(values: Iterable[str]) -> tuple[str, ...]:
    """Labels from option values ("smoke,core", repeated); ValueError names a bad one."""
    labels: dict[str, None] = {}
    for value in values:
        for label in (part.strip() for part in value.split(",")):
            if not label:
                continue
            group = label.removeprefix(SUITE_PREFIX) if label.startswith(SUITE_PREFIX) else None
            if not LABEL_FORM.fullmatch(label) or group == "":
                raise ValueError(
                    f"'{label}' is not a label (a name such as smoke, core, full, "
                    "suite_<group> or one of the config's labels)"
                )
            labels[label] = None
    return tuple(labels)


def in_suite_group(group: str, source: str) -> bool:
    """Whether a config lies in folder ``group`` or is named ``group``/``group_…``."""
    path = Path(source)
    group = group.lower()
    folders = [part.lower() for part in path.parent.parts]
    stem = path.stem.lower()
    return group in folders or stem == group or stem.startswith(group + "_")


def selects(
    selection: Sequence[str],
    group_labels: Sequence[str],
    test_labels: Sequence[str],
    source: str,
) -> bool:
    """Whether a test with these labels, from the config at ``source``, is selected."""
    if not selection:
        return True
    for label in selection:
        if label == FULL:
            return True
        if label.startswith(SUITE_PREFIX):
            if in_suite_group(label[len(SUITE_PREFIX) :], source):
                return True
            continue
        if label in (group_labels or (FULL,)) and (not test_labels or label in test_labels):
            return True
    return False


def read_labels(reader: _Reader, node: yaml.Node) -> tuple[str, ...]:
    """A config's `labels` list (suite, files or tests entry): names such as smoke, core,
    full or a team's own; a bad name is the reader's error at its line and column."""
    labels: dict[str, None] = {}
    for item in reader.sequence(node, "labels"):
        label = reader.string(item, "a label")
        if label is None:
            continue
        if not LABEL_FORM.fullmatch(label) or label.startswith(SUITE_PREFIX):
            why = (
                "is a selection, not a label"
                if LABEL_FORM.fullmatch(label)
                else "is not a label name (a letter, then letters, digits, _ and -)"
            )
            reader.error(
                item,
                f"label '{label}' {why} (labels such as smoke, core, full; "
                f"`{SUITE_PREFIX}<group>` selects configs by folder)",
            )
            continue
        labels[label] = None
    return tuple(labels)


def resolve_labels(config: Config, source: str) -> None:
    """Each files and tests entry of one loaded config learns the labels it is selected by
    (its files entry's own, else the config's) and the config's path: a merge of configs
    then keeps each test's own (Spyre fills a files entry's labels so when it merges)."""
    for entry in config.files:
        if entry.labels_pos is None:
            entry.labels = config.labels
        entry.source = source
        entry.tests = [
            dataclasses.replace(test, group_labels=entry.labels, source=source)
            for test in entry.tests
        ]
