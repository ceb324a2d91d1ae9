"""Query strings no view can answer: refused before any view reads them."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest


class RefuseNulMiddleware:
    """A NUL character anywhere in the query string is a 400.

    PostgreSQL cannot hold or compare a NUL in a text value: a filter that reaches the
    database with one (the admin's lists filter on any field named in the query string)
    is an error there. No page or API means anything by it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        for key, values in request.GET.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                return HttpResponseBadRequest("A query parameter holds a NUL character.")
        return self.get_response(request)
