"""The operators page's reading of the operator index: per operator, who uses it, whether
the backend supports it, and who waits on it (use case A's preview).

An operator here is a packet ("lgamma"), as the capabilities and `enable_op` name
it; the index stores overloads ("lgamma.default"). The capabilities are the ones
known without probing the device (`capabilities.known_for_backend`), since pages
never start torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Case, CharField, Count, F, Q, QuerySet, Value, When
from django.db.models.functions import Concat, Left, StrIndex

from selection.capabilities import Capabilities
from selection.enabling import Key, waiting_on
from selection.models import OpUsage

TESTS_SHOWN = 10
SUPPORTED, WAITING = "supported", "waiting"


def _with_operator(usages: QuerySet[OpUsage]) -> QuerySet[Any]:
    return usages.alias(dot=StrIndex("op", Value("."))).annotate(
        operator=Case(
            When(Q(dot=0), then=F("op")),
            default=Left("op", F("dot") - 1),
            output_field=CharField(),
        )
    )


def _unsupported(capabilities: Capabilities) -> QuerySet[Any]:
    """Index rows the backend cannot run: what `waiting_on` counts, as one query."""
    return (
        _with_operator(OpUsage.objects.all())
        .exclude(operator__in=sorted(capabilities.ops))
        .exclude(op__in=sorted(capabilities.composite))
    )


def packets(
    search: str = "", show: str = "", capabilities: Capabilities | None = None
) -> QuerySet[Any, dict[str, Any]]:
    """Operators in the index with their number of tests, by name; `search` is a substring."""
    usages = _with_operator(OpUsage.objects.all())
    if search:
        usages = usages.filter(operator__icontains=search)
    if capabilities is not None and show in (SUPPORTED, WAITING):
        waiting = _unsupported(capabilities).values("operator")
        usages = (
            usages.filter(operator__in=waiting)
            if show == WAITING
            else usages.exclude(operator__in=waiting)
        )
    test = Concat("file_path", Value("::"), "class_name", Value("::"), "test_name")
    return (
        usages.values("operator")
        .annotate(
            tests=Count(test, distinct=True),
            under_test=Count(test, distinct=True, filter=Q(is_helper=False)),
        )
        .order_by("operator")
    )


@dataclass
class Operator:
    name: str
    tests: int  # tests that call it
    under_test: int  # tests that call it as the operator under test
    using: list[Key]  # a few of them, under test first
    supported: bool | None  # None: the backend's capabilities are not known yet
    waiting: list[Key]  # tests that call it while the backend lacks it
    enabling: Any = None  # the newest "enable an operator" run of it (`enabling.latest_runs`)

    @property
    def preview(self) -> str:
        count = len(self.waiting)
        return f"enabling {self.name} would make {count} test{'s' if count != 1 else ''} runnable"


def describe(row: dict[str, Any], capabilities: Capabilities | None) -> Operator:
    """One row of `packets()` with its tests, its support and the tests waiting on it."""
    name = str(row["operator"])
    using = list(
        OpUsage.objects.filter(op__startswith=f"{name}.")
        .order_by("is_helper", "file_path", "class_name", "test_name")
        .values_list("file_path", "class_name", "test_name")
        .distinct()[: TESTS_SHOWN * 4]
    )
    shown = list(dict.fromkeys(using))[:TESTS_SHOWN]
    waiting = sorted(waiting_on(name, capabilities)) if capabilities is not None else []
    supported = None if capabilities is None else not waiting
    return Operator(name, row["tests"], row["under_test"], shown, supported, waiting)
