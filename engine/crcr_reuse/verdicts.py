"""Which config item decided a generated variant's fate, with that item's description:
what ``explain`` prints for an op, dtype or module variant and for a test's edits.

The order is ``VariantFilter``'s (``matching.py``): an ``edits.*.exclude`` item drops the
variant; an ``edits.*.include`` item keeps it; for a dtype of an op variant, the op's own
``dtypes`` decide next; then the ``global.supported_*`` list keeps what it lists; with
no list at all, every variant is kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .schema import Config, Edits, OpSpec, Selection, marker_safe

KINDS = ("dtypes", "ops", "modules")
GLOBAL_KEYS = {"dtypes": "supported_dtypes", "ops": "supported_ops", "modules": "supported_modules"}


@dataclass(frozen=True)
class Verdict:
    """One variant's op, dtype or module, kept or not, and the item that decided it."""

    kind: str  # "op", "dtype" or "module"
    name: str
    kept: bool
    by: str  # where: "edits.ops.exclude", "global.supported_ops", "op add's dtypes", …
    item: Any = None  # the deciding item (None: a list that lacks the name, or no list)

    def __str__(self) -> str:
        if self.item is None:
            return f"{self.kind} {self.name} {self.by}"
        verb = "excluded by" if self.by.endswith(".exclude") else "included by"
        if self.by.startswith("global.") or self.by.endswith("'s dtypes"):
            verb = "listed in"
        return f"{self.kind} {self.name} {verb} {self.by} ({self.item.pos}){described(self.item)}"


def described(item: Any) -> str:
    """``: <description>`` of an item that has one, else nothing."""
    return f": {item.description.text}" if getattr(item, "description", None) else ""


def _find(items: Iterable[Any], names: Sequence[str], short: bool = False) -> Any:
    return next((i for i in items if (i.short if short else i.name) in names), None)


def _decide(kind: str, names: Sequence[str], edits: Edits, config: Config) -> Verdict | None:
    """An edits item's or the global list's verdict; None when neither has a say."""
    singular, short = kind[:-1], kind == "modules"
    selection: Selection = getattr(edits, kind)
    for way, kept in (("exclude", False), ("include", True)):
        item = _find(getattr(selection, way), names, short)
        if item is not None:
            return Verdict(singular, names[0], kept, f"edits.{kind}.{way}", item)
    listed = getattr(config.global_, GLOBAL_KEYS[kind])
    if listed is None:
        return None
    item = _find(listed, names, short)
    where = f"global.{GLOBAL_KEYS[kind]}"
    return Verdict(singular, names[0], item is not None, where if item else f"not in {where}", item)


def op_verdict(names: Sequence[str], edits: Edits, config: Config) -> Verdict:
    found = _decide("ops", names, edits, config)
    return found or Verdict("op", names[0], True, "kept: no supported_ops list")


def module_verdict(short: str, edits: Edits, config: Config) -> Verdict:
    found = _decide("modules", (short,), edits, config)
    return found or Verdict("module", short, True, "kept: no supported_modules list")


def dtype_verdict(dtype: str, op: OpSpec | None, edits: Edits, config: Config) -> Verdict:
    """``op``: the item (edits include, else global) that gives the op variant its dtypes."""
    found = _decide("dtypes", (dtype,), edits, config)
    if found is not None and found.by.startswith("edits."):
        return found
    if op is not None and op.dtypes is not None:
        item = next((d for d in op.dtypes if d.name == dtype), None)
        where = f"op {op.name}'s dtypes"
        return Verdict("dtype", dtype, item is not None, where if item else f"not in {where}", item)
    return found or Verdict("dtype", dtype, True, "kept: no supported_dtypes list")


def op_item(names: Sequence[str], edits: Edits, config: Config) -> OpSpec | None:
    """The op's include item, else its global item (where its own dtypes are read)."""
    return _find(edits.ops.include, names) or _find(config.global_.supported_ops or (), names)


def variant_names(part: str, edits: Edits, config: Config) -> tuple[str, tuple[str, ...]]:
    """("op" or "module", the names a variant's op part may stand for): a generated name
    spells "nn.functional.relu" as "nn_functional_relu", so a configured name that reads
    so is one of them. A part naming a configured module, or written like one
    ("nn_Linear", "nn_Linear_train_mode"), is a module."""
    modules = [*edits.modules.include, *edits.modules.exclude]
    modules += config.global_.supported_modules or ()
    # A module variant's part may go on with its parameters ("nn_Linear_train_mode").
    shorts = [m.short for m in modules if f"{part}_".startswith(f"{marker_safe(m.short)}_")]
    if shorts:
        return "module", (max(shorts, key=len),)
    head, _, rest = part.partition("_")
    if head == "nn" and rest[:1].isupper():
        return "module", (f"nn.{rest.split('_')[0]}",)
    ops = [*edits.ops.include, *edits.ops.exclude, *(config.global_.supported_ops or ())]
    return "op", tuple(dict.fromkeys([part, *(o.name for o in ops if marker_safe(o.name) == part)]))


def described_items(edits: Edits) -> list[str]:
    """One line per described item of a tests entry's edits: where it is and why."""
    lines = []
    for kind in KINDS:
        for way in ("include", "exclude"):
            for item in getattr(getattr(edits, kind), way):
                if item.description is not None:
                    lines.append(f"  edits.{kind}.{way} {item.name} ({item.pos}){described(item)}")
                for dtype in getattr(item, "dtypes", None) or ():
                    if dtype.description is not None:
                        lines.append(
                            f"  edits.{kind}.{way} {item.name} dtype {dtype.name} "
                            f"({dtype.pos}){described(dtype)}"
                        )
    for name, description in edits.cpu_move_descriptions:
        lines.append(f"  edits.functions.cpu_move {name} ({description.pos}): {description.text}")
    return lines
