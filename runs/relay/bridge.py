"""The bridge: one GitHub Actions job forwards a dispatch and reports its runs to the HUD.

Runs as `python -m runs.relay.bridge` on a runner that has only Python's standard library, so it
imports nothing from Django. Steps:
1. read the dispatch's client_payload (`$GITHUB_EVENT_PATH` or `--payload`);
2. forward it to crcr (`POST /api/dispatches/?backend=…`; idempotent on delivery_id);
3. wait for the gate: `recorded`/`rejected` end here with nothing sent to the relay;
4. follow each run: on a re-run of this Actions job (`GITHUB_RUN_ATTEMPT` 2 or more, an
   upstream "re-run failed jobs") crcr's same attempt of it, which re-runs the failed
   shards (`POST /api/runs/<uuid>/attempts/`);
5. poll the runs' HUD jobs (`hud_jobs` of `GET /api/runs/<uuid>/`: the run in aggregate
   mode, each shard in per-job mode) and send, under this Actions job's identity, each
   job's `in_progress` when it starts and its `completed` when it ends, with crcr's
   conclusion, counts, failure details, triage verdict and run page; at `--timeout`
   every job still open is reported `timed_out`.
Exit codes: 0 success, 1 a run did not succeed, 2 usage/configuration error or a refused
callback, 3 relay or crcr unreachable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runs.relay import delivery, protocol
from runs.relay.actions import (
    OK,
    RUN_FAILED,
    UNREACHABLE,
    USAGE,
    Crcr,
    Exit,
    add_common_arguments,
    check_options,
    deliver,
    duration,
    failure,
    read_crcr_token,
)

FINISHED = ("passed", "failed", "cancelled", "timed_out", "error")


def say(message: str) -> None:
    print(f"crcr-bridge: {message}", flush=True)


def fail(code: int, message: str) -> int:
    return failure("crcr-bridge", code, message)


# --- the job ------------------------------------------------------------------------------


@dataclass
class Job:
    """One HUD job: a crcr run (aggregate mode) or one of its shards (per-job mode), reported
    under this Actions job's identity."""

    name: str
    check_run_id: str
    started_at: datetime
    done: bool = False
    conclusion: str | None = None


@dataclass
class Followed:
    """A run of the dispatch: the crcr run reported for it (on a re-run of this Actions job,
    crcr's attempt of that number) and its HUD jobs, by shard (None: the run itself)."""

    run: str
    name: str
    page: str
    jobs: dict[int | None, Job]
    finished: bool = False


class Bridge:
    def __init__(self, args: argparse.Namespace, client_payload: dict[str, Any]) -> None:
        self.args, self.client_payload = args, client_payload
        self.crcr = Crcr(args.crcr, args.crcr_token, args.crcr_retry_for, args.retry_base)
        self.tokens = delivery.provider_from_spec(args.relay_token)
        self.followed: dict[str, Followed] = {}
        self.ignored_noted = False

    def run(self) -> int:
        deadline = time.monotonic() + self.args.timeout
        backend = urllib.parse.quote(self.args.backend)
        dispatch = self.crcr.call(
            "POST", f"/api/dispatches/?backend={backend}", self.client_payload
        )
        uuid = dispatch.get("uuid")
        if not uuid:
            raise Exit(UNREACHABLE, "crcr's answer to the dispatch has no uuid")
        say(f"forwarded delivery {self.client_payload['delivery_id']} to crcr: dispatch {uuid}")
        while not self._runs_of(dispatch):
            verdict = dispatch.get("verdict")
            if verdict in ("recorded", "rejected"):
                reason = dispatch.get("verdict_reason") or ""
                say(f"the gate {verdict} the dispatch ({reason}); nothing to report to the HUD")
                return OK
            if time.monotonic() >= deadline:
                waited = f"{self.args.timeout:.0f}s (verdict: {verdict})"
                return fail(RUN_FAILED, f"no run to report after {waited}; nothing sent")
            self._pause(deadline)
            dispatch = self.crcr.call("GET", f"/api/dispatches/{uuid}/")
        self._follow(self._runs_of(dispatch))
        while True:
            for followed in self.followed.values():
                if not followed.finished:
                    self._check(followed)
            if all(followed.finished for followed in self.followed.values()):
                break
            if time.monotonic() >= deadline:
                self._time_out()
                break
            self._pause(deadline)
            self._follow(self._runs_of(self.crcr.call("GET", f"/api/dispatches/{uuid}/")))
        jobs = [job for followed in self.followed.values() for job in followed.jobs.values()]
        failed = [job.name for job in jobs if job.conclusion != "success"]
        if failed:
            return fail(RUN_FAILED, "not successful: " + ", ".join(failed))
        say("every HUD job succeeded")
        return OK

    def _runs_of(self, dispatch: dict[str, Any]) -> list[str]:
        runs = dispatch.get("runs") or []
        return [str(run["uuid"] if isinstance(run, dict) else run) for run in runs]

    def _pause(self, deadline: float) -> None:
        time.sleep(max(0.0, min(self.args.poll_interval, deadline - time.monotonic())))

    def _follow(self, runs: list[str]) -> None:
        """Follow each run not followed yet, its HUD jobs named apart when there are several."""
        new = [run for run in runs if run not in self.followed]
        several = len(runs) > 1 or bool(self.followed)
        for run in new:
            name = self.args.job_name
            if several:
                detail = self.crcr.call("GET", f"/api/runs/{run}/")
                name = f"{name}/{(detail.get('job_name') or run[:8])[:100]}"
            self.followed[run] = Followed(self._attempt(run), name, "", {})

    def _attempt(self, run: str) -> str:
        """The run this job follows: on a re-run of the job (run_attempt 2 or more) crcr's
        same attempt of it, which re-runs the shards that failed before."""
        number = int(self.args.run_attempt)
        if number == 1:
            return run
        attempt = self.crcr.call("POST", f"/api/runs/{run}/attempts/", {"run_attempt": number})
        followed = str(attempt["uuid"])
        if attempt.get("run_attempt") == number:
            say(f"attempt {number} of run {run}: run {followed} re-runs what failed")
        else:
            say(f"attempt {number} of run {run}: nothing to re-run, reporting run {followed}")
        return followed

    def _check(self, followed: Followed) -> None:
        """Report what changed in the run's HUD jobs: in_progress for each that started,
        completed (crcr's conclusion, counts, failures and verdict) for each that ended."""
        run = self.crcr.call("GET", f"/api/runs/{followed.run}/")
        followed.page = urllib.parse.urljoin(self.args.crcr + "/", run.get("url") or "")
        for entry in run.get("hud_jobs") or []:
            if entry["state"] == "waiting":
                continue
            job = followed.jobs.get(entry["shard"]) or self._start(followed, entry)
            if entry["state"] == "finished" and not job.done:
                self._finish(job, followed, entry["result"])
        ended = run.get("status") in FINISHED
        followed.finished = ended and all(job.done for job in followed.jobs.values())

    def _start(self, followed: Followed, entry: dict[str, Any]) -> Job:
        shard, a = entry["shard"], self.args
        check = a.check_run_id or f"{a.run_id}-{a.run_attempt}"
        job = Job(
            name=followed.name if shard is None else f"{followed.name} / shard {shard}",
            check_run_id=check if shard is None else f"{check}-shard-{shard}",
            started_at=_parse_time(entry.get("started_at")) or datetime.now(UTC),
        )
        self._send(job, followed, "in_progress", {})
        followed.jobs[shard] = job
        return job

    def _finish(self, job: Job, followed: Followed, result: dict[str, Any]) -> None:
        job.conclusion = self._send(job, followed, "completed", result)
        job.done = True

    def _time_out(self) -> None:
        """At --timeout every HUD job still open is reported `timed_out`."""
        for followed in self.followed.values():
            for job in followed.jobs.values():
                if not job.done:
                    self._finish(job, followed, {"conclusion": "timed_out"})

    def _send(
        self, job: Job, followed: Followed, status: protocol.Status, result: dict[str, Any]
    ) -> str | None:
        """Build, deliver and report one callback; returns the conclusion it carried."""
        a = self.args
        fields = {key: value for key, value in result.items() if value is not None}
        fields.setdefault("artifact_url", followed.page or None)
        body = protocol.build_callback(
            self.client_payload,
            status=status,
            name=a.workflow_name,
            url=a.workflow_url or followed.page or a.crcr,
            run_id=a.run_id,
            run_attempt=a.run_attempt,
            job_name=job.name,
            check_run_id=job.check_run_id,
            started_at=job.started_at,
            **fields,
        )
        sent = deliver(
            a.relay_url, body, self.tokens,
            give_up_after=a.relay_retry_for, base=a.retry_base, note=say, turn=self._turn,
        )  # fmt: skip
        what = f"{status} for {job.name}"
        if sent.outcome == "refused":
            raise Exit(USAGE, f"the relay refused {what}: {sent.answer.describe()}")
        if sent.outcome == "unreachable":
            raise Exit(UNREACHABLE, f"the relay did not take {what}: {sent.answer.describe()}")
        if sent.answer.ignored and not self.ignored_noted:
            self.ignored_noted = True
            say("the relay ignores this repository (below level L2): nothing reaches the HUD")
        if not sent.answer.ok:
            say(f"{what}: the relay had recorded an earlier attempt whose answer was lost")
        carried = body["workflow"]["conclusion"]
        say(f"sent {what}" + (f": {carried}" if carried else ""))
        return carried

    def _turn(self, last: delivery.Answer | None) -> float:
        """Seconds until this bridge's next send may go, from the repository's callback
        budget that crcr keeps for every sender; the relay's last answer goes along."""
        told = {"status": last.status, "retry_after": last.retry_after_header()} if last else {}
        backend = urllib.parse.quote(self.args.backend)
        answer = self.crcr.call("POST", f"/api/relay/turn/?backend={backend}", told)
        return float(answer.get("wait") or 0.0)


def _parse_time(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


# --- the command line ---------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(
        prog="python -m runs.relay.bridge",
        description="Forward a CRCR dispatch to crcr, follow its runs, report them to the relay.",
        epilog="Exit codes: 0 success, 1 a run did not succeed, 2 usage/configuration error "
        "or a refused callback, 3 relay or crcr unreachable.",
    )
    add_common_arguments(p)
    p.add_argument("--payload", help="client_payload JSON file [default: $GITHUB_EVENT_PATH]")
    p.add_argument("--job-name", default=env("GITHUB_JOB"), help="[GITHUB_JOB]")
    p.add_argument(
        "--check-run-id",
        default=env("CRCR_CHECK_RUN_ID"),
        help="[CRCR_CHECK_RUN_ID; job.check_run_id]",
    )
    p.add_argument("--timeout", type=duration, default=3 * 3600.0, help="e.g. 3h (default)")
    p.add_argument("--poll-interval", type=duration, default=30.0, help="seconds (default 30)")
    p.add_argument("--relay-retry-for", type=duration, default=900.0, help="seconds (default 900)")
    p.add_argument("--crcr-retry-for", type=duration, default=600.0, help="seconds (default 600)")
    p.add_argument("--forward-only", action="store_true", help="forward the dispatch and stop")
    return p


def _client_payload(path: str | None) -> dict[str, Any]:
    source = path or os.environ.get("GITHUB_EVENT_PATH")
    if not source:
        raise Exit(USAGE, "no dispatch: pass --payload or run on repository_dispatch")
    try:
        with open(source) as handle:
            document = json.load(handle)
    except (OSError, ValueError) as error:
        raise Exit(USAGE, f"cannot read the dispatch from {source}: {error}") from None
    if not path and isinstance(document, dict):
        document = document.get("client_payload")  # the event file wraps it
    if not isinstance(document, dict) or any(
        key not in document for key in ("event_type", "delivery_id", "payload")
    ):
        raise Exit(USAGE, f"{source} holds no client_payload with event_type, delivery_id, payload")
    return document


def _check(args: argparse.Namespace) -> None:
    args.crcr_token = read_crcr_token(args)
    required = {"--crcr": args.crcr, "--backend": args.backend, "crcr token": args.crcr_token}
    if not args.forward_only:
        required |= {
            "--relay-url": args.relay_url,
            "--job-name": args.job_name,
            "--workflow-name": args.workflow_name,
            "--run-id": args.run_id,
        }
    check_options(args, required, numbered=not args.forward_only)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        _check(args)
        client_payload = _client_payload(args.payload)
        bridge = Bridge(args, client_payload)
        if args.forward_only:
            backend = urllib.parse.quote(args.backend)
            answer = bridge.crcr.call("POST", f"/api/dispatches/?backend={backend}", client_payload)
            say(
                f"forwarded delivery {client_payload['delivery_id']}: dispatch {answer.get('uuid')}"
            )
            return OK
        return bridge.run()
    except Exit as error:
        return fail(error.code, str(error))
    except delivery.TokenError as error:
        return fail(USAGE, f"no relay token: {error}")
    except ValueError as error:  # a body build_callback could not make from crcr's answer
        return fail(USAGE, f"cannot build a callback: {error}")


if __name__ == "__main__":
    sys.exit(main())
