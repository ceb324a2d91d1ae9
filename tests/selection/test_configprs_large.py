"""Config PRs on a config too large to rewrite inside a request: opening or rebasing one
answers at once, a worker writes the decisions in (ruamel.yaml round-trips the whole
text, ~3 s a megabyte), and the page follows it to the config PR."""

import pytest

from selection import configprs
from selection.models import ConfigChange, ConfigSubmission
from tests.factories import make_backend, make_config, make_user
from tests.selection.test_configprs import approved
from tests.selection.test_onboarding_large import large_config
from tests.waiting import wait_for

# A large config at a threshold lowered to match, so the worker's rewrite stays short.
CONFIG = large_config(40_000)
THRESHOLD = 20_000


@pytest.fixture
def large(settings):
    settings.CRCR_CONFIG_BACKGROUND_BYTES = THRESHOLD
    backend = make_backend()
    make_config(backend, CONFIG)
    approved(backend, "test_sum", reason="sums on the host only")
    return backend


def open_pr(client):
    return client.post("/config-prs/new/", {"backend": "acme"})


def test_opening_a_config_pr_on_a_large_config_answers_before_it_is_written(db, large, client):
    client.force_login(make_user("rita", "reviewer"))

    answer = open_pr(client)

    # This test has no worker: the PR waits to be written, and none exists yet.
    work = ConfigSubmission.objects.get()
    assert answer["Location"] == f"/config-work/{work.uuid}/"
    assert (work.kind, work.status, work.form_data) == ("open_pr", "queued", {"backend": "acme"})
    assert not ConfigChange.objects.exists()
    page = client.get(answer["Location"]).content.decode()
    assert "<h1>Open a config PR: acme</h1>" in page
    assert '<span class="badge badge-amber status-queued">waiting for a worker</span>' in page
    assert 'hx-trigger="every 2s"' in page
    # A viewer may not follow a reviewer's work.
    client.force_login(make_user("vera", "viewer"))
    assert client.get(answer["Location"]).status_code == 403


def test_the_worker_opens_the_config_pr_and_the_page_leads_to_it(celery_worker, large, client):
    client.force_login(make_user("rita", "reviewer"))

    answer = open_pr(client)

    work = wait_for(
        lambda: ConfigSubmission.objects.filter(status="accepted").first(),
        what="the worker to open the config PR",
    )
    change = ConfigChange.objects.get()
    assert work.change == change and change.author.username == "rita"
    assert "        # Why: sums on the host only\n" in change.proposed_text
    assert client.get(answer["Location"], headers={"HX-Request": "true"})["HX-Refresh"] == "true"
    page = client.get(answer["Location"], follow=True)
    assert page.redirect_chain[-1][0] == f"/config-prs/{change.uuid}/"
    assert "Config PR opened." in page.content.decode()


def test_two_reviewers_opening_one_config_pr_at_once_get_one_and_a_reason(
    celery_worker, large, client
):
    client.force_login(make_user("rita", "reviewer"))

    first, second = open_pr(client), open_pr(client)

    wait_for(
        lambda: ConfigSubmission.objects.filter(status__in=["accepted", "refused"]).count() == 2,
        what="the worker to end both",
    )
    assert ConfigChange.objects.count() == 1
    refused = ConfigSubmission.objects.get(status="refused")
    assert refused.problems == {"__all__": ["Acme has no approved proposals outside a config PR"]}
    location = first["Location"] if str(refused.uuid) in first["Location"] else second["Location"]
    page = client.get(location).content.decode()
    assert '<p class="error" role="alert">Acme has no approved proposals outside a config PR.' in (
        page
    )
    assert 'hx-trigger="every 2s"' not in page


def test_rebasing_a_config_pr_onto_a_large_config_is_done_by_the_worker(
    celery_worker, large, client
):
    rita = make_user("rita", "reviewer")
    change = configprs.open_change(large, rita)
    newer = make_config(large, CONFIG + "# v2: a line more\n")
    client.force_login(rita)

    answer = client.post(f"/config-prs/{change.uuid}/rebase/")

    assert answer["Location"].startswith("/config-work/")
    wait_for(
        lambda: ConfigChange.objects.filter(pk=change.pk, base=newer).exists(),
        what="the worker to rebase the config PR",
    )
    change.refresh_from_db()
    assert change.proposed_text.endswith("# v2: a line more\n")
    page = client.get(answer["Location"], follow=True)
    assert page.redirect_chain[-1][0] == f"/config-prs/{change.uuid}/"
    assert "Rebased; approve the new diff again." in page.content.decode()
