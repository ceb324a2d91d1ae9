"""One page of an ordered queryset, with a count that stops: what a page costs does not
grow with the number of rows that match."""

from typing import TypeVar

from django.core.paginator import Page, Paginator
from django.db.models import Model, QuerySet

M = TypeVar("M", bound=Model)

# Rows counted before a page says "500+ match": counting 1,000 filtered rows of 200,000
# cost the review queue 0.5 of its ratio to the trivial page (bench/pages_at_scale.py).
COUNT_CAP = 500


class CappedPaginator(Paginator):
    """A Paginator whose count was read up to a cap: `capped` when more rows match (the
    count is then the cap plus one, so every page up to the cap has a next one)."""

    capped = False

    @property
    def shown_count(self) -> int:
        """The count a page says: exact, or the cap when more match."""
        return self.count - 1 if self.capped else self.count

    @property
    def shown_pages(self) -> int:
        """The number of pages a page says: exact, or the pages the cap fills."""
        return self.shown_count // self.per_page if self.capped else self.num_pages


def page_of(
    rows: QuerySet[M], number: str | None, per_page: int, load: QuerySet[M], cap: int = COUNT_CAP
) -> Page[M]:
    """The page `number` of `rows` (the first for a non-number, the last past the end).

    A count of every match reads every match (with a costly filter, a JSON text match,
    most of a page's time at 200,000 rows), so:
    1. the ids of the first `cap` + 1 rows, in the page's order (or up to the end of the
       page asked for, when it lies past the cap): an index walk in that order that stops
       there. How many came back is the count, "more than `cap`" when all did;
    2. the page's ids among them; past the end (the count is then exact), the last page's;
    3. the page's rows by id from `load` (the joins a row needs, without the filter
       again: with it the planner may scan the whole filtered set), in the order of 1.
    """
    try:
        index = max(1, int(number or 1))
    except ValueError:
        index = 1
    upto = max(cap, index * per_page) + 1
    found = list(rows.values_list("pk", flat=True)[:upto])
    paginator = CappedPaginator(rows, per_page)
    paginator.count = len(found)  # a cached_property: set here, never computed again
    paginator.capped = len(found) == upto
    if (index - 1) * per_page >= len(found):
        index = paginator.num_pages  # 1 when nothing matches
    ids = found[(index - 1) * per_page : index * per_page]
    by_id = load.order_by().in_bulk(ids)
    # A row deleted between the reads is left out, as if read a moment earlier.
    return Page([by_id[pk] for pk in ids if pk in by_id], index, paginator)
