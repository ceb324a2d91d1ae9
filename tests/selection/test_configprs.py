"""Config PRs: approved decisions become a diff, a reviewed merge, a new config version."""

import subprocess
from pathlib import Path

import pytest
from django.urls import reverse

from selection import configprs, configwriter, pipeline, proposals
from selection.models import ConfigApproval, ConfigChange, ConfigVersion, Proposal
from tests.factories import make_backend, make_config, make_proposal, make_user

pytestmark = pytest.mark.django_db

TREE = Path(__file__).resolve().parents[1] / "upstream"
BASE = """\
# The team's config: this line must survive every merge byte for byte.
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: mandatory_success
      tests:
        # Why: asserts 11 == 10 on purpose.
        - names: [TestPlainMath::test_wrong_on_purpose]
          mode: xfail
"""


def approved(backend, test_name, mode="skip", reason="a reason", **fields):
    fields = {"file_path": "test/test_plain_reuse.py", "class_name": "TestPlainMath"} | fields
    return make_proposal(
        backend, test_name=test_name, mode=mode, reason=reason,
        status=Proposal.Status.APPROVED, **fields,
    )  # fmt: skip


@pytest.fixture
def setup():
    backend = make_backend()
    base = make_config(backend, BASE)
    return backend, base, make_user("rita", "reviewer"), make_user("otto", "reviewer")


def test_opening_a_change_gathers_only_approved_proposals_outside_a_change(setup):
    backend, base, rita, _ = setup
    wanted = approved(backend, "test_sum", reason="sums on the host only")
    pending = make_proposal(backend, test_name="test_passes_today")
    change = configprs.open_change(backend, rita)
    assert change is not None and change.base == base and change.author == rita
    assert list(change.proposals.all()) == [wanted]
    assert "        # Why: sums on the host only\n        - names: [TestPlainMath::test_sum]\n" in (
        change.proposed_text
    )
    assert set(BASE.splitlines()) <= set(change.proposed_text.splitlines())
    pending.refresh_from_db()
    assert pending.config_change is None
    assert configprs.open_change(backend, rita) is None  # nothing left to gather


def test_the_queue_offers_a_config_pr_only_for_backends_with_approved_decisions_left(setup):
    backend, _, rita, _ = setup
    approved(backend, "test_sum")
    waiting = make_backend("bolt")
    make_config(waiting, BASE)
    approved(waiting, "test_sum")
    make_proposal(make_backend("quiet"), test_name="test_pending_only")  # nothing approved
    assert [b.slug for b in configprs.ready()] == ["acme", "bolt"]
    configprs.open_change(backend, rita)
    assert [b.slug for b in configprs.ready()] == ["bolt"]


def test_the_author_cannot_approve_their_own_change_while_another_reviewer_exists(setup):
    backend, _, rita, otto = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    with pytest.raises(configprs.ChangeError, match="another reviewer"):
        configprs.approve(change, rita, change.revision)
    assert not change.approvals.exists()
    configprs.approve(change, otto, change.revision, "looks right")
    assert change.approvals.get().reviewer == otto


def test_even_a_lone_reviewer_may_not_approve_their_own_change():
    backend = make_backend()
    make_config(backend, BASE)
    rita = make_user("rita", "reviewer")
    make_user("vera", "viewer")
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    with pytest.raises(configprs.ChangeError, match="another reviewer must approve"):
        configprs.approve(change, rita, change.revision)
    assert not change.approvals.exists()


def test_self_approval_is_allowed_when_the_setting_is_off(setup, settings):
    settings.CRCR_FORBID_SELF_APPROVAL = False
    backend, _, rita, _ = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    configprs.approve(change, rita, change.revision)
    assert change.approvals.count() == 1


def test_the_page_says_when_self_approval_is_allowed(client, setup, settings):
    backend, _, rita, _ = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    client.force_login(rita)
    page = reverse("selection:configchange_detail", args=[change.uuid])
    assert "Self-approval is allowed" not in client.get(page).content.decode()
    settings.CRCR_FORBID_SELF_APPROVAL = False
    assert "Self-approval is allowed" in client.get(page).content.decode()


def test_an_unapproved_change_is_not_merged(setup):
    backend, _, rita, _ = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    with pytest.raises(configprs.ChangeError, match="approval"):
        configprs.merge(change, rita, change.revision)
    assert ConfigVersion.objects.filter(backend=backend).count() == 1


def test_merging_creates_the_next_version_and_marks_the_proposals_merged(setup):
    backend, base, rita, otto = setup
    proposal = approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    configprs.approve(change, otto, change.revision)
    version = configprs.merge(change, otto, change.revision)
    assert (version.number, version.parent, version.yaml_text) == (2, base, change.proposed_text)
    assert version.sha256 == ConfigVersion.hash_text(version.yaml_text)
    change.refresh_from_db()
    proposal.refresh_from_db()
    assert change.status == ConfigChange.Status.MERGED and change.merged_version == version
    assert proposal.status == Proposal.Status.MERGED
    assert pipeline.current_config(backend) == version.yaml_text
    configwriter.validate(version.yaml_text, TREE)  # loads with the strict loader


def two_open_changes(backend, rita, otto):
    """Change A (test_sum) and change B (test_passes_today), both opened on v1, approved."""
    approved(backend, "test_sum", reason="sums on the host only")
    first = configprs.open_change(backend, rita)
    approved(backend, "test_passes_today", mode="xfail", reason="fails on the device today")
    second = configprs.open_change(backend, otto)
    configprs.approve(first, otto, first.revision)
    configprs.approve(second, rita, second.revision)
    return first, second


def test_the_second_merge_from_the_same_base_is_told_to_rebase_and_changes_nothing(setup):
    backend, base, rita, otto = setup
    first, second = two_open_changes(backend, rita, otto)
    assert first.base == second.base == base
    merged = configprs.merge(first, otto, first.revision)
    with pytest.raises(configprs.NeedsRebase, match="rebase"):
        configprs.merge(second, rita, second.revision)
    second.refresh_from_db()
    assert second.status == ConfigChange.Status.NEEDS_REBASE
    assert configprs.latest_version(backend) == merged
    assert not second.proposals.filter(status=Proposal.Status.MERGED).exists()


def test_after_a_rebase_the_last_version_holds_every_approved_decision(setup):
    backend, _, rita, otto = setup
    first, second = two_open_changes(backend, rita, otto)
    configprs.merge(first, otto, first.revision)
    with pytest.raises(configprs.NeedsRebase):
        configprs.merge(second, rita, second.revision)
    assert configprs.rebase(second, rita) == []
    second.refresh_from_db()
    assert second.status == ConfigChange.Status.OPEN and second.base.number == 2
    assert not second.approvals.exists()  # the approval was for the old text
    with pytest.raises(configprs.ChangeError, match="approval"):
        configprs.merge(second, otto, second.revision)
    configprs.approve(second, rita, second.revision)
    last = configprs.merge(second, otto, second.revision)
    entries = proposals.explicit_entries(last.yaml_text)
    assert entries[("test/test_plain_reuse.py", "TestPlainMath::test_sum")][0] == "skip"
    assert entries[("test/test_plain_reuse.py", "TestPlainMath::test_passes_today")][0] == "xfail"
    assert entries[("test/test_plain_reuse.py", "TestPlainMath::test_wrong_on_purpose")][0] == (
        "xfail"
    )
    assert "# Why: sums on the host only" in last.yaml_text
    assert "# Why: fails on the device today" in last.yaml_text
    assert not Proposal.objects.exclude(status=Proposal.Status.MERGED).exists()


def test_a_rebase_shows_a_test_the_new_base_decides_differently(setup):
    backend, _, rita, otto = setup
    approved(backend, "test_sum", mode="skip")
    first = configprs.open_change(backend, rita)
    # A later pipeline run proposes the same test differently; it is approved too.
    approved(backend, "test_sum", mode="xfail", reason="fails on the device")
    second = configprs.open_change(backend, otto)
    configprs.approve(first, otto, first.revision)
    configprs.merge(first, otto, first.revision)
    conflicts = configprs.rebase(second, rita)
    assert [(c.proposal.test_name, c.mode, c.proposal.mode) for c in conflicts] == [
        ("test_sum", "skip", "xfail")
    ]


def test_a_merged_version_exports_as_a_patch_git_applies(setup, tmp_path):
    backend, base, rita, otto = setup
    approved(backend, "test_sum", reason="sums on the host only")
    change = configprs.open_change(backend, rita)
    configprs.approve(change, otto, change.revision)
    version = configprs.merge(change, otto, change.revision)
    (tmp_path / "crcr-config.yaml").write_text(base.yaml_text)
    (tmp_path / "v2.patch").write_text(configprs.patch(version))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", "v2.patch"], cwd=tmp_path, check=True)
    assert (tmp_path / "crcr-config.yaml").read_text() == version.yaml_text


# -- through the views -------------------------------------------------------------------------


def approve_url(change):
    return reverse("selection:configchange_approve", args=[change.uuid])


def merge_url(change):
    return reverse("selection:configchange_merge", args=[change.uuid])


def test_the_second_merge_through_the_page_is_told_to_rebase(client, setup):
    backend, _, rita, otto = setup
    first, second = two_open_changes(backend, rita, otto)
    client.force_login(otto)
    client.post(merge_url(first), {"revision": first.revision})
    client.force_login(rita)
    response = client.post(merge_url(second), {"revision": second.revision}, follow=True)
    assert "rebase" in response.content.decode()
    assert b">Rebase</button>" in response.content
    second.refresh_from_db()
    assert second.status == ConfigChange.Status.NEEDS_REBASE
    assert ConfigVersion.objects.filter(backend=backend).count() == 2
    client.post(reverse("selection:configchange_rebase", args=[second.uuid]))
    second.refresh_from_db()
    client.post(approve_url(second), {"revision": second.revision})  # otto opened it
    response = client.post(merge_url(second), {"revision": second.revision}, follow=True)
    assert "Merged as Acme config v3" in response.content.decode()
    last = configprs.latest_version(backend)
    assert "TestPlainMath::test_sum" in last.yaml_text
    assert "TestPlainMath::test_passes_today" in last.yaml_text


def test_the_page_shows_the_diff_with_reasons_escaped(client, setup):
    backend, _, rita, _ = setup
    approved(backend, "test_sum", reason="needs <script>alert(1)</script> kernels")
    change = configprs.open_change(backend, rita)
    client.force_login(make_user("vera", "viewer"))
    response = client.get(reverse("selection:configchange_detail", args=[change.uuid]))
    body = response.content.decode()
    assert response.status_code == 200
    assert "<script>alert(1)</script>" not in body
    assert "alert(1)&lt;/script&gt;" in body or "&lt;script&gt;" in body
    assert "# Why: needs" in body
    assert ">Approve</button>" not in body and ">Merge</button>" not in body


def test_a_viewer_cannot_open_approve_or_merge(client, setup):
    backend, _, rita, _ = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    client.force_login(make_user("vera", "viewer"))
    for name in ("configchange_approve", "configchange_merge", "configchange_rebase"):
        assert client.post(reverse(f"selection:{name}", args=[change.uuid])).status_code == 403
    response = client.post(reverse("selection:configchange_create"), {"backend": "acme"})
    assert response.status_code == 403
    assert not ConfigApproval.objects.exists()
    change.refresh_from_db()
    assert change.status == ConfigChange.Status.OPEN


def test_a_reviewer_opens_a_change_from_the_page(client, setup):
    backend, _, rita, _ = setup
    approved(backend, "test_sum")
    client.force_login(rita)
    response = client.post(reverse("selection:configchange_create"), {"backend": "acme"})
    change = ConfigChange.objects.get()
    assert response["Location"] == reverse("selection:configchange_detail", args=[change.uuid])
    response = client.post(reverse("selection:configchange_create"), {"backend": "not a slug"})
    assert response.status_code == 400 and b"backend" in response.content


def test_the_merged_version_downloads_as_yaml_and_as_a_patch(client, setup):
    backend, _, rita, otto = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    configprs.approve(change, otto, change.revision)
    version = configprs.merge(change, otto, change.revision)
    client.force_login(make_user("vera", "viewer"))
    response = client.get(reverse("selection:configversion_yaml", args=[version.uuid]))
    assert response["Content-Disposition"] == 'attachment; filename="crcr-config.yaml"'
    assert response.content.decode() == version.yaml_text
    response = client.get(reverse("selection:configversion_patch", args=[version.uuid]))
    patch = response.content.decode()
    assert "diff --git a/crcr-config.yaml b/crcr-config.yaml" in patch
    assert "+        - names: [TestPlainMath::test_sum]" in patch


def test_a_second_approve_changes_nothing_and_says_so(client, setup):
    backend, _, rita, otto = setup
    approved(backend, "test_sum")
    change = configprs.open_change(backend, rita)
    client.force_login(otto)
    url = reverse("selection:configchange_approve", args=[change.uuid])
    client.post(url, {"revision": change.revision, "comment": "read every line"})
    page = client.post(url, {"revision": change.revision, "comment": ""}, follow=True)
    text = page.content.decode()
    approval = ConfigApproval.objects.get()
    assert approval.comment == "read every line"  # the first approval's comment stays
    assert "You approved this revision on " in text and "nothing changed." in text
    # The page offers no second Approve: it says who approved, and when.
    assert 'action="' + url + '"' not in text
    assert "saying “read every line”" in text
