"""The review queue: filters, inline actions with and without htmx, bulk actions, its cost."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from selection import configprs
from selection.models import (
    InventorySnapshot,
    OpUsage,
    Proposal,
    ProposalEvent,
    TestFile,
    UpstreamTest,
)
from selection.views.review import PAGE_SIZE
from tests.factories import make_backend, make_config, make_proposal, make_user

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def waiting_on(op):
    return {"unsupported_ops": [f"{op}.default"], "waiting_on": [op], "ops_under_test": 2}


@pytest.fixture
def backend():
    backend = make_backend()
    make_config(backend)
    return backend


@pytest.fixture
def rita(client):
    user = make_user("rita", "reviewer")
    client.force_login(user)
    return user


def queue(client, **filters):
    return client.get(reverse("selection:proposal_list"), filters)


def test_the_op_filter_shows_only_tests_that_name_the_op(client, backend, rita):
    make_proposal(backend, test_name="test_lgamma_one", evidence=waiting_on("lgamma"))
    make_proposal(backend, test_name="test_add_one", evidence=waiting_on("add"))
    make_proposal(backend, test_name="test_addmm_one", evidence=waiting_on("addmm"))
    body = queue(client, op="add").content.decode()
    assert "test_add_one" in body
    assert "test_addmm_one" not in body and "test_lgamma_one" not in body
    assert "1 proposal matches" in body


def test_op_and_dtype_filters_read_evidence_and_edits_in_any_case_as_they_are_now(
    client, backend, rita
):
    make_proposal(backend, test_name="test_overload", evidence={"unsupported_ops": ["LGamma.out"]})
    make_proposal(
        backend, test_name="test_in_edits", edits={"ops": {"exclude": [{"name": "lgamma"}]}}
    )
    later = make_proposal(backend, test_name="test_changed_later", evidence=waiting_on("add"))
    make_proposal(backend, test_name="test_half", evidence={"dtypes": ["float16"]})
    Proposal.objects.filter(pk=later.pk).update(evidence=waiting_on("lgamma"))  # a bulk write
    body = queue(client, op="lgamma").content.decode()
    assert "test_overload" in body and "test_in_edits" in body and "test_changed_later" in body
    assert "test_half" not in body and "3 proposals match" in body
    body = queue(client, dtype="Float16").content.decode()
    assert "test_half" in body and "1 proposal matches" in body


def test_filters_combine_and_free_text_searches_reasons(client, backend, rita):
    make_proposal(backend, test_name="test_a", mode="skip", reason="needs a vendor kernel")
    make_proposal(backend, test_name="test_b", mode="xfail", reason="needs a vendor kernel")
    make_proposal(backend, test_name="test_c", mode="skip", reason="CPU only")
    body = queue(client, q="vendor", mode="skip").content.decode()
    assert "test_a" in body and "test_b" not in body and "test_c" not in body


def test_a_bad_filter_is_a_400_naming_it(client, backend, rita):
    make_proposal(backend)
    response = queue(client, status="sort-of-approved")
    assert response.status_code == 400
    assert "status" in response.content.decode()
    assert "test_contiguous_self" not in response.content.decode()


def test_the_queue_shows_evidence_and_escapes_it(client, backend, rita):
    evidence = {
        "unsupported_ops": ["lgamma.default"],
        "device": {"variants": 3, "passed": 1, "failed": 2, "failures": [
            {"category": "unsupported_op", "op": "lgamma.default", "line": "<b>no kernel</b>",
             "message": "NotImplementedError: Could not run 'aten::lgamma' <script>x</script>"}]},
    }  # fmt: skip
    make_proposal(backend, evidence=evidence, reason="<img src=x>", stage="refine")
    body = queue(client).content.decode()
    assert "lgamma.default" in body and "stage 4: refined on the device" in body
    assert "Could not run &#x27;aten::lgamma&#x27; &lt;script&gt;" in body
    assert "<script>x" not in body and "<img src=x>" not in body and "<b>no kernel" not in body


def test_an_htmx_approval_answers_the_row_and_records_who(client, backend, rita):
    proposal = make_proposal(backend)
    url = reverse("selection:proposal_review", args=[proposal.uuid])
    response = client.post(url, {"decision": "approve"}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    assert body.strip().startswith(f'<tr id="proposal-{proposal.uuid}"')
    assert "approved" in body and "rita" in body
    event = ProposalEvent.objects.get()
    assert (event.actor, event.action, event.new) == (rita, "approved", {"status": "approved"})


def test_an_inline_edit_changes_mode_and_reason_and_keeps_history(client, backend, rita):
    proposal = make_proposal(backend, status=Proposal.Status.APPROVED)
    url = reverse("selection:proposal_edit", args=[proposal.uuid])
    form = client.get(url, **HTMX).content.decode()
    assert 'name="reason"' in form and "<html" not in form
    response = client.post(url, {"mode": "xfail", "reason": "  fails  on bf16 "}, **HTMX)
    assert "fails on bf16" in response.content.decode()
    proposal.refresh_from_db()
    assert (proposal.mode, proposal.reason, proposal.status) == (
        "xfail",
        "fails on bf16",
        "pending",
    )
    event = ProposalEvent.objects.get()
    assert event.old["reason"] == "basic metadata op, fully supported"
    assert event.new["reason"] == "fails on bf16"
    detail = client.get(reverse("selection:proposal_detail", args=[proposal.uuid]))
    assert "rita edited" in detail.content.decode()


def test_a_bad_edit_is_a_400_and_changes_nothing(client, backend, rita):
    proposal = make_proposal(backend)
    url = reverse("selection:proposal_edit", args=[proposal.uuid])
    response = client.post(url, {"mode": "sometimes", "reason": "x"}, **HTMX)
    assert response.status_code == 400 and b"mode" in response.content
    response = client.post(url, {"mode": "skip", "reason": "   "}, **HTMX)
    assert response.status_code == 400 and b"reason" in response.content
    proposal.refresh_from_db()
    assert proposal.mode == "mandatory_success" and not ProposalEvent.objects.exists()


def test_bulk_approval_covers_every_page_of_the_filtered_set_only(client, backend, rita):
    for n in range(60):
        make_proposal(backend, test_name=f"test_lgamma_{n}", evidence=waiting_on("lgamma"))
    other = make_proposal(backend, test_name="test_add", evidence=waiting_on("add"))
    page = queue(client, op="lgamma").content.decode()
    assert "Approve all 60 matching" in page and "page 1 of 3" in page  # 25 a page
    asked = client.post(reverse("selection:proposal_bulk"), {"op": "lgamma", "decision": "approve"})
    assert "Approve 60 proposals?" in asked.text and "op=lgamma" in asked.text
    assert not Proposal.objects.filter(status="approved").exists()  # nothing until confirmed
    response = client.post(
        reverse("selection:proposal_bulk"),
        {"op": "lgamma", "decision": "approve", "confirmed": "yes"},
        follow=True,
    )
    assert "60 proposals approved." in response.content.decode()
    assert Proposal.objects.filter(status="approved", reviewer=rita).count() == 60
    assert ProposalEvent.objects.filter(bulk=True, actor=rita).count() == 60
    other.refresh_from_db()
    assert other.status == Proposal.Status.PENDING


def test_a_proposal_in_a_config_pr_is_no_longer_reviewed(client, backend, rita):
    proposal = make_proposal(backend, status=Proposal.Status.APPROVED)
    configprs.open_change(backend, rita)
    url = reverse("selection:proposal_review", args=[proposal.uuid])
    response = client.post(url, {"decision": "reject"}, **HTMX)
    assert response.status_code == 409 and b"config PR" in response.content
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.APPROVED


def test_a_viewer_sees_the_queue_without_actions_and_cannot_act(client, backend):
    proposal = make_proposal(backend)
    client.force_login(make_user("vera", "viewer"))
    body = queue(client).content.decode()
    assert "test_contiguous_self" in body
    for action in (">Approve<", ">Reject<", ">Edit<", "Approve all", "Open a config PR"):
        assert action not in body
    posts = [
        (reverse("selection:proposal_review", args=[proposal.uuid]), {"decision": "approve"}),
        (reverse("selection:proposal_edit", args=[proposal.uuid]), {"mode": "skip", "reason": "x"}),
        (reverse("selection:proposal_bulk"), {"decision": "approve"}),
    ]
    for url, data in posts:
        assert client.post(url, data).status_code == 403
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.PENDING and proposal.mode == "mandatory_success"


def many(backend, count):
    files = [f"test/test_file_{n}.py" for n in range(20)]
    Proposal.objects.bulk_create(
        Proposal(
            backend=backend, file_path=files[n % 20], class_name=f"TestClass{n % 7}",
            test_name=f"test_{n}", mode=Proposal.Mode.SKIP, reason=f"reason {n}",
            evidence=waiting_on("lgamma" if n % 3 else "add"), stage=Proposal.Stage.CLASSIFY,
            status=Proposal.Status.APPROVED if n % 5 == 0 else Proposal.Status.PENDING,
        )
        for n in range(count)
    )  # fmt: skip


FILTERS = {
    "backend": "acme",
    "file": "test/test_file_3.py",
    "status": "pending",
    "op": "lgamma",
    "sort": "newest",
}


def test_a_filtered_page_costs_the_same_queries_for_20000_proposals(
    client, backend, rita, django_assert_max_num_queries
):
    many(backend, 100)
    with CaptureQueriesContext(connection) as small:
        assert queue(client, **FILTERS).status_code == 200
    many(backend, 20_000)
    with django_assert_max_num_queries(len(small.captured_queries)):
        response = queue(client, **FILTERS, page=2)
    body = response.content.decode()
    assert response.status_code == 200 and "page 2 of" in body
    assert body.count('class="proposal"') == PAGE_SIZE


def test_the_file_filter_matches_part_of_a_path_in_any_case(client, backend, rita):
    make_proposal(backend, file_path="test/inductor/test_torchinductor.py", test_name="test_a")
    make_proposal(backend, file_path="test/test_view_ops.py", test_name="test_b")
    body = queue(client, file="Inductor/test_torch").content.decode()
    assert "test_a" in body and "test_b" not in body
    assert "1 proposal matches" in body


def test_the_op_filter_finds_every_operator_a_test_uses_not_only_missing_ones(
    client, backend, rita
):
    key = {"file_path": "test/test_ops.py", "class_name": "TestCommon"}
    make_proposal(backend, **key, test_name="test_calls_add")  # no evidence about add
    make_proposal(backend, **key, test_name="test_spans_add")
    make_proposal(backend, **key, test_name="test_calls_addmm")
    OpUsage.objects.create(**key, test_name="test_calls_add", op="add.Tensor", is_helper=True)
    OpUsage.objects.create(**key, test_name="test_calls_addmm", op="addmm.default")
    snapshot = InventorySnapshot.objects.create(pytorch_sha="a" * 40, root="/src")
    source = TestFile.objects.create(snapshot=snapshot, path=key["file_path"], content_hash="x")
    UpstreamTest.objects.create(
        file=source, class_name="TestCommon", test_name="test_spans_add", ops=["add", "sub"],
        content_hash="y",
    )  # fmt: skip
    body = queue(client, op="add").content.decode()
    assert "test_calls_add<" in body and "test_spans_add" in body
    assert "test_calls_addmm" not in body and "2 proposals match" in body
    assert "test_calls_add<" in queue(client, op="aten::add.Tensor").content.decode()


def test_a_human_edit_is_marked_with_who_and_when_apart_from_the_pipelines_own(
    client, backend, rita
):
    edited = make_proposal(backend, test_name="test_edited")
    make_proposal(backend, test_name="test_as_proposed")
    url = reverse("selection:proposal_edit", args=[edited.uuid])
    row = client.post(url, {"mode": "xfail", "reason": "fails on bf16"}, **HTMX).content.decode()
    assert "edited by rita, " in row
    assert (
        'class="badge badge-amber status-pending">pending</span></td>' in row
    )  # not "pending, rita": nobody decided
    page = queue(client).content.decode()
    assert page.count("edited by rita") == 1  # the pipeline's own proposal is not marked
    mark = page.split("test_edited")[1].split("</tr>")[0]
    assert "edited by rita" in mark
    client.post(
        reverse("selection:proposal_review", args=[edited.uuid]), {"decision": "approve"}, **HTMX
    )
    assert "edited by rita" in queue(client, status="approved").content.decode()  # still marked


def test_more_filters_are_folded_unless_one_of_them_is_set(client, backend, rita):
    make_proposal(backend)
    folded = queue(client, op="add").content.decode()
    assert '<details class="more-filters">' in folded and "More filters" in folded
    opened = queue(client, file="view_ops").content.decode()
    assert '<details class="more-filters" open>' in opened and "More filters (1 set)" in opened


DESCRIBED = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_ops.py
      tests:
        - names: [TestCommon::test_compare_cpu]
          mode: mandatory_success
          edits:
            ops:
              exclude:
                - name: lgamma
                  description: lgamma has no kernel <yet>.
  global:
    supported_dtypes:
      - {name: float16, description: the device's native type}
    supported_ops:
      - {name: torch.lgamma, description: lgamma runs through the CPU fallback.}
"""


def test_a_proposal_touching_an_op_or_dtype_shows_what_the_latest_config_says_of_it(
    client, backend, rita
):
    make_config(backend, DESCRIBED.replace("<yet>", "(an older version)"))
    make_config(backend, DESCRIBED)  # v3, the latest: its descriptions are shown
    excluding = {
        "ops": {"exclude": [{"name": "lgamma"}]},
        "dtypes": {"exclude": [{"name": "half"}]},
    }
    own = make_proposal(backend, file_path="test/test_ops.py", class_name="TestCommon",
                        test_name="test_compare_cpu", edits=excluding)  # fmt: skip
    other = make_proposal(backend, file_path="test/test_ops.py", class_name="TestCommon",
                          test_name="test_variant_consistency", edits=excluding)  # fmt: skip
    plain = make_proposal(backend, test_name="test_plain")
    body = queue(client).content.decode()
    config = reverse("selection:configversion_detail", args=["acme", 3])
    rows = {p: body.split(f'id="proposal-{p.uuid}"', 1)[1].split("</tr>", 1)[0] for p in (own, other, plain)}  # fmt: skip
    # Its own tests entry's description of the op (escaped), linked to the line saying it.
    assert (
        '<small class="described">op <code>lgamma</code>: lgamma has no kernel &lt;yet&gt;. '
        f'<a href="{config}#L10" title="edits.ops.exclude lgamma">(config)</a></small>'
    ) in rows[own]
    assert "older version" not in body
    # Another test: what the global list says of it (torch.lgamma is lgamma), and of half.
    assert "op <code>lgamma</code>: lgamma runs through the CPU fallback." in rows[other]
    assert (
        "dtype <code>half</code>: the device&#x27;s native type "
        f'<a href="{config}#L14" title="global.supported_dtypes float16">(config)</a>'
    ) in rows[other]
    assert "described" not in rows[plain]
    # The row an htmx approval answers says it too.
    url = reverse("selection:proposal_review", args=[own.uuid])
    row = client.post(url, {"decision": "approve"}, **HTMX).content.decode()
    assert "lgamma has no kernel &lt;yet&gt;." in row


def test_descriptions_cost_the_queue_the_same_queries_for_3_or_25_described_rows(
    client, backend, rita
):
    make_config(backend, DESCRIBED)
    edits = {"ops": {"exclude": [{"name": "lgamma"}]}}
    for n in range(3):
        make_proposal(backend, test_name=f"test_{n}", edits=edits)
    queue(client)  # the descriptions are read once, then kept in the cache
    with CaptureQueriesContext(connection) as few:
        assert queue(client).content.decode().count('class="described"') == 3
    for n in range(3, 40):
        make_proposal(backend, test_name=f"test_{n}", edits=edits)
    with CaptureQueriesContext(connection) as many:
        assert queue(client).content.decode().count('class="described"') == PAGE_SIZE
    assert len(many) == len(few)
