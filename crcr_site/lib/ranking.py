"""The first few rows of each of several groups, in one query that reads only those rows."""

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import F, QuerySet, Window
from django.db.models.functions import RowNumber


def first_of_each(
    rows: QuerySet[Any], groups: Sequence[dict[str, Any]], n: int
) -> QuerySet[Any, int] | list[int]:
    """The ids of the first `n` rows by id of each group of `rows` (a group: the field
    values that pick it, e.g. `{"run_id": 7}`), for a `pk__in`.

    Where the database takes a LIMIT in each part of a UNION (PostgreSQL), a subquery of
    one `LIMIT n` per group: each an index walk in id order that stops after `n` rows.
    Elsewhere (SQLite), read in a query of its own: a window ranks every row of the
    groups by id and keeps the first `n` of each, one pass over all of them (a run's
    10,000 failures for 40 shown); as a subquery, PostgreSQL joined all of them.
    """
    if not groups:
        return []
    if connection.features.supports_slicing_ordering_in_compound:
        parts = [
            rows.filter(**group).order_by("pk").values_list("pk", flat=True)[:n] for group in groups
        ]
        return parts[0].union(*parts[1:], all=True)
    fields = list(groups[0])
    chosen = rows.filter(**{f"{field}__in": {group[field] for group in groups} for field in fields})
    ranked = chosen.annotate(
        rank=Window(
            RowNumber(), partition_by=[F(field) for field in fields], order_by=F("pk").asc()
        )
    ).filter(rank__lte=n)
    wanted = {tuple(group[field] for field in fields) for group in groups}
    found = ranked.values_list("pk", *fields)
    return [pk for pk, *key in found if tuple(key) in wanted]
