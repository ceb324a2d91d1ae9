"""Approving and merging a config PR name the revision reviewed; a moved-on change refuses both."""

import re

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from selection import configprs
from selection.models import ConfigApproval, ConfigChange, ConfigVersion
from tests.factories import make_backend, make_config, make_user
from tests.selection.test_configprs import BASE, approved, two_open_changes

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup():
    backend = make_backend()
    make_config(backend, BASE)
    return backend, make_user("rita", "reviewer"), make_user("otto", "reviewer")


def edited(change: ConfigChange) -> ConfigChange:
    """The change after someone rewrote its proposed text (what a rebase also does)."""
    ConfigChange.objects.filter(pk=change.pk).update(proposed_text=change.proposed_text + "# !\n")
    return ConfigChange.objects.select_related("base").get(pk=change.pk)


def test_the_revision_names_the_base_and_the_proposed_text(setup):
    backend, rita, _ = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    assert re.fullmatch(r"[0-9a-f]{64}", change.revision)
    assert edited(change).revision != change.revision
    revision = change.revision
    change.base = make_config(backend, BASE + "# another base\n")
    assert change.revision != revision


def test_an_approval_of_a_revision_the_change_moved_past_is_refused_and_not_recorded(setup):
    backend, rita, otto = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    seen = change.revision
    now = edited(change).revision
    refusal = (
        f"you saw revision {seen[:12]}, it is now {now[:12]}\\): read the new diff and approve"
    )
    with pytest.raises(configprs.ChangeError, match=refusal):
        configprs.approve(change, otto, seen, "looks right")
    assert not ConfigApproval.objects.exists()
    assert configprs.approve(change, otto, now).revision == now


def test_a_merge_of_a_revision_the_change_moved_past_is_refused_and_creates_no_version(setup):
    backend, rita, otto = setup
    first, second = two_open_changes(backend, rita, otto)
    configprs.merge(first, otto, first.revision)
    seen = second.revision
    configprs.rebase(second, rita)
    second.refresh_from_db()
    configprs.approve(second, rita, second.revision)
    with pytest.raises(configprs.ChangeError, match=f"you saw revision {seen[:12]}") as refused:
        configprs.merge(second, otto, seen)
    assert not isinstance(refused.value, configprs.NeedsRebase)
    assert ConfigVersion.objects.filter(backend=backend).count() == 2
    second.refresh_from_db()
    assert second.status == ConfigChange.Status.OPEN
    assert configprs.merge(second, otto, second.revision).number == 3


def test_an_approval_of_an_older_revision_does_not_let_the_change_merge(setup):
    backend, rita, otto = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    configprs.approve(change, otto, change.revision)
    change = edited(change)
    assert configprs.may_merge(change, otto) == (
        "it can be merged once another reviewer approved this revision"
    )
    with pytest.raises(configprs.ChangeError, match="approval of this revision"):
        configprs.merge(change, otto, change.revision)
    assert ConfigVersion.objects.filter(backend=backend).count() == 1
    configprs.approve(change, otto, change.revision)
    assert configprs.may_merge(change, otto) is None
    assert configprs.merge(change, otto, change.revision).yaml_text.endswith("# !\n")


# -- through the views -------------------------------------------------------------------------


def url(name: str, change: ConfigChange) -> str:
    return reverse(f"selection:configchange_{name}", args=[change.uuid])


def test_the_page_shows_the_revision_and_its_forms_carry_it(client, setup):
    backend, rita, otto = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    configprs.approve(change, otto, change.revision)
    client.force_login(otto)
    html = client.get(url("detail", change)).content.decode()
    assert f'<dt>Revision</dt><dd><code title="{change.revision}">{change.revision[:12]}<' in html
    # The merge form carries it; otto's approval of this revision stands where Approve was.
    assert html.count(f'<input type="hidden" name="revision" value="{change.revision}">') == 1
    assert "You approved this revision on " in html
    change = edited(change)
    html = client.get(url("detail", change)).content.decode()
    assert "otto approved revision " in html and "not the current one" in html
    assert ">Merge</button>" not in html


@pytest.mark.parametrize("name", ["approve", "merge"])
@pytest.mark.parametrize("revision", [None, "", "abc", "G" * 64, "0" * 63])
def test_a_missing_or_garbled_revision_is_a_bad_request_naming_the_field(
    client, setup, name, revision
):
    backend, rita, otto = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    configprs.approve(change, otto, change.revision)
    client.force_login(otto)
    data = {} if revision is None else {"revision": revision}
    response = client.post(url(name, change), data)
    assert response.status_code == 400 and b"revision" in response.content
    assert ConfigApproval.objects.get().comment == ""
    assert ConfigVersion.objects.filter(backend=backend).count() == 1


def test_a_stale_approval_through_the_page_says_both_revisions_and_records_nothing(client, setup):
    backend, rita, otto = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    seen, now = change.revision, edited(change).revision
    client.force_login(otto)
    form = {"revision": seen, "comment": "looks right"}
    response = client.post(url("approve", change), form, follow=True)
    assert (
        f"Not approved: this config PR changed since you loaded it (you saw revision {seen[:12]}, "
        f"it is now {now[:12]}): read the new diff and approve again."
    ) in response.content.decode()
    assert not ConfigApproval.objects.exists()


def test_a_stale_merge_through_the_page_says_both_revisions_and_merges_nothing(client, setup):
    backend, rita, otto = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    seen = change.revision
    configprs.approve(change, otto, seen)
    now = edited(change).revision
    client.force_login(otto)
    response = client.post(url("merge", change), {"revision": seen}, follow=True)
    assert (
        f"Not merged: this config PR changed since you loaded it (you saw revision {seen[:12]}, "
        f"it is now {now[:12]}): read the new diff and merge again."
    ) in response.content.decode()
    assert ConfigVersion.objects.filter(backend=backend).count() == 1
    assert ConfigChange.objects.get().status == ConfigChange.Status.OPEN


# -- the upgrade -------------------------------------------------------------------------------


def test_the_upgrade_gives_existing_approvals_their_changes_current_revision(
    transactional_db, setup
):
    backend, rita, otto = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    ConfigApproval.objects.create(change=change, reviewer=otto)  # made before the upgrade
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate([("selection", "0004_claim_leases")])  # drops the column
        MigrationExecutor(connection).migrate([("selection", "0005_approval_revision")])
    finally:
        MigrationExecutor(connection).migrate(latest)
    assert ConfigApproval.objects.get().revision == change.revision
    assert configprs.may_merge(change, otto) is None
