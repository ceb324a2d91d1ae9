"""One page of an ordered queryset, with a count that stops: what a page costs does not
grow with the number of rows that match."""

from typing import TypeVar

from django.core.paginator import Page, Paginator
from django.db.models import Model, QuerySet
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

M = TypeVar("M", bound=Model)

# Rows counted before a page says "500+ match": counting 1,000 filtered rows of 200,000
# cost the review queue 0.5 of its ratio to the trivial page (bench/pages_at_scale.py).
COUNT_CAP = 500
# The furthest row a page number may start at: past it, the last page (an offset past
# PostgreSQL's bigint is an error, and no queue holds a trillion rows).
MAX_OFFSET = 10**12
# The most rows one page of the API lists (DRF's default limit is its page size: 100).
MAX_API_LIMIT = 1000


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
    1. the ids of the first `cap` + 1 rows, in the page's order: an index walk in that
       order that stops there. How many came back is the count, "more than `cap`" when
       all did;
    2. the page's ids among them; for a page past the cap, its own ids and one more
       (`OFFSET`: never more than a page comes back, whatever the number asked); past
       the end, the last page's, the count then read exactly;
    3. the page's rows by id from `load` (the joins a row needs, without the filter
       again: with it the planner may scan the whole filtered set), in the order of 1.
    """
    index = _number(number)
    ids_in_order = rows.values_list("pk", flat=True)
    found = list(ids_in_order[: cap + 1])
    paginator = CappedPaginator(rows, per_page)
    paginator.count = len(found)  # a cached_property: set here, never computed again
    paginator.capped = len(found) > cap
    start = (index - 1) * per_page
    ids = found[start : start + per_page]
    if not ids and paginator.capped and start < MAX_OFFSET:
        beyond = list(ids_in_order[start : start + per_page + 1])
        if beyond:  # one more than the page when more follow: the page has a next
            paginator.count, ids = start + len(beyond), beyond[:per_page]
    if not ids and paginator.capped:  # past the end of more than the cap: count them
        paginator.count, paginator.capped = rows.count(), False
        index = paginator.num_pages
        ids = list(ids_in_order[(index - 1) * per_page : index * per_page])
    elif not ids:
        index = paginator.num_pages  # 1 when nothing matches
        ids = found[(index - 1) * per_page : index * per_page]
    by_id = load.order_by().in_bulk(ids)
    # A row deleted between the reads is left out, as if read a moment earlier.
    return Page([by_id[pk] for pk in ids if pk in by_id], index, paginator)


def _number(text: str | None) -> int:
    """A page number as asked: the first page for anything but a positive number."""
    try:
        return max(1, int(text or 1))
    except (ValueError, TypeError):
        return 1


class ApiPagination(LimitOffsetPagination):
    """The API's lists: DRF's `limit` and `offset`, capped at what a client may ask for (an
    offset or limit past PostgreSQL's bigint is an error; a huge limit lists everything)."""

    max_limit = MAX_API_LIMIT

    def get_offset(self, request: Request) -> int:
        return min(super().get_offset(request), MAX_OFFSET)
