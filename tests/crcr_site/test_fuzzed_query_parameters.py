"""No GET view answers a server error, whatever its query string holds: every URL
pattern of the site (crcr's pages, its API, the admin's lists) with the parameters the
views read, fuzzed with text, numbers and numbers past the database's integers, as a
signed-in admin holding an API token."""

import inspect
import re
import sys
import uuid
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runs.models import Dispatch
from selection.models import ConfigChange
from tests.factories import make_backend, make_config, make_proposal, make_token, make_user
from tests.reproducibility.builders import make_run

pytestmark = pytest.mark.django_db

# Read by lists that are not crcr's code (DRF's pagination, the admin's changelists), and
# names a view might read tomorrow: tried on every route beside what its view reads.
GENERIC = {"page", "q", "sort", "status", "limit", "offset", "o", "p"}
HUGE = ["99999999999999999999999", "-99999999999999999999999", "9223372036854775808", "1e309"]
values = (
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
    | st.integers(min_value=-(2**70), max_value=2**70).map(str)
    | st.sampled_from(HUGE + ["0", "-1", "", "nul\x00", "<b>", "%", "'", "[]", "é ü"])
)


def parameters_read(view: Any) -> list[str]:
    """The query parameters a view reads: the fields of the form it fills from
    `request.GET`, the names it gets from it, and the generic ones."""
    view = getattr(view, "view_class", view)
    source = inspect.getsource(view)
    names = set(GENERIC) | set(re.findall(r"(?:GET|query_params)\.get\(\"(\w+)\"", source))
    module = sys.modules[view.__module__]
    for form in re.findall(r"(\w+Form)\(request\.GET\)", source):
        names |= set(getattr(module, form).base_fields)
    return sorted(names)


def patterns(resolver: URLResolver | None = None, prefix: str = "") -> list[tuple[str, list]]:
    """(route, the parameters its view reads) of every URL of the site, the admin's own
    views reduced to its index and its lists (the rest read no query string of ours)."""
    resolver = resolver or get_resolver()
    found = []
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            found += patterns(entry, route)
        elif isinstance(entry, URLPattern) and (
            not route.startswith("admin/") or route == "admin/" or entry.name and
            entry.name.endswith("_changelist")
        ):  # fmt: skip
            found.append((route, parameters_read(entry.callback)))
    return found


ROUTES = patterns()


@pytest.fixture
def site(client) -> dict[str, str]:
    """A signed-in admin, one row of each kind a page shows, and the values of the
    routes' arguments that name them."""
    admin = make_user("ada", "admin")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    backend = make_backend("acme")
    config = make_config(backend)
    run = make_run(backend, config)
    proposal = make_proposal(backend)
    dispatch = Dispatch.objects.create(
        backend=backend, delivery_id="d-1", event_type="push", raw_body="{}", payload={}
    )
    change = ConfigChange.objects.create(
        backend=backend, base=config, author=admin, proposed_text=config.yaml_text
    )
    return {
        "token": make_token(admin),
        "runs/<uuid:uuid>": str(run.uuid),
        "dispatches/<uuid:uuid>": str(dispatch.uuid),
        "review/<uuid:uuid>": str(proposal.uuid),
        "config-prs/<uuid:uuid>": str(change.uuid),
        "config-versions/<uuid:uuid>": str(config.uuid),
        "<slug:slug>": backend.slug,
        "<int:number>": "1",
    }


def url_of(route: str, site: dict[str, str]) -> str:
    """The route with its arguments filled: a row of the site where one is known, else
    a value of the right shape (a page for no row is a 404, not a 500)."""
    for part, value in site.items():
        # The API names a run as its page does.
        if part.endswith("<uuid:uuid>") and route.removeprefix("api/").startswith(part):
            route = route.replace("<uuid:uuid>", value, 1)
        elif part.startswith("<"):
            route = route.replace(part, value)
    for shape in ("<uuid:uuid>", "<uuid:bundle_uuid>"):
        route = route.replace(shape, str(uuid.uuid4()))
    return "/" + route.replace("<path:object_id>", "1")


def fuzzed(client, url: str, names: list[str], token: str) -> Any:
    """Hypothesis's check of one URL: no query string gives a server error.

    Beside the drawn queries, each parameter alone past the database's integers, and
    alone holding a NUL (PostgreSQL refuses it in a string)."""

    def answers(query: dict[str, str]) -> None:
        response = client.get(url, query, HTTP_AUTHORIZATION=f"Token {token}")
        assert response.status_code < 500, f"{url} {query!r}: {response.status_code}"

    check = given(query=st.dictionaries(st.sampled_from(names), values, max_size=4))(answers)
    for name in names:
        check = example(query={name: HUGE[0]})(check)
        check = example(query={name: "nul\x00"})(check)
    return settings(
        max_examples=4, deadline=None, database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )(check)  # fmt: skip


# Committed requests: a database error must not abort the rest of the test's transaction.
@pytest.mark.django_db(transaction=True)
def test_no_query_string_makes_a_view_answer_a_server_error(client, site):
    """One fixture for every route (each request is cheap, a signed-in admin is not)."""
    client.raise_request_exception = False  # a server error is an answer here
    for route, names in ROUTES:
        fuzzed(client, url_of(route, site), names, site["token"])()


@pytest.mark.parametrize("page", ["99999999999999999999999", "-3", "x", "1e9", "2000000"])
def test_a_page_past_the_end_of_the_review_queue_is_its_last(client, site, page):
    response = client.get("/review/", {"page": page})
    assert response.status_code == 200
    assert "1 proposal matches; page 1 of 1." in response.content.decode()
