"""Dispatches through HTTP, gated by a real Celery worker, against the configured database."""

from concurrent.futures import ThreadPoolExecutor

from runs.models import Dispatch, Run, Trigger
from tests.dispatches import pr_dispatch, push_dispatch
from tests.waiting import wait_for


def verdict_of(delivery_id: str, settled=("accepted", "recorded", "rejected")) -> Dispatch:
    def probe():
        dispatch = Dispatch.objects.filter(delivery_id=delivery_id).first()
        return dispatch if dispatch and dispatch.verdict in settled else None

    return wait_for(probe, what=f"a verdict on {delivery_id}")


def test_a_merged_pr_into_main_builds_mains_current_head(http, backend, upstream, celery_worker):
    body = pr_dispatch(labels=("Merged", "ciflow/trunk"))
    status, answer = http.post("/api/dispatches/", body)
    assert status == 202
    assert answer["url"] == f"/api/dispatches/{answer['uuid']}/"
    dispatch = verdict_of(body["delivery_id"])
    assert dispatch.verdict == "accepted"
    main_head = upstream.head("main")
    assert main_head != dispatch.head_sha
    run = Run.objects.get(trigger__dispatch=dispatch)
    assert run.pytorch_sha == main_head
    assert run.job_name == "acme" and run.config_version.number == 1
    wait_for(lambda: run.artifacts.count() == 2, what="planning to register the artifacts")
    assert {a.kind for a in run.artifacts.all()} == {"pytorch", "backend"}
    assert (
        "merged into main" in dispatch.verdict_reason and main_head[:12] in dispatch.verdict_reason
    )


def test_a_closed_pr_without_the_label_is_rechecked_then_rejected(
    http, backend, upstream, celery_worker
):
    body = pr_dispatch(labels=())
    assert http.post("/api/dispatches/", body)[0] == 202
    recheck = verdict_of(body["delivery_id"], settled=("recheck", "rejected"))
    assert recheck.recheck_at is not None or recheck.verdict == "rejected"
    dispatch = verdict_of(body["delivery_id"], settled=("rejected", "accepted"))
    assert dispatch.verdict == "rejected"
    assert "closed without merging" in dispatch.verdict_reason
    assert "no Merged label" in dispatch.verdict_reason
    assert not Trigger.objects.exists()


def test_a_closed_pr_that_landed_without_the_label_is_built_after_the_recheck(
    http, backend, upstream, celery_worker
):
    landed = upstream.land(4242)
    body = pr_dispatch(labels=(), number=4242)
    assert http.post("/api/dispatches/", body)[0] == 202
    dispatch = verdict_of(body["delivery_id"], settled=("rejected", "accepted"))
    assert dispatch.verdict == "accepted"
    assert "landed on main without the Merged label" in dispatch.verdict_reason
    assert Run.objects.get(trigger__dispatch=dispatch).pytorch_sha == landed


def test_a_merged_pr_into_the_tracked_release_builds_the_release_head(
    http, backend, upstream, celery_worker
):
    body = pr_dispatch(base="release/2.14")
    assert http.post("/api/dispatches/", body)[0] == 202
    dispatch = verdict_of(body["delivery_id"])
    assert dispatch.verdict == "accepted"
    run = Run.objects.get(trigger__dispatch=dispatch)
    assert run.pytorch_sha == upstream.head("release/2.14")


def test_a_merged_pr_into_an_untracked_release_is_rejected(http, backend, upstream, celery_worker):
    body = pr_dispatch(base="release/2.13")
    assert http.post("/api/dispatches/", body)[0] == 202
    dispatch = verdict_of(body["delivery_id"])
    assert dispatch.verdict == "rejected"
    assert "release/2.13" in dispatch.verdict_reason and "not built" in dispatch.verdict_reason


def test_opened_and_synchronized_prs_are_recorded_not_built(http, backend, upstream, celery_worker):
    for action in ("opened", "synchronize", "reopened"):
        body = pr_dispatch(action=action, labels=())
        assert http.post("/api/dispatches/", body)[0] == 202
        dispatch = verdict_of(body["delivery_id"])
        assert dispatch.verdict == "recorded"
        assert f"was {action}: only merged PRs are built" in dispatch.verdict_reason
    assert not Run.objects.exists()


def test_a_push_follows_the_policy(http, backend, upstream, celery_worker):
    body = push_dispatch()
    assert http.post("/api/dispatches/", body)[0] == 202
    assert verdict_of(body["delivery_id"]).verdict == "recorded"

    backend.gate_policy = {"build_pushes": True, "push_branches": ["main"]}
    backend.save()
    body = push_dispatch()
    assert http.post("/api/dispatches/", body)[0] == 202
    dispatch = verdict_of(body["delivery_id"])
    assert dispatch.verdict == "accepted"
    assert Run.objects.get(trigger__dispatch=dispatch).pytorch_sha == "1" * 40


def test_twenty_concurrent_deliveries_make_one_dispatch_and_one_run(
    http, backend, upstream, celery_worker
):
    body = pr_dispatch()
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda _: http.post("/api/dispatches/", body), range(20)))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] * 19 + [202]
    assert len({answer["uuid"] for _, answer in answers}) == 1
    verdict_of(body["delivery_id"])
    wait_for(lambda: Run.objects.exists(), what="the run")
    assert Dispatch.objects.count() == 1
    assert Run.objects.count() == 1
