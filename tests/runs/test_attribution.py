"""A red run says what its failure is put down to: what moved since the job's last green run."""

import pytest

from runs.models import Run
from tests.crcr_site.hostile import build
from tests.factories import make_user


@pytest.mark.parametrize(
    ("changed", "text"),
    [
        (["PyTorch"], "only PyTorch changed since the last green run"),
        (["PyTorch", "test suite"], "only PyTorch changed since the last green run"),
        (["test suite"], "only the test suite changed since the last green run"),
        (["backend"], "only the backend changed since the last green run"),
        (["config"], "only the config changed since the last green run"),
        (["backend", "PyTorch"], "both PyTorch and the backend changed since the last green run"),
        (
            ["backend", "PyTorch", "test suite", "config"],
            "PyTorch, the backend and the config changed since the last green run",
        ),
        (["no green run yet"], "no earlier green run to compare with"),
        ([], "nothing changed since the last green run: flaky or infrastructure"),
    ],
)
def test_a_red_run_is_attributed_by_what_changed(changed, text):
    for status in (Run.Status.FAILED, Run.Status.TIMED_OUT):
        assert Run(status=status, changed_since_green=changed).attribution() == text


@pytest.mark.parametrize("status", ["passed", "running", "queued", "cancelled", "error"])
def test_a_run_that_is_not_red_has_no_attribution(status):
    assert Run(status=status, changed_since_green=["PyTorch"]).attribution() == ""


@pytest.mark.django_db
def test_the_attribution_is_shown_where_the_failure_is_listed(client):
    pages = {page.name: page.url for page in build()}
    client.force_login(make_user("vera"))
    expected = "only PyTorch changed since the last green run"
    run_page = client.get(pages["run detail"]).content.decode()
    assert f"Attribution: {expected}." in run_page
    assert expected in client.get(pages["run list"]).content.decode()
    hud = client.get(pages["hud"]).content.decode()
    assert f"acme: failed · {expected}" in hud  # the red cell's tooltip
