"""The selection run page (live status) and the enable-operator action."""

import pytest

from selection.models import SelectionRun
from tests.factories import make_backend, make_user

pytestmark = pytest.mark.django_db


def signed_in(client, role):
    user = make_user(role, role)
    client.force_login(user)
    return user


def test_a_running_selection_shows_its_stage_and_keeps_polling(client):
    signed_in(client, "viewer")
    run = SelectionRun.objects.create(
        backend=make_backend(),
        kind="select",
        status="running",
        stage="stage 4: running",
        done=3,
        total=12,
    )
    page = client.get(f"/selection-runs/{run.uuid}/")
    assert page.status_code == 200
    assert b"stage 4: running" in page.content and b'hx-trigger="every 2s"' in page.content
    partial = client.get(f"/selection-runs/{run.uuid}/", headers={"HX-Request": "true"})
    assert partial.status_code == 200 and b"<h1>" not in partial.content
    run.finish({"proposals": {"created": 5, "updated": 0, "unchanged": 2}})
    done = client.get(f"/selection-runs/{run.uuid}/", headers={"HX-Request": "true"})
    assert done.status_code == 286  # htmx stops polling
    assert b"5 new" in done.content


def test_enabling_an_operator_needs_a_reviewer_and_starts_a_run(client):
    backend = make_backend("reference")
    signed_in(client, "viewer")
    assert (
        client.post("/operators/enable/", {"backend": "reference", "op": "lgamma"}).status_code
        == 403
    )
    client.logout()
    signed_in(client, "reviewer")
    assert (
        client.post("/operators/enable/", {"backend": "reference", "op": "not an op"}).status_code
        == 400
    )
    response = client.post("/operators/enable/", {"backend": "reference", "op": "aten::lgamma"})
    run = SelectionRun.objects.get(backend=backend)
    assert response.status_code == 302
    assert response["Location"] == "/operators/?q=lgamma&backend=reference#op-lgamma"
    assert (run.kind, run.argument, run.status) == ("enable_op", "lgamma", "queued")
