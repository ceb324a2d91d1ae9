"""GitHub's webhooks as GitHub sends them, through the signed endpoint: each is stored
with the columns the gate reads, and the default policy decides on it.

The project's own webhooks (tests/fixtures/webhooks/: one PyTorch PR's life and the
push that landed it) always run; PyTorch CI's real ones (shared/data/webhooks/) run
where that data is present, and are skipped otherwise.
"""

import hashlib
import hmac
import json
from typing import Any

import pytest

from runs.gate import Decision, Policy, decide
from runs.models import Backend, Dispatch
from tests.dispatches import webhook

pytestmark = pytest.mark.django_db

SECRET = "It's a Secret to Everybody"
NAMES = [
    "pull_request.opened",
    "pull_request.synchronize",
    "pull_request.labeled",
    "pull_request.closed",
    "pull_request.reopened",
    "push",
]
FIRST_HEAD = "3da1a1e300304abb5a9579f8f4a9a8575f976de4"
SECOND_HEAD = "521a8071c46350f0feb9f689732ad10f7e7c366c"
LANDED = "2bba70f6cb057b1e9159a14b7789287a6f655ef7"
LABELS = ["open source", "ciflow/trunk", "ciflow/inductor"]


@pytest.fixture
def signed_backend(backend) -> Backend:
    backend.webhook_secret = SECRET
    backend.save()
    return backend


def deliver(client, name: str, payload: dict[str, Any]) -> tuple[Dispatch, Decision]:
    """Post the webhook signed as GitHub does; the stored row and the gate's decision."""
    raw = json.dumps(payload).encode()
    signature = hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
    response = client.post(
        "/api/webhooks/github/acme/",
        data=raw,
        content_type="application/json",
        HTTP_X_GITHUB_EVENT=name.partition(".")[0],
        HTTP_X_GITHUB_DELIVERY=f"delivery-{name}",
        HTTP_X_HUB_SIGNATURE_256=f"sha256={signature}",
    )
    assert response.status_code == 202, response.content
    dispatch = Dispatch.objects.get()
    return dispatch, decide(Policy.for_backend(dispatch.backend), dispatch)


# What the intake stores (action, PR, base, head), the labels it reads, and the default
# policy's verdict and reason, for each of the project's webhooks.
EXPECTED = {
    "pull_request.opened": (("opened", 165432, "main", FIRST_HEAD), [],
                            "recorded", "PR #165432 was opened: only merged PRs are built"),
    "pull_request.synchronize": (("synchronize", 165432, "main", SECOND_HEAD), LABELS[:1],
                                 "recorded", "PR #165432 was synchronize: only merged PRs are built"),
    "pull_request.labeled": (("labeled", 165432, "main", SECOND_HEAD), LABELS,
                             "recorded", "PR #165432 was labeled: only merged PRs are built"),
    "pull_request.closed": (("closed", 165432, "main", SECOND_HEAD), [*LABELS, "Merged"],
                            "accepted", "PR #165432 merged into main (label Merged): "
                            "building the head of main"),
    "pull_request.reopened": (("reopened", 165432, "main", SECOND_HEAD),
                              [*LABELS, "Merged", "Reverted"],
                              "recorded", "PR #165432 was reopened: only merged PRs are built"),
    "push": (("push", None, "refs/heads/main", LANDED), [],
             "recorded", "pushes are not built by this backend's policy"),
}  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_each_event_of_a_prs_life_is_stored_and_only_the_merge_is_built(
    client, signed_backend, name
):
    stored, labels, verdict, reason = EXPECTED[name]

    dispatch, decision = deliver(client, name, webhook(name))

    assert (dispatch.action, dispatch.pr_number, dispatch.base_ref, dispatch.head_sha) == stored
    assert dispatch.labels == labels
    assert (decision.verdict, decision.reason) == (verdict, reason)


@pytest.mark.parametrize("name", NAMES)
def test_each_real_webhook_from_pytorch_ci_is_stored_and_gated(
    client, signed_backend, real_data, name
):
    payload = webhook(name, real_data / "webhooks")

    dispatch, decision = deliver(client, name, payload)

    if name == "push":
        assert (dispatch.base_ref, dispatch.head_sha) == (payload["ref"], payload["after"])
        assert payload["ref"] in decision.reason
    else:
        pull = payload["pull_request"]
        assert (dispatch.pr_number, dispatch.head_sha) == (pull["number"], pull["head"]["sha"])
        assert dispatch.labels == [label["name"] for label in pull["labels"]]
        assert f"PR #{pull['number']}" in decision.reason
    assert decision.verdict != Dispatch.Verdict.PENDING
