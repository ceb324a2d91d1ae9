"""The aggregate-mode bridge: one GitHub Actions job forwards a dispatch and reports to the HUD.

Runs as `python -m runs.relay.bridge` on a runner that has only Python's standard library, so it
imports nothing from Django. Steps:
1. read the dispatch's client_payload (`$GITHUB_EVENT_PATH` or `--payload`);
2. forward it to crcr (`POST /api/dispatches/?backend=…`; idempotent on delivery_id);
3. wait for the gate: `recorded`/`rejected` end here with nothing sent to the relay;
4. per run (one HUD job each), send `in_progress` with this job's identity; on a re-run of
   this Actions job (`GITHUB_RUN_ATTEMPT` 2 or more, an upstream "re-run failed jobs")
   the job follows crcr's same attempt of the run, which re-runs the failed shards;
5. poll the runs until they end or `--timeout` passes, then send `completed` with the
   counts and the run's page (`timed_out` for a run still going at the deadline).
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from runs.relay import delivery, protocol

OK, RUN_FAILED, USAGE, UNREACHABLE = 0, 1, 2, 3
FINISHED = ("passed", "failed", "cancelled", "timed_out", "error")
# crcr's run status → the HUD's conclusion (an infrastructure error is still a failure there).
CONCLUSIONS = {
    "passed": "success",
    "failed": "failure",
    "cancelled": "cancelled",
    "timed_out": "timed_out",
    "error": "failure",
}


class Exit(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def say(message: str) -> None:
    print(f"crcr-bridge: {message}", flush=True)


def fail(code: int, message: str) -> int:
    # `::error::` makes GitHub Actions show the line as an annotation on the run.
    prefix = "::error::" if os.environ.get("GITHUB_ACTIONS") == "true" else ""
    print(f"{prefix}crcr-bridge: {message}", file=sys.stderr, flush=True)
    return code


# --- delivery to the relay ----------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    outcome: Literal["delivered", "refused", "unreachable"]
    answer: delivery.Answer
    attempts: int


def deliver(
    url: str,
    body: Mapping[str, Any],
    tokens: delivery.TokenProvider,
    *,
    give_up_after: float = 900.0,
    base: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Delivery:
    """Send one callback until it lands, is refused, or `give_up_after` seconds pass.

    Steps: send; settle the answer (a repeat refused after a lost answer counts as landed);
    on `retry` wait the larger of the backoff and Retry-After, unless that passes the deadline.
    """
    deadline = clock() + give_up_after
    after_ambiguous = False
    attempt = 0
    while True:
        attempt += 1
        try:
            answer = delivery.send(url, body, tokens)
        except delivery.TokenError as error:
            if not error.retryable:
                raise
            answer = delivery.Answer(None, str(error), True)
        outcome = delivery.settle(answer, after_ambiguous=after_ambiguous)
        if outcome != "retry":
            return Delivery(outcome, answer, attempt)
        after_ambiguous = after_ambiguous or answer.ambiguous
        wait = max(delivery.backoff(attempt - 1, base), answer.retry_after or 0.0)
        if clock() + wait > deadline:
            return Delivery("unreachable", answer, attempt)
        say(f"relay answered {answer.describe()}; retrying in {wait:.1f}s")
        sleep(wait)


# --- crcr's API ---------------------------------------------------------------------------


class Crcr:
    """crcr's machine API with a `Token` header; transient failures are retried."""

    def __init__(self, base_url: str, token: str, retry_for: float, retry_base: float) -> None:
        self.base_url, self.token = base_url.rstrip("/"), token
        self.retry_for, self.retry_base = retry_for, retry_base

    def call(
        self, method: str, path: str, body: Any = None, *, expected: tuple[int, ...] = ()
    ) -> dict[str, Any]:
        """JSON from crcr; 4xx (but the `expected` ones, answered like a 2xx) raise Exit(2),
        lasting 5xx or network errors Exit(3)."""
        deadline = time.monotonic() + self.retry_for
        attempt = 0
        while True:
            status, text = self._once(method, path, body)
            if status is not None and (200 <= status < 300 or status in expected):
                try:
                    answer = json.loads(text)
                except ValueError:
                    raise Exit(UNREACHABLE, f"crcr answered {path} with non-JSON") from None
                return answer if isinstance(answer, dict) else {}
            if status is not None and status < 500 and status != 429:
                raise Exit(USAGE, f"crcr refused {method} {path}: {status} {text[:500]}")
            wait = delivery.backoff(attempt, self.retry_base, cap=60)
            attempt += 1
            if time.monotonic() + wait > deadline:
                raise Exit(UNREACHABLE, f"crcr unreachable at {self.base_url}: {status or text}")
            time.sleep(wait)

    def _once(self, method: str, path: str, body: Any) -> tuple[int | None, str]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Authorization", f"Token {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")
        except OSError as error:
            return None, f"network error: {getattr(error, 'reason', error)}"


# --- the job ------------------------------------------------------------------------------


@dataclass
class Job:
    """One HUD job: one crcr run reported under this Actions job's identity."""

    run: str
    name: str
    started_at: datetime
    done: bool = False
    conclusion: str | None = None


class Bridge:
    def __init__(self, args: argparse.Namespace, client_payload: dict[str, Any]) -> None:
        self.args, self.client_payload = args, client_payload
        self.crcr = Crcr(args.crcr, args.crcr_token, args.crcr_retry_for, args.retry_base)
        self.tokens = delivery.provider_from_spec(args.relay_token)
        self.jobs: dict[str, Job] = {}
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
        self._start_jobs(self._runs_of(dispatch))
        while not all(job.done for job in self.jobs.values()):
            for job in self.jobs.values():
                if not job.done:
                    self._check(job)
            if all(job.done for job in self.jobs.values()):
                break
            if time.monotonic() >= deadline:
                for job in self.jobs.values():
                    if not job.done:
                        self._finish(job, None, "timed_out")
                break
            self._pause(deadline)
            self._start_jobs(self._runs_of(self.crcr.call("GET", f"/api/dispatches/{uuid}/")))
        failed = [job.name for job in self.jobs.values() if job.conclusion != "success"]
        if failed:
            return fail(RUN_FAILED, "not successful: " + ", ".join(failed))
        say("every run succeeded")
        return OK

    def _runs_of(self, dispatch: dict[str, Any]) -> list[str]:
        runs = dispatch.get("runs") or []
        return [str(run["uuid"] if isinstance(run, dict) else run) for run in runs]

    def _pause(self, deadline: float) -> None:
        time.sleep(max(0.0, min(self.args.poll_interval, deadline - time.monotonic())))

    def _start_jobs(self, runs: list[str]) -> None:
        """Send `in_progress` for each run not yet reported, named apart when there are several."""
        new = [run for run in runs if run not in self.jobs]
        several = len(runs) > 1 or bool(self.jobs)
        for run in new:
            name = self.args.job_name
            if several:
                detail = self.crcr.call("GET", f"/api/runs/{run}/")
                name = f"{name}/{(detail.get('job_name') or run[:8])[:100]}"
            job = Job(self._attempt(run), name, datetime.now(UTC))
            self._send(job, "in_progress")
            self.jobs[run] = job

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

    def _check(self, job: Job) -> None:
        run = self.crcr.call("GET", f"/api/runs/{job.run}/")
        status = run.get("status")
        if status in FINISHED:
            self._finish(job, run, CONCLUSIONS[status])

    def _finish(self, job: Job, run: dict[str, Any] | None, conclusion: str) -> None:
        run = run or {}
        job.conclusion = self._send(job, "completed", conclusion, run)
        job.done = True

    def _send(
        self, job: Job, status: protocol.Status, conclusion: str | None = None, run: Any = None
    ) -> str | None:
        """Build, deliver and report one callback; returns the conclusion it carried."""
        a = self.args
        run = run or {}
        page = run.get("url")
        body = protocol.build_callback(
            self.client_payload,
            status=status,
            conclusion=conclusion,
            name=a.workflow_name,
            url=a.workflow_url or (page and urllib.parse.urljoin(a.crcr + "/", page)) or a.crcr,
            run_id=a.run_id,
            run_attempt=a.run_attempt,
            job_name=job.name,
            check_run_id=a.check_run_id or f"{a.run_id}-{a.run_attempt}",
            started_at=job.started_at,
            test_results=run.get("test_results"),
            artifact_url=page and urllib.parse.urljoin(a.crcr + "/", page),
        )
        sent = deliver(
            a.relay_url, body, self.tokens, give_up_after=a.relay_retry_for, base=a.retry_base
        )
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


# --- the command line ---------------------------------------------------------------------


def duration(text: str) -> float:
    """Seconds from `90`, `45s`, `30m` or `3h`."""
    units = {"s": 1, "m": 60, "h": 3600}
    scale = units.get(text[-1:].lower(), 1)
    number = text[:-1] if text[-1:].lower() in units else text
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("a duration must be positive")
    return value


def actions_run_url() -> str | None:
    """This GitHub Actions run's page, from the runner's environment."""
    env = os.environ.get
    server, repository, run_id = (
        env("GITHUB_SERVER_URL"),
        env("GITHUB_REPOSITORY"),
        env("GITHUB_RUN_ID"),
    )
    return (
        f"{server}/{repository}/actions/runs/{run_id}" if server and repository and run_id else None
    )


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """The options the bridge and the reporter share: crcr, the relay, this Actions run."""
    env = os.environ.get
    p.add_argument("--crcr", default=env("CRCR_URL"), help="crcr's base URL [CRCR_URL]")
    p.add_argument("--crcr-token-file", help="file holding crcr's API token [else CRCR_TOKEN]")
    p.add_argument(
        "--backend", default=env("CRCR_BACKEND"), help="crcr backend slug [CRCR_BACKEND]"
    )
    p.add_argument("--relay-url", default=env("RELAY_URL"), help="relay callback URL [RELAY_URL]")
    p.add_argument(
        "--relay-token",
        default=env("RELAY_TOKEN", "oidc"),
        help="oidc | file:/path | none [RELAY_TOKEN, default oidc]",
    )
    p.add_argument("--workflow-name", default=env("GITHUB_WORKFLOW"), help="[GITHUB_WORKFLOW]")
    p.add_argument("--workflow-url", default=actions_run_url(), help="[this Actions run's page]")
    p.add_argument("--run-id", default=env("GITHUB_RUN_ID"), help="[GITHUB_RUN_ID]")
    p.add_argument(
        "--run-attempt", default=env("GITHUB_RUN_ATTEMPT", "1"), help="[GITHUB_RUN_ATTEMPT]"
    )
    p.add_argument("--retry-base", type=duration, default=2.0, help="backoff base in seconds")


def read_crcr_token(args: argparse.Namespace) -> str:
    """crcr's API token: the file named by --crcr-token-file, else $CRCR_TOKEN."""
    if not args.crcr_token_file:
        return os.environ.get("CRCR_TOKEN", "").strip()
    try:
        with open(args.crcr_token_file) as handle:
            return handle.read().strip()
    except OSError as error:
        raise Exit(USAGE, f"cannot read {args.crcr_token_file}: {error}") from None


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
    missing = [name for name, value in required.items() if not value]
    if missing:
        raise Exit(USAGE, "missing " + ", ".join(missing) + " (see --help)")
    if not args.forward_only and not (
        str(args.run_id).isdigit() and str(args.run_attempt).isdigit()
    ):
        raise Exit(USAGE, "--run-id and --run-attempt must be numbers")
    args.crcr = args.crcr.rstrip("/")
    try:
        delivery.provider_from_spec(args.relay_token)
    except ValueError as error:
        raise Exit(USAGE, str(error)) from None


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
