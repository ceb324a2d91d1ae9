"""A backend's config page: its YAML, its versions, blame, and every "Config vN" linking to it."""

import re

import pytest
from django.urls import reverse
from django.utils.html import escape

from reproducibility import capture
from selection import configprs
from selection.models import ConfigVersion, Proposal
from tests.factories import make_backend, make_config, make_proposal, make_user
from tests.reproducibility.builders import make_run
from tests.selection.test_configprs import BASE

pytestmark = pytest.mark.django_db

SUM = "TestPlainMath::test_sum"
TODAY = "TestPlainMath::test_passes_today"


def decided(backend, test_name, reviewer, mode="skip", reason="a reason"):
    """A proposal a reviewer approved, as the review queue leaves it."""
    return make_proposal(
        backend, file_path="test/test_plain_reuse.py", class_name="TestPlainMath",
        test_name=test_name, mode=mode, reason=reason, status=Proposal.Status.APPROVED,
        reviewer=reviewer,
    )  # fmt: skip


def merged(backend, author, approver):
    """Open a config PR of the approved proposals, approve it and merge it: (change, version)."""
    change = configprs.open_change(backend, author)
    configprs.approve(change, approver, change.revision)
    return change, configprs.merge(change, approver, change.revision)


@pytest.fixture
def history():
    """Acme's v1 (BASE, by hand), v2 (test_sum, skip) and v3 (test_passes_today, xfail)."""
    backend = make_backend()
    make_config(backend, BASE)
    rita, otto = make_user("rita", "reviewer"), make_user("otto", "reviewer")
    decided(backend, "test_sum", rita, reason="sums on the host only")
    first = merged(backend, rita, otto)
    decided(backend, "test_passes_today", otto, mode="xfail", reason="fails on the device today")
    second = merged(backend, otto, rita)
    return backend, first, second


def config_url(backend, number=None):
    if number is None:
        return reverse("selection:backendconfig_detail", args=[backend.slug])
    return reverse("selection:configversion_detail", args=[backend.slug, number])


def versions_table(html):
    body = html.split('<table class="versions">', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr[^>]*>(.*?)</tr>", body, flags=re.S)[1:]  # after the header row


def test_the_page_shows_the_latest_yaml_with_line_numbers_and_the_versions_newest_first(
    client, history
):
    backend, (first, v2), (second, v3) = history
    client.force_login(make_user("vera", "viewer"))
    html = client.get(config_url(backend)).content.decode()
    assert "<h1>Acme config v3" in html
    lines = v3.yaml_text.splitlines()
    row = '<tr id="L{0}"><td class="num"><a href="#L{0}">{0}</a></td><td class="src">{1}</td></tr>'
    assert row.format(1, escape(lines[0])) in html  # the team's comment, escaped
    assert row.format(len(lines), escape(lines[-1])) in html
    rows = versions_table(html)
    assert [re.search(r">Config v(\d+)<", r)[1] for r in rows] == ["3", "2", "1"]
    # Who merged each version and, linked, the config PR it came from.
    assert "<td>rita</td>" in rows[0] and "<td>otto</td>" in rows[1]
    pr_link = '<a href="{}">{}</a>'
    assert (
        pr_link.format(reverse("selection:configchange_detail", args=[second.uuid]), second.title)
        in rows[0]
    )
    assert (
        pr_link.format(reverse("selection:configchange_detail", args=[first.uuid]), first.title)
        in rows[1]
    )
    assert v2.sha256[:12] in rows[1] and "configchange" not in rows[2]


def test_any_version_is_viewable_by_its_own_url_or_by_v(client, history):
    backend, (_, v2), _ = history
    client.force_login(make_user("vera", "viewer"))
    for url in (config_url(backend, 2), config_url(backend) + "?v=2"):
        html = client.get(url).content.decode()
        assert "<h1>Acme config v2</h1>" in html
        assert "An older version: the latest is" in html
        assert SUM in html and TODAY not in html.split('<h2 id="versions">')[0]
    assert client.get(config_url(backend, 9)).status_code == 404
    response = client.get(config_url(backend) + "?v=two")
    assert response.status_code == 400 and b"v" in response.content


def test_a_backend_without_a_config_says_how_one_is_made(client):
    make_backend("bolt")
    client.force_login(make_user("vera", "viewer"))
    html = client.get(reverse("selection:backendconfig_detail", args=["bolt"])).content.decode()
    assert "Bolt has no config yet." in html


def blame_rows(html):
    """(annotation in force, line text) per line: a run of lines shows its origin once."""
    body = html.split('<table class="blame"', 1)[1]
    rows, annotation = [], ""
    for row in re.findall(r'<tr id="L\d+"[^>]*>(.*?)</tr>', body, flags=re.S):
        origin = re.search(r'<td class="origin" rowspan="\d+">(.*?)</td>', row, flags=re.S)
        annotation = origin[1] if origin else annotation
        rows.append((annotation, re.search(r'<td class="src">(.*?)</td>', row)[1]))
    return rows


def test_blame_names_the_pr_and_the_reason_of_the_decision_that_wrote_a_line(client, history):
    backend, (first, _), (second, v3) = history
    client.force_login(make_user("vera", "viewer"))
    url = reverse("selection:configversion_blame", args=[backend.slug, 3])
    rows = dict(
        (text.strip(), annotation)
        for annotation, text in blame_rows(client.get(url).content.decode())
    )
    sum_entry = rows[f"- names: [{SUM}]"]
    assert ">Config v2</a>" in sum_entry and f">{first.title}</a>" in sum_entry
    proposal = first.proposals.get()
    assert reverse("selection:proposal_detail", args=[proposal.uuid]) in sum_entry
    assert "skip, approved by rita" in sum_entry and "because sums on the host only" in sum_entry
    assert "fails on the device today" not in sum_entry
    today = rows[f"- names: [{TODAY}]"]
    assert ">Config v3</a>" in today and f">{second.title}</a>" in today
    assert "xfail, approved by otto" in today and "because fails on the device today" in today
    # A line of the hand-written v1 comes from no config PR.
    by_hand = rows["# Why: asserts 11 == 10 on purpose."]
    assert ">Config v1</a>" in by_hand and "not from a config PR" in by_hand


def test_blame_reads_the_history_in_a_fixed_number_of_queries(
    client, history, django_assert_max_num_queries
):
    backend, _, _ = history
    client.force_login(make_user("vera", "viewer"))
    rita, otto = make_user("rosa", "reviewer"), make_user("omar", "reviewer")
    for name in ("test_a", "test_b", "test_c"):  # three more versions, one PR each
        decided(backend, name, rita, reason=f"{name} is slow")
        merged(backend, rita, otto)
    url = reverse("selection:configversion_blame", args=[backend.slug, 6])
    with django_assert_max_num_queries(8):  # session, user, version, history, PRs, proposals
        html = client.get(url).content.decode()
    assert "because test_c is slow" in html and "because sums on the host only" in html


def test_the_run_page_and_the_record_page_link_their_config_version(client, settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend()
    make_config(backend, BASE)
    run = make_run(backend, make_config(backend, BASE + "# v2\n"))
    capture.record_run_start(run)
    client.force_login(make_user("vera", "viewer"))
    link = f'<a href="{config_url(backend, 2)}">Config v2</a>'
    assert link in client.get(reverse("runs:run_detail", args=[run.uuid])).content.decode()
    record = client.get(reverse("reproducibility:record_detail", args=[run.uuid]))
    assert link in record.content.decode()


def test_config_prs_link_their_versions_and_their_backend_s_config(client, history):
    backend, (first, _), _ = history
    client.force_login(make_user("vera", "viewer"))
    html = client.get(reverse("selection:configchange_detail", args=[first.uuid])).content.decode()
    assert f'<a href="{config_url(backend, 1)}">Config v1</a>' in html  # its base
    assert f'<a href="{config_url(backend, 2)}">Config v2</a>' in html  # merged as
    assert f'<a href="{config_url(backend)}">its config and versions</a>' in html
    html = client.get(reverse("selection:configchange_list")).content.decode()
    assert f'<a href="{config_url(backend)}">Acme</a> <span class="muted">v3</span>' in html


def open_pr(reviewer="rita"):
    backend = make_backend()
    make_config(backend, BASE)
    author = make_user(reviewer, "reviewer")
    decided(backend, "test_sum", author, reason="sums on the host only")
    return configprs.open_change(backend, author)


def test_the_diff_numbers_old_and_new_lines_and_has_a_split_view(client):
    change = open_pr()
    client.force_login(make_user("vera", "viewer"))
    url = reverse("selection:configchange_detail", args=[change.uuid])
    html = client.get(url).content.decode()
    assert '<table class="diff unified">' in html and "@@ -7,3 +7,6 @@" in html
    # An unchanged line has both numbers; an added one only its new number.
    assert '<td class="num">9</td><td class="num">9</td><td class="src context">' in html
    added = '<td class="num"></td><td class="num">10</td><td class="src add"><span class="sign">+</span>        # Why: sums on the host only</td>'
    assert added in html
    assert f'<a href="{url}?view=split">Split</a>' in html
    html = client.get(url + "?view=split").content.decode()
    assert '<table class="diff split">' in html and '<table class="diff unified">' not in html
    # Side by side: the old side has no line where the new side adds one.
    assert re.search(
        r'<td class="num"></td><td class="src empty">.*?</td>\s*'
        r'<td class="num">10</td><td class="src add"><span class="sign">\+</span>\s+# Why: sums',
        html,
    )
    assert f'<a href="{url}?view=unified">Unified</a>' in html


def test_merge_shows_only_to_a_reviewer_who_may_merge(client):
    change = open_pr()
    url = reverse("selection:configchange_detail", args=[change.uuid])
    otto = make_user("otto", "reviewer")
    client.force_login(otto)
    html = client.get(url).content.decode()
    assert (
        ">Merge</button>" not in html and "It can be merged once another reviewer approved" in html
    )
    configprs.approve(change, otto, change.revision)
    assert ">Merge</button>" in client.get(url).content.decode()
    client.force_login(make_user("vera", "viewer"))  # reads the approved PR, may not merge it
    html = client.get(url).content.decode()
    assert ">Merge</button>" not in html and ">Approve</button>" not in html
    assert ConfigVersion.objects.filter(backend=change.backend).count() == 1


DESCRIBED = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_ops.py
      tests:
        - names: [TestCommon::test_compare_cpu]
          mode: mandatory_success
          description: compares every op with the CPU
          edits:
            ops:
              include:
                - name: add
                  description: add has a <device> kernel
              exclude: [{name: lgamma, description: no lgamma kernel}]
  global:
    supported_dtypes:
      - name: float16
        description: the device's native type
"""


def test_the_page_shows_each_description_beside_the_line_of_the_item_it_explains(client):
    backend = make_backend()
    make_config(backend, DESCRIBED)
    client.force_login(make_user("vera", "viewer"))
    html = client.get(config_url(backend)).content.decode()
    table = html.split('<table class="code"', 1)[1].split("</table>", 1)[0]
    rows = {n: (attrs, cells) for n, attrs, cells in re.findall(r'<tr id="L(\d+)"([^>]*)>(.*?)</tr>', table)}  # fmt: skip
    note = '<span class="note" title="description of {} (line {})">{}</span>'
    # A tests entry's and a block item's description, beside their first line, escaped.
    assert rows["5"][1].endswith(
        "- names: [TestCommon::test_compare_cpu]"
        + note.format("tests", 7, "compares every op with the CPU")
        + "</td>"
    )
    assert (
        note.format("edits.ops.include add", 12, "add has a &lt;device&gt; kernel") in rows["11"][1]
    )
    assert (
        note.format("global.supported_dtypes float16", 17, "the device&#x27;s native type")
        in rows["16"][1]
    )
    # Every line holding a description is marked; a flow item's is in its own line already.
    assert [n for n, (attrs, _) in rows.items() if "described" in attrs] == ["7", "12", "13", "17"]
    assert 'class="note"' not in rows["13"][1] and "no lgamma kernel" in rows["13"][1]
    # The YAML itself is unchanged: each line's text is there as written.
    assert escape("                  description: add has a <device> kernel") in rows["12"][1]
