"""A proposal's evidence read for its page, as sections a reviewer decides on.

- operators used: the operator index's rows for the test (under test or helper), with the
  ones the evidence says the device lacks marked; the evidence alone when never captured,
  and whether the capture ran it (`captured`), so an empty list says which it means;
- restrictions: the device restrictions the evidence (or the inventory) recorded;
- device result: stage 4's counts and its failures, each with the end of its log;
- similar tests: the tests of the same file closest in meaning (the inventory's stored
  embeddings), or, without embeddings, the other tests of its class and file, each with
  the proposal made for it on the same backend;
- the rest of the evidence, for the queue's own wording (`proposals.evidence`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from selection.models import OpUsage, Proposal, UpstreamTest

SIMILAR_SHOWN = 8
LOG_LINES = 12
# Evidence keys a section of the page shows; the others are listed as they are in the queue.
COVERED = frozenset(
    {
        "unsupported_ops",
        "waiting_on",
        "restrictions",
        "device",
        "cpu_failure",
        "capture",
        "captured",
    }
)


@dataclass
class Used:
    op: str
    helper: bool | None  # None: the operator index has no record of how it is used
    unsupported: bool

    @property
    def packet(self) -> str:
        """The operator without its overload, as the operators page names it."""
        return self.op.split(".", 1)[0]


@dataclass
class Similar:
    class_name: str
    test_name: str
    score: float | None  # cosine similarity of the summaries, when embeddings exist
    proposal: Proposal | None


@dataclass
class Sections:
    operators: list[Used]
    captured: bool | None  # whether the operator capture ran the test (None: not recorded)
    restrictions: list[str]
    device: dict[str, Any] | None
    failures: list[dict[str, Any]]
    cpu_failure: str
    capture: dict[str, Any] | None
    similar: list[Similar]
    other: dict[str, Any] = field(default_factory=dict)


def excerpt(log: str, lines: int = LOG_LINES) -> str:
    """The last `lines` non-empty lines of a log: where a traceback says what failed."""
    kept = [line for line in str(log).splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def sections(proposal: Proposal) -> Sections:
    ev = proposal.evidence or {}
    upstream = _upstream(proposal)
    device = ev.get("device") if isinstance(ev.get("device"), dict) else None
    failures = [
        failure
        | {
            "kind": str(failure.get("category") or "failure").replace("_", " "),
            "excerpt": excerpt(failure.get("message", "")),
        }
        for failure in (device or {}).get("failures") or []
        if isinstance(failure, dict)
    ]
    restrictions = ev.get("restrictions") or (upstream.device_restrictions if upstream else [])
    capture = ev.get("capture") if isinstance(ev.get("capture"), dict) else None
    return Sections(
        operators=operators(proposal),
        captured=ev["captured"] if isinstance(ev.get("captured"), bool) else None,
        restrictions=[str(item) for item in restrictions],
        device=device,
        failures=failures,
        cpu_failure=excerpt(ev.get("cpu_failure") or ""),
        capture=capture,
        similar=similar(proposal, upstream),
        other={key: value for key, value in ev.items() if key not in COVERED},
    )


def operators(proposal: Proposal) -> list[Used]:
    """Every operator the test uses, by name; an operator the index saw both as the one
    under test and as a helper counts as under test."""
    ev = proposal.evidence or {}
    unsupported = {str(op) for op in ev.get("unsupported_ops") or []}
    rows = OpUsage.objects.filter(
        file_path=proposal.file_path, class_name=proposal.class_name, test_name=proposal.test_name
    ).values_list("op", "is_helper")
    helper: dict[str, bool | None] = {}
    for op, is_helper in rows:
        helper[op] = bool(helper.get(op, True) and is_helper)
    for op in unsupported:
        helper.setdefault(op, None)
    packets = {op.split(".", 1)[0] for op in helper}
    for packet in ev.get("waiting_on") or []:
        if str(packet) not in packets:
            helper[str(packet)] = None
    missing = unsupported | {str(packet) for packet in ev.get("waiting_on") or []}
    return [
        Used(op, helper[op], op in missing or op.split(".", 1)[0] in missing)
        for op in sorted(helper, key=lambda op: (helper[op] is True, op))
    ]


def _upstream(proposal: Proposal) -> UpstreamTest | None:
    """The test as the newest inventory snapshot holding it read it."""
    return (
        UpstreamTest.objects.filter(
            file__path=proposal.file_path,
            class_name=proposal.class_name,
            test_name=proposal.test_name,
        )
        .order_by("-file__snapshot__created_at")
        .first()
    )


def similar(proposal: Proposal, upstream: UpstreamTest | None) -> list[Similar]:
    """Up to SIMILAR_SHOWN tests like this one, most alike first, with their proposals."""
    ranked: list[tuple[str, str, float | None]] = []
    if upstream is not None and upstream.embedding:
        from selection import embeddings  # numpy only: the stored vectors, no model

        others = list(
            upstream.file.tests.exclude(pk=upstream.pk)
            .exclude(embedding=None)
            .values_list("class_name", "test_name", "embedding")
        )
        scores = embeddings.similarities(bytes(upstream.embedding), [row[2] for row in others])
        best = sorted(zip(others, scores, strict=True), key=lambda pair: -pair[1])
        ranked = [(row[0], row[1], round(score, 2)) for row, score in best[:SIMILAR_SHOWN]]
    siblings = Proposal.objects.filter(backend=proposal.backend_id, file_path=proposal.file_path)
    if ranked:
        names = [name for _, name, _ in ranked]
        decided = {(p.class_name, p.test_name): p for p in siblings.filter(test_name__in=names)}
        return [Similar(c, t, score, decided.get((c, t))) for c, t, score in ranked]
    # Without embeddings: the tests next to it, its own class first.
    nearby = sorted(
        siblings.exclude(pk=proposal.pk).order_by("class_name", "test_name")[:200],
        key=lambda p: (p.class_name != proposal.class_name, p.class_name, p.test_name),
    )
    return [Similar(p.class_name, p.test_name, None, p) for p in nearby[:SIMILAR_SHOWN]]
