"""The gate: a declarative, per-backend policy that decides which dispatches are built.

Default policy, as an accelerator team runs it: build PRs merged into `main` or
the tracked `release/X.Y`; "merged" means `action == closed` and the `Merged`
label (PyTorch merges with a bot, so `pull_request.merged` is unreliable); a
closed PR without the label is re-checked upstream after a delay before it is
rejected for good; other actions are recorded, not built; pushes are not built, but
a nightly-only backend builds a nightly dispatch's source commit.
The SHA built for a merged PR is the current head of its base branch.
"""

from dataclasses import dataclass, fields
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from runs import triggers
from runs.combinations import CombinationError
from runs.models import Backend, Dispatch, Trigger
from runs.upstream import Resolver, UpstreamError, get_resolver, nightly_source

V = Dispatch.Verdict


@dataclass(frozen=True)
class Policy:
    build_actions: tuple[str, ...] = ("closed",)
    base_branches: tuple[str, ...] = ("main",)
    merged_only: bool = True
    merged_label: str = "Merged"
    build_pushes: bool = False
    push_branches: tuple[str, ...] = ("main",)
    recheck_delay_seconds: int = 300

    @classmethod
    def for_backend(cls, backend: Backend) -> "Policy":
        """The backend's policy; its tracked release branch is always a base branch."""
        overrides = dict(backend.gate_policy or {})
        known = {field.name: field for field in fields(cls)}
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise ValueError(f"gate_policy has unknown keys: {', '.join(unknown)}")
        for name, value in list(overrides.items()):
            if isinstance(value, list):
                overrides[name] = tuple(value)
            default_type = type(getattr(cls, name))
            if not isinstance(overrides[name], default_type):
                raise ValueError(f"gate_policy.{name} must be a {default_type.__name__}")
        policy = cls(**overrides)
        if backend.tracked_release and backend.tracked_release not in policy.base_branches:
            branches = (*policy.base_branches, backend.tracked_release)
            policy = cls(**{**overrides, "base_branches": branches})
        return policy


@dataclass(frozen=True)
class Decision:
    verdict: str
    reason: str
    build_ref: str = ""  # build this branch's current head …
    build_sha: str = ""  # … or exactly this SHA


def decide(policy: Policy, dispatch: Dispatch) -> Decision:
    """The verdict for a dispatch, from the policy and the payload alone."""
    if dispatch.event_type == "push":
        return _decide_push(policy, dispatch)
    number, base, action = dispatch.pr_number, dispatch.base_ref, dispatch.action
    tracked = ", ".join(policy.base_branches)
    if base not in policy.base_branches:
        return Decision(V.REJECTED, f"PR #{number} targets {base}, which is not built ({tracked})")
    if action not in policy.build_actions:
        return Decision(V.RECORDED, f"PR #{number} was {action}: only merged PRs are built")
    if action != "closed":
        return Decision(V.ACCEPTED, f"PR #{number} was {action}", build_sha=dispatch.head_sha)
    if policy.merged_only and policy.merged_label not in dispatch.labels:
        return Decision(
            V.RECHECK,
            f"PR #{number} was closed without the {policy.merged_label} label: "
            f"re-checking upstream in {policy.recheck_delay_seconds} s whether it landed",
        )
    return Decision(
        V.ACCEPTED,
        f"PR #{number} merged into {base} (label {policy.merged_label}): "
        f"building the head of {base}",
        build_ref=base,
    )


def _decide_push(policy: Policy, dispatch: Dispatch) -> Decision:
    ref = dispatch.base_ref
    if dispatch.payload.get("deleted"):
        return Decision(V.RECORDED, f"push deleted {ref}: nothing to build")
    if dispatch.kind == "nightly" and dispatch.backend.nightly_only:
        return _decide_nightly(dispatch)
    if not policy.build_pushes:
        return Decision(V.RECORDED, "pushes are not built by this backend's policy")
    branch = ref.removeprefix("refs/heads/")
    if not ref.startswith("refs/heads/") or branch not in policy.push_branches:
        return Decision(V.RECORDED, f"push to {ref} is not on a built branch")
    return Decision(V.ACCEPTED, f"push to {branch}", build_sha=dispatch.head_sha)


def _decide_nightly(dispatch: Dispatch) -> Decision:
    """A nightly-only backend builds each nightly dispatch: the source commit its nightly
    commit names (as the beat's nightly does)."""
    head = dispatch.head_sha
    message = (dispatch.payload.get("head_commit") or {}).get("message") or ""
    try:
        source = nightly_source(head, str(message))
    except UpstreamError as error:
        return Decision(V.REJECTED, f"nightly not built: {error}")
    if triggers.nightly_built(dispatch.backend, source):
        return Decision(V.RECORDED, f"nightly {head[:12]}: its source {source[:12]} is built")
    return Decision(
        V.ACCEPTED, f"nightly {head[:12]}: building its source commit", build_sha=source
    )


def gate(dispatch_id: int, resolver: Resolver | None = None) -> Dispatch:
    """Evaluate a pending dispatch; accept (trigger + runs), record, reject or re-check."""
    dispatch = Dispatch.objects.select_related("backend").get(pk=dispatch_id)
    if dispatch.verdict != V.PENDING:
        return dispatch  # a redelivered task: the verdict is already taken
    decision = decide(Policy.for_backend(dispatch.backend), dispatch)
    if decision.verdict == V.ACCEPTED:
        _accept(dispatch, decision, resolver or get_resolver(), expected=(V.PENDING,))
    elif decision.verdict == V.RECHECK:
        _schedule_recheck(dispatch, decision)
    else:
        dispatch.decide(decision.verdict, decision.reason, expected=(V.PENDING,))
    return dispatch


def recheck(dispatch_id: int, resolver: Resolver | None = None) -> Dispatch:
    """Ask upstream whether a closed-without-label PR landed; accept it or reject for good."""
    dispatch = Dispatch.objects.select_related("backend").get(pk=dispatch_id)
    if dispatch.verdict != V.RECHECK:
        return dispatch
    resolver = resolver or get_resolver()
    number, base = dispatch.pr_number or 0, dispatch.base_ref
    checked = timezone.now().strftime("%Y-%m-%d %H:%M UTC")
    if resolver.pr_landed(number, base):
        reason = f"PR #{number} landed on {base} without the Merged label (found at {checked})"
        _accept(dispatch, Decision(V.ACCEPTED, reason, build_ref=base), resolver, (V.RECHECK,))
    else:
        reason = (
            f"PR #{number} was closed without merging: no Merged label, and it had not "
            f"landed on {base} when re-checked at {checked}"
        )
        dispatch.decide(V.REJECTED, reason, expected=(V.RECHECK,))
    return dispatch


def _accept(
    dispatch: Dispatch, decision: Decision, resolver: Resolver, expected: tuple[str, ...]
) -> None:
    sha = decision.build_sha or resolver.branch_head(decision.build_ref)
    reason = f"{decision.reason} ({sha[:12]})" if decision.build_ref else decision.reason
    try:
        with transaction.atomic():
            # The verdict and the trigger commit together, so a dispatch is built once.
            if dispatch.decide(V.ACCEPTED, reason, expected=expected):
                triggers.start(
                    dispatch.backend,
                    Trigger.Kind.DISPATCH,
                    sha,
                    ref=decision.build_ref or dispatch.base_ref,
                    dispatch=dispatch,
                )
    except CombinationError as error:
        # Nothing to build with yet (no config version): keep the event, say why.
        dispatch.decide(V.RECORDED, f"{reason}; not built: {error}", expected=expected)


def _schedule_recheck(dispatch: Dispatch, decision: Decision) -> None:
    from runs.tasks import recheck_dispatch

    delay = Policy.for_backend(dispatch.backend).recheck_delay_seconds
    with transaction.atomic():
        if dispatch.decide(V.RECHECK, decision.reason, expected=(V.PENDING,)):
            recheck_at = timezone.now() + timedelta(seconds=delay)
            Dispatch.objects.filter(pk=dispatch.pk).update(recheck_at=recheck_at)
            transaction.on_commit(
                lambda: recheck_dispatch.apply_async((dispatch.pk,), countdown=delay)
            )


def lost(before: datetime) -> tuple[list[int], list[int]]:
    """Dispatches whose gate message never arrived: still pending, or still waiting
    for a re-check that was due, since `before` (ids to gate, ids to re-check)."""
    stored = Dispatch.objects.filter(received_at__lt=before)
    ungated = stored.filter(verdict=V.PENDING).values_list("pk", flat=True)
    overdue = stored.filter(verdict=V.RECHECK, recheck_at__lt=before).values_list("pk", flat=True)
    return list(ungated), list(overdue)


def describe(policy: Policy) -> dict[str, str]:
    """The policy in words, as the dispatch page shows it."""
    yes_no = {True: "yes", False: "no"}
    return {
        "Builds pull requests on": ", ".join(policy.build_actions) or "no action",
        "Into the branches": ", ".join(policy.base_branches) or "none",
        "Only merged pull requests": yes_no[policy.merged_only],
        "Label that marks a merge": policy.merged_label or "none",
        "Builds pushes": yes_no[policy.build_pushes]
        + (f", to {', '.join(policy.push_branches)}" if policy.build_pushes else ""),
        "Re-checks a pending pull request after": f"{policy.recheck_delay_seconds} s",
    }
