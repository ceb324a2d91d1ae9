"""What a collected test carries: markers, an xfail mark, user properties — shared, not copied.

A test's marks come in two parts: one from its decision (mode, tags, labels,
config entry; shared by every variant of a generic test) and one from its
variant (op, dtypes, module; shared by every test with the same variant). Both
parts are built once and their mark objects and property tuples are reused, so
thousands of variants cost collection neither time nor memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from .matching import Decision
from .schema import marker_safe

Property = tuple[str, str]
# On the test that stands for a config-skipped generic test: how many variants it hides.
PLACEHOLDER_VARIANTS = "crcr_skipped_variants"


@dataclass(frozen=True, slots=True)
class Part:
    mode: str
    marks: tuple[pytest.Mark, ...]
    # What ``item.add_marker`` would put in the test's keywords, one map for all the marks.
    keywords: dict[str, pytest.MarkDecorator]
    properties: tuple[Property, ...]

    @classmethod
    def of(
        cls, mode: str, decorators: list[pytest.MarkDecorator], properties: tuple[Property, ...]
    ) -> Part:
        marks = tuple(decorator.mark for decorator in decorators)
        keywords = {decorator.name: decorator for decorator in decorators}
        return cls(mode, marks, keywords, properties)


def marker_names(
    op: str | None,
    dtypes: tuple[str, ...],
    module: str | None,
    tags: tuple[str, ...],
    labels: tuple[str, ...],
    mode: str,
) -> list[str]:
    """Every marker of a test, in the order the report lists them."""
    names = []
    if op:
        base = op.split(".")[0]
        names.append(f"op__{marker_safe(base)}")
        if op != base:
            names.append(f"op__{marker_safe(op)}")
    names += [f"dtype__{dtype}" for dtype in dict.fromkeys(dtypes)]
    if module:
        names.append(f"module__{marker_safe(module)}")
    names += list(tags) + [f"testtype__{label}" for label in labels] + [f"mode__{mode}"]
    return names


class Marking:
    def __init__(self) -> None:
        self._decision_parts: dict[tuple[int, str | None, tuple[str, ...]], Part] = {}
        self._variant_parts: dict[tuple[Any, ...], Part] = {}
        self._marks: dict[str, pytest.MarkDecorator] = {}

    def apply(
        self,
        item: pytest.Item,
        decision: Decision,
        test: str,
        variant: tuple[str | None, tuple[str, ...], str | None] = (None, (), None),
        forced: str | None = None,
        op_tags: tuple[str, ...] = (),
    ) -> str:
        """Mark ``item``; return its mode. ``variant``: (op full name, dtypes, module);
        ``op_tags``: the tags of its op's include item, added to the entry's."""
        first = self._decision_part(decision, test, forced, op_tags)
        second = self._variant_part(variant)
        # `add_marker` per mark, in bulk: tens of thousands of variants a file.
        item.own_markers.extend(first.marks + second.marks)
        item.keywords.update(first.keywords)
        item.keywords.update(second.keywords)
        item.user_properties.extend(second.properties + first.properties)
        return first.mode

    def skip(self, item: pytest.Item, decision: Decision, test: str, variants: int | None) -> None:
        """Mark a test the config skips: it is reported as skipped, with the entry's reason."""
        self.apply(item, decision, test)
        hidden = f" ({variants} variants not generated)" if variants is not None else ""
        item.add_marker(pytest.mark.skip(reason=f"crcr config: {decision.reason}{hidden}"))

    def mode(self, decision: Decision, forced: str | None = None) -> str:
        return "xfail" if forced and decision.mode == "mandatory_success" else decision.mode

    def _decision_part(
        self, decision: Decision, test: str, forced: str | None, op_tags: tuple[str, ...] = ()
    ) -> Part:
        key = (id(decision), forced, op_tags)
        part = self._decision_parts.get(key)
        if part is None:
            mode = self.mode(decision, forced)
            reason = forced if mode != decision.mode and forced else decision.reason
            tags = tuple(dict.fromkeys(decision.tags + op_tags))
            # The test's own labels: its files entry's (or config's) and its entry's.
            labels = decision.labels
            names = list(tags) + [f"testtype__{label}" for label in labels]
            decorators = [self._mark(name) for name in names + [f"mode__{mode}"]]
            if mode in ("xfail", "xfail_strict"):
                decorators.append(
                    pytest.mark.xfail(
                        reason=f"crcr config: {reason}", strict=mode == "xfail_strict"
                    )
                )
            entry = decision.entry_ref()
            properties = (
                ("mode", mode),
                ("crcr_test", test),
                ("crcr_tags", " ".join(tags)),
                ("crcr_labels", " ".join(labels)),
                ("crcr_entry", json.dumps(entry) if entry else ""),
                ("crcr_reason", reason),
            )
            part = self._decision_parts[key] = Part.of(mode, decorators, properties)
        return part

    def _variant_part(self, variant: tuple[str | None, tuple[str, ...], str | None]) -> Part:
        part = self._variant_parts.get(variant)
        if part is None:
            op, dtypes, module = variant
            names = marker_names(op, dtypes, module, (), (), "")[:-1]  # without the mode marker
            properties = [
                (key, value)
                for key, value in (("op", op), ("dtype", ",".join(dtypes)), ("module", module))
                if value
            ]
            part = Part.of("", [self._mark(name) for name in names], tuple(properties))
            self._variant_parts[variant] = part
        return part

    def _mark(self, name: str) -> pytest.MarkDecorator:
        decorator = self._marks.get(name)
        if decorator is None:
            # Built directly: the names are dynamic, so --strict-markers must not see them.
            mark = pytest.Mark(name, (), {}, _ispytest=True)
            decorator = self._marks[name] = pytest.MarkDecorator(mark, _ispytest=True)
        return decorator
