"""What a crcr step in GitHub Actions needs, for the bridge and the reporter alike.

Standard library only (the runners have nothing else): crcr's API client with retries
(`Crcr`), one callback delivered until it lands or is refused (`deliver`), the exit with
its code (`Exit`, `failure`), and the command-line options both share
(`add_common_arguments`, `read_crcr_token`, `check_options`, `duration`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from runs.relay import delivery

OK, RUN_FAILED, USAGE, UNREACHABLE = 0, 1, 2, 3


class Exit(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


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
    note: Callable[[str], None] = print,
    turn: Callable[[delivery.Answer | None], float] | None = None,
) -> Delivery:
    """Send one callback until it lands, is refused, or `give_up_after` seconds pass.

    Steps: wait for a turn in the repository's callback budget (`turn`, given the relay's
    last answer, which may hold the whole repository back); send; settle the answer (a
    repeat refused after a lost answer counts as landed); on `retry` wait the larger of
    the backoff and Retry-After, unless that passes the deadline.
    """
    deadline = clock() + give_up_after
    after_ambiguous = False
    attempt = 0
    answer: delivery.Answer | None = None
    while True:
        attempt += 1
        last = answer
        while turn is not None and (wait := turn(last)) > 0:
            last = None  # told once
            if clock() + wait > deadline:
                waited = answer or delivery.Answer(None, "no turn in the callback budget", True)
                return Delivery("unreachable", waited, attempt - 1)
            note(f"waiting {wait:.1f}s for a turn in the repository's callback budget")
            sleep(wait)
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
        note(f"relay answered {answer.describe()}; retrying in {wait:.1f}s")
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


def check_options(args: argparse.Namespace, required: Mapping[str, Any], numbered: bool) -> None:
    """Refuse (Exit 2) what a step cannot run with: a `required` option left empty, a run id
    or attempt that is no number (when `numbered`), a malformed relay token spec. crcr's
    URL loses its trailing slash."""
    missing = [name for name, value in required.items() if not value]
    if missing:
        raise Exit(USAGE, "missing " + ", ".join(missing) + " (see --help)")
    if numbered and not (str(args.run_id).isdigit() and str(args.run_attempt).isdigit()):
        raise Exit(USAGE, "--run-id and --run-attempt must be numbers")
    args.crcr = args.crcr.rstrip("/")
    try:
        delivery.provider_from_spec(args.relay_token)
    except ValueError as error:
        raise Exit(USAGE, str(error)) from None


def failure(program: str, code: int, message: str) -> int:
    """Say why a step ends, on stderr, and return its exit code. `::error::` makes GitHub
    Actions show the line as an annotation on the run."""
    prefix = "::error::" if os.environ.get("GITHUB_ACTIONS") == "true" else ""
    print(f"{prefix}{program}: {message}", file=sys.stderr, flush=True)
    return code
