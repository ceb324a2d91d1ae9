"""One page of an ordered queryset, counted in the same pass over the filtered rows."""

from typing import TypeVar

from django.core.paginator import Page, Paginator
from django.db.models import Count, Model, QuerySet, Window

M = TypeVar("M", bound=Model)


def page_of(rows: QuerySet[M], number: str | None, per_page: int, load: QuerySet[M]) -> Page[M]:
    """The page `number` of `rows` (the first for a non-number, the last past the end).

    Django's Paginator filters the rows twice, once for COUNT(*) and once for the
    page; with a costly filter (a JSON text match) that is most of a page's time.
    1. read the page's ids with the count of all rows (`COUNT(*) OVER ()`): one pass;
    2. an empty page (past the end, or nothing matches) falls back to Paginator;
    3. read the page's rows by id from `load` (the joins a row needs, without the filter
       again: with it the planner may scan the whole filtered set), in the order of 1.
    """
    paginator = Paginator(rows, per_page)
    try:
        index = int(number or 1)
    except ValueError:
        index = 1
    counted = rows.annotate(total=Window(Count("*"))).values_list("pk", "total")
    keys = list(counted[(index - 1) * per_page : index * per_page]) if index > 0 else []
    if not keys:
        return paginator.get_page(number)
    paginator.count = keys[0][1]  # a cached_property: set here, never computed again
    by_id = load.order_by().in_bulk([pk for pk, _ in keys])
    # A row deleted between the two reads is left out, as if read a moment earlier.
    return Page([by_id[pk] for pk, _ in keys if pk in by_id], index, paginator)
