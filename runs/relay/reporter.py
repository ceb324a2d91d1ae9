"""The outbox reporter: a GitHub Actions job sends crcr's due HUD self-reports to the relay.

PyTorch's relay accepts only an OIDC token that a GitHub Actions job mints, and crcr's
workers hold none: for a backend whose callbacks GitHub Actions sends, the bridge job
(crcr-bridge.yml) reports dispatched runs, and the outbox holds only self-reports (one
`completed` per nightly, release or manual run). A scheduled workflow
(`runs/relay/workflows/crcr-report.yml`) sends those: it runs `python -m runs.relay.reporter`
on a runner that has only Python's standard library, so it imports nothing from Django. Steps:
1. mint an OIDC token for the relay's audience (outside Actions: a configuration error);
2. claim the backend's due callbacks from crcr on a lease, under this Actions run's
   identity (`POST /api/relay/claim/?backend=…`); crcr fixes each HUD job's identity at its
   first claim, so a resend goes out under the run that first claimed it;
3. send each body to the relay with a freshly minted token and write the relay's answer
   back (`POST /api/relay/callbacks/<uuid>/answer/`): crcr settles it as its own relay
   worker would (delivered, refused for good, or due again later);
4. claim again until nothing is due or `--drain-for` has passed; crcr hands out only what
   the repository's callback budget allows (shared with every other sender), and when it
   is spent says when the next turn comes: the reporter sleeps until then and claims again.
A reporter killed midway loses nothing: its lease runs out and the next claim resends.
Exit codes: 0 nothing left to send now, 2 usage/configuration error or a callback the relay
refused, 3 relay or crcr unreachable (crcr keeps what was not delivered and retries it).
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.parse
from collections import Counter
from typing import Any

from runs.relay import delivery
from runs.relay.actions import (
    Crcr,
    Exit,
    add_common_arguments,
    check_options,
    duration,
    failure,
    read_crcr_token,
)

OK, USAGE, UNREACHABLE = 0, 2, 3


def say(message: str) -> None:
    print(f"crcr-report: {message}", flush=True)


def fail(code: int, message: str) -> int:
    return failure("crcr-report", code, message)


class Reporter:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.crcr = Crcr(args.crcr, args.crcr_token, args.crcr_retry_for, args.retry_base)
        self.tokens = delivery.provider_from_spec(args.relay_token)
        self.identity = {
            "run_id": args.run_id,
            "run_attempt": args.run_attempt,
            "url": args.workflow_url,
            "workflow": args.workflow_name,
        }
        self.tally: Counter[str] = Counter()
        self.ignored_noted = False

    def run(self) -> int:
        self.tokens.token()  # fail fast: a job without `id-token: write` mints nothing
        deadline = time.monotonic() + self.args.drain_for
        path = f"/api/relay/claim/?backend={urllib.parse.quote(self.args.backend)}"
        while True:
            claimed_at = time.monotonic()
            claim = self.crcr.call(
                "POST", path, {"reporter": self.identity, "limit": self.args.batch}
            )
            callbacks = claim.get("callbacks") or []
            turn_in = claim.get("next_turn_in")
            if not callbacks and turn_in and time.monotonic() + turn_in < deadline:
                # The repository's callback budget is spent for now: wait for its turn.
                say(f"the callback budget is spent: claiming again in {turn_in:.1f}s")
                time.sleep(turn_in)
                continue
            if not callbacks:
                say(f"nothing due for backend {self.args.backend}")
                break
            lease = claim["lease"]
            say(f"claimed {len(callbacks)} callback(s) on a {lease['seconds']}s lease")
            lease_ends = claimed_at + float(lease["seconds"])
            for index, callback in enumerate(callbacks):
                left = min(lease_ends, deadline) - time.monotonic()
                if left < 1:
                    # Given back unsent: crcr counts no attempt, and the next claim sends them.
                    for rest in callbacks[index:]:
                        self._write_back(rest, lease["id"], None)
                    say(f"gave back {len(callbacks) - index} unsent callback(s): out of time")
                    break
                self._send(callback, lease["id"], timeout=min(self.args.send_timeout, left))
            if time.monotonic() >= deadline:
                say("--drain-for has passed: what is still due waits for the next run")
                break
        return self._summary()

    def _send(self, callback: dict[str, Any], lease: str, timeout: float) -> None:
        what = f"{callback['transition']} of {callback['job_name']}"
        try:
            answer = delivery.send(self.args.relay_url, callback["body"], self.tokens, timeout)
        except delivery.TokenError as error:
            self._write_back(callback, lease, None)  # nothing was sent
            code = UNREACHABLE if error.retryable else USAGE
            raise Exit(code, f"no relay token: {error}") from None
        state = self._write_back(callback, lease, answer)
        if state.get("lease_lost"):
            self.tally["lease lost"] += 1
            say(f"sent {what}: {answer.describe()}; the lease had run out, crcr settles it next")
            return
        outcome = {"delivered": "delivered", "rejected": "refused"}.get(state["status"], "retry")
        self.tally[outcome] += 1
        if answer.ignored and not self.ignored_noted:
            self.ignored_noted = True
            say("the relay ignores this repository (below level L2): nothing reaches the HUD")
        if outcome == "delivered" and not answer.ok:
            say(f"{what}: the relay had recorded an earlier attempt whose answer was lost")
        later = f", again after {state['next_attempt_at']}" if outcome == "retry" else ""
        say(f"sent {what}: {answer.describe()} -> {outcome}{later}")

    def _write_back(
        self, callback: dict[str, Any], lease: str, answer: delivery.Answer | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"lease": lease, "sent": answer is not None}
        if answer is not None:
            body |= {
                "status": answer.status,
                "text": answer.text[:4000],
                "retry_after": answer.retry_after_header(),
            }
        # 409: the lease ran out and crcr took the row back.
        return self.crcr.call("POST", callback["answer_url"], body, expected=(409,))

    def _summary(self) -> int:
        counts = ", ".join(f"{n} {what}" for what, n in sorted(self.tally.items()))
        say(f"done: {counts or 'nothing sent'}")
        if self.tally["refused"]:
            return fail(USAGE, f"the relay refused {self.tally['refused']} callback(s)")
        if self.tally["retry"]:
            return fail(UNREACHABLE, f"{self.tally['retry']} callback(s) wait for a retry")
        return OK


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m runs.relay.reporter",
        description="Send crcr's due HUD callbacks to the relay from a GitHub Actions job.",
        epilog="Exit codes: 0 nothing left to send now, 2 usage/configuration error or a "
        "refused callback, 3 relay or crcr unreachable (crcr retries later).",
    )
    add_common_arguments(p)
    p.add_argument("--batch", type=int, default=10, help="callbacks per claim (default 10)")
    p.add_argument("--drain-for", type=duration, default=240.0, help="seconds (default 240)")
    p.add_argument("--send-timeout", type=duration, default=30.0, help="seconds (default 30)")
    p.add_argument("--crcr-retry-for", type=duration, default=120.0, help="seconds (default 120)")
    return p


def _check(args: argparse.Namespace) -> None:
    args.crcr_token = read_crcr_token(args)
    required = {
        "--crcr": args.crcr,
        "--backend": args.backend,
        "crcr token": args.crcr_token,
        "--relay-url": args.relay_url,
        "--workflow-name": args.workflow_name,
        "--workflow-url": args.workflow_url,
        "--run-id": args.run_id,
    }
    check_options(args, required, numbered=True)
    if not 1 <= args.batch <= 50:
        raise Exit(USAGE, "--batch must be between 1 and 50")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        _check(args)
        return Reporter(args).run()
    except Exit as error:
        return fail(error.code, str(error))
    except delivery.TokenError as error:
        return fail(UNREACHABLE if error.retryable else USAGE, f"no relay token: {error}")


if __name__ == "__main__":
    sys.exit(main())
