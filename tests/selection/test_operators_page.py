"""The operators page: per operator its tests, the backend's support, the tests waiting on it,
and, for reviewers, the "enable" action of use case A with its preview."""

import json
import os
import re
from pathlib import Path

import pytest

from selection import capabilities
from selection.models import OpUsage, SelectionRun
from tests.factories import make_backend, make_config, make_user

pytestmark = pytest.mark.django_db

DECLARED = "test_suite_config:\n  global:\n    supported_ops: [add, mul]\n  files: []\n"


def use(test: str, op: str, helper: bool = False, opinfo: str = "") -> None:
    OpUsage.objects.create(
        file_path="test/test_ops.py", class_name="TestOps", test_name=test, op=op,
        is_helper=helper, opinfo=opinfo,
    )  # fmt: skip


@pytest.fixture
def index(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "storage")  # no stored device probe
    backend = make_backend("acme")
    make_config(backend, DECLARED)
    use("test_add", "add.Tensor")
    use("test_lgamma", "lgamma.default", opinfo="lgamma")
    use("test_lgamma", "add.Tensor", helper=True)
    use("test_special", "lgamma.out", helper=True)
    use("test_digamma", "digamma.default")
    return backend


def row(html: str, op: str) -> str:
    start = html.index(f'<tr id="op-{op}">')
    return html[start : html.index("</tr>", start)]


def test_a_viewer_sees_who_uses_each_operator_and_who_waits_on_it(client, index):
    client.force_login(make_user("vera"))
    html = client.get("/operators/").content.decode()
    assert "3 operators" in html and "declared by the config of Acme" in html
    add = row(html, "add")
    assert "2 <span" in add and "(1 under test)" in add and ">yes<" in add and ">none<" in add
    lgamma = row(html, "lgamma")
    assert "(1 under test)" in lgamma and '<strong class="support support-no">no</strong>' in lgamma
    assert "enabling lgamma would make 2 tests runnable" in lgamma
    assert "TestOps::test_lgamma" in lgamma and "TestOps::test_special" in lgamma
    assert "enabling digamma would make 1 test runnable" in row(html, "digamma")
    assert "/operators/enable/" not in html and "Enable " not in html


def test_a_reviewer_enables_an_operator_from_its_row(client, index):
    client.force_login(make_user("rita", role="reviewer"))
    html = client.get("/operators/").content.decode()
    lgamma = row(html, "lgamma")
    assert 'action="/operators/enable/"' in lgamma and ">Enable lgamma</button>" in lgamma
    assert 'name="op" value="lgamma"' in lgamma and 'name="backend" value="acme"' in lgamma
    assert "Enable add" not in html  # nothing waits on a supported operator
    response = client.post("/operators/enable/", {"backend": "acme", "op": "lgamma"})
    run = SelectionRun.objects.get()
    # Back to the operator's row, which shows the run (without htmx: the page, searched).
    assert response["Location"] == "/operators/?q=lgamma&backend=acme#op-lgamma"
    assert (run.kind, run.argument) == ("enable_op", "lgamma")


def test_the_list_is_searched_by_name_and_filtered_by_support(client, index):
    client.force_login(make_user("vera"))
    html = client.get("/operators/", {"q": "aten::gamma"}).content.decode()
    assert 'id="op-lgamma"' in html and 'id="op-digamma"' in html and 'id="op-add"' not in html
    waiting = client.get("/operators/", {"show": "waiting"}).content.decode()
    assert 'id="op-add"' not in waiting and 'id="op-lgamma"' in waiting
    supported = client.get("/operators/", {"show": "supported"}).content.decode()
    assert 'id="op-add"' in supported and 'id="op-lgamma"' not in supported
    none = client.get("/operators/", {"q": "conv"}).content.decode()
    assert "No operator matches." in none


def test_a_long_index_is_paginated_and_keeps_the_search(client, index):
    for number in range(60):
        use(f"test_op{number:02d}", f"op{number:02d}.default")
    client.force_login(make_user("vera"))
    first = client.get("/operators/", {"q": "op"}).content.decode()
    assert "60 operators" in first and "page 1 of 2" in first
    assert 'id="op-op49"' in first and 'id="op-op50"' not in first
    assert 'href="?q=op&amp;page=2"' in first
    second = client.get("/operators/", {"q": "op", "page": "2"}).content.decode()
    assert 'id="op-op50"' in second and 'id="op-op59"' in second and 'id="op-op49"' not in second


def test_searching_with_htmx_swaps_only_the_table(client, index):
    client.force_login(make_user("vera"))
    response = client.get("/operators/", {"q": "lgamma"}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200 and "<h1>" not in html
    assert html.lstrip().startswith('<section id="operators">') and 'id="op-lgamma"' in html


def test_an_unknown_backend_is_named_and_the_page_still_answers(client, index):
    client.force_login(make_user("vera"))
    response = client.get("/operators/", {"backend": "nope"})
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()


def test_support_is_unknown_until_the_device_has_been_probed(client, index, settings):
    backend = make_backend("probed")
    make_config(backend)  # declares no operators
    client.force_login(make_user("vera"))
    html = client.get("/operators/", {"backend": "probed"}).content.decode()
    assert "support as not known yet" in " ".join(html.split())
    assert ">unknown<" in row(html, "lgamma")
    shaping = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("CRCR_REFDEV")))
    key = capabilities._probe_key(backend.device_module, shaping)
    stored = Path(settings.MEDIA_ROOT) / "probes" / f"{key}.json"
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps({"ops": ["add"], "composite": ["lgamma.out"]}))
    html = client.get("/operators/", {"backend": "probed"}).content.decode()
    assert "probed on the device of Probed" in html
    assert "enabling lgamma would make 1 test runnable" in row(html, "lgamma")  # .out runs


def test_an_empty_index_explains_itself(client):
    client.force_login(make_user("vera"))
    html = client.get("/operators/").content.decode()
    assert 'class="empty"' in html and "The operator index is empty." in html


def test_typing_in_the_search_narrows_the_table_in_place(
    page, transactional_db, settings, tmp_path
):
    from playwright.sync_api import expect

    from tests.factories import PASSWORD

    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    make_config(backend, DECLARED)
    use("test_add", "add.Tensor")
    use("test_lgamma", "lgamma.default")
    make_user("rita", role="reviewer")
    page.goto("/operators/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Operators")).to_be_visible()
    expect(page.locator("#op-add")).to_be_visible()
    page.get_by_label("Operator").fill("lgam")
    expect(page.locator("#op-add")).to_have_count(0)
    expect(page.get_by_text("enabling lgamma would make 1 test runnable")).to_be_visible()
    expect(page.get_by_role("button", name="Enable lgamma")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/operators/\?q=lgam"))  # the search is linkable
