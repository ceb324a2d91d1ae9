"""Delivering CRCR relay callbacks: bearer tokens, one POST, retry timing, what an answer means.

Imports nothing from Django, like `runs.relay.protocol` whose bodies it sends: the bridge
(`python -m runs.relay.bridge`) runs it on a GitHub Actions runner with only the standard
library, and crcr's outbox shares it. Where each rule comes from is in `runs/relay/README.md`.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from runs.relay.protocol import AUDIENCE

Outcome = Literal["delivered", "refused", "retry"]

# A Retry-After above this (a relay's bug, or a hostile proxy's) is read as this: an hour
# is far past any rate-limit window, and a larger wait would park a callback for good.
RETRY_AFTER_CAP = 3600.0


# --- tokens -------------------------------------------------------------------------------


class TokenError(Exception):
    """No bearer token could be had; `retryable` when asking again later may work.

    One that is not retryable is a configuration error (a token file missing, unreadable
    or empty, no OIDC outside Actions, a malformed spec): only a person can fix it.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class TokenSpecError(TokenError, ValueError):
    """A token spec that names no provider: a configuration error, and a ValueError."""


class TokenProvider(Protocol):
    def token(self) -> str | None: ...


class NoTokenProvider:
    """Send no Authorization header (a relay simulator started without tokens)."""

    def token(self) -> str | None:
        return None


def outside_problem(path: Path, directory: Path) -> str | None:
    """Why a token file may not be read (it resolves outside `directory`, symlinks and `..`
    followed), or None. Neither path is quoted back: the spec may hold a pasted secret."""
    try:
        inside = path.resolve().is_relative_to(directory.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        inside = False
    if inside:
        return None
    return (
        "the token file is outside the secrets folder (CRCR_SECRETS_DIR), the only place "
        "relay tokens are read from (symlinks and .. are followed first): put it there"
    )


class StaticTokenProvider:
    """A bearer token read from a secret file, re-read on every call so rotation works.

    With `inside`, the file is read only where it resolves inside that folder, looked at
    again on every call (a symlink swapped in later points nowhere else).
    """

    def __init__(self, path: str | os.PathLike[str], inside: Path | None = None) -> None:
        self.path, self.inside = Path(path), inside

    def token(self) -> str:
        path = self.path
        if self.inside is not None:
            problem = outside_problem(path, self.inside)
            if problem:
                raise TokenError(problem)
            path = path.resolve()
        try:
            value = path.read_text().strip()
        except OSError as error:
            raise TokenError(f"cannot read the relay token file {self.path}: {error}") from None
        if not value:
            raise TokenError(f"the relay token file {self.path} is empty")
        return value


class GitHubOIDCTokenProvider:
    """A fresh GitHub Actions OIDC token for the relay's audience, minted per callback.

    The Actions runtime hands a job that holds `permissions: id-token: write` a request URL
    and bearer token; the ID token lives a few minutes, so one is asked for per send.
    """

    def __init__(
        self,
        audience: str = AUDIENCE,
        *,
        environ: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.audience, self.environ, self.timeout = audience, environ, timeout

    def token(self) -> str:
        env = os.environ if self.environ is None else self.environ
        request_url = env.get("ACTIONS_ID_TOKEN_REQUEST_URL")
        request_token = env.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
        if not request_url or not request_token:
            raise TokenError(
                "no GitHub Actions OIDC token: ACTIONS_ID_TOKEN_REQUEST_URL and "
                "ACTIONS_ID_TOKEN_REQUEST_TOKEN are not set. Run inside a GitHub Actions job "
                "whose permissions include `id-token: write`, or use a token file."
            )
        separator = "&" if "?" in request_url else "?"
        url = f"{request_url}{separator}audience={urllib.parse.quote(self.audience, safe='')}"
        request = urllib.request.Request(
            url, headers={"Authorization": f"Bearer {request_token}", "Accept": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                value = json.loads(response.read()).get("value")
        except urllib.error.HTTPError as error:
            raise TokenError(
                f"the Actions token endpoint answered {error.code}", retryable=error.code >= 500
            ) from None
        except (OSError, http.client.HTTPException) as error:
            raise TokenError(
                f"the Actions token endpoint is unreachable: {error}", retryable=True
            ) from None
        except (ValueError, AttributeError):
            raise TokenError(
                "the Actions token endpoint answered something other than JSON"
            ) from None
        if not isinstance(value, str) or not value:
            raise TokenError("the Actions token endpoint answered without a `value`")
        return value


def check_token_spec(spec: str, *, absolute: bool = False) -> str | None:
    """What is wrong with a token spec (`oidc`, `file:/path/to/secret`, `none`), or None.

    The spec itself is never quoted back: a token pasted in its place would end up in a
    log or on a page. `absolute` asks a file's path to be absolute, as a backend's must be
    (the relay worker that reads it does not share the admin's working directory).
    """
    if spec in ("oidc", "none"):
        return None
    if not spec.startswith("file:"):
        return (
            "token spec must be `oidc`, `file:/path/to/token` or `none`; a token itself "
            "does not go here: write it to a file and give `file:` and that file's path"
        )
    path = spec[len("file:") :]
    if not path or path != path.strip():
        return "token spec `file:` needs the path of the token file, without spaces around it"
    if absolute and not Path(path).is_absolute():
        return "token spec `file:` needs an absolute path (file:/etc/crcr/relay-token)"
    return None


def provider_from_spec(spec: str) -> TokenProvider:
    """`oidc`, `file:/path/to/secret` or `none`; anything else is a TokenSpecError."""
    problem = check_token_spec(spec)
    if problem:
        raise TokenSpecError(problem)
    if spec == "oidc":
        return GitHubOIDCTokenProvider()
    if spec == "none":
        return NoTokenProvider()
    return StaticTokenProvider(spec[len("file:") :])


# --- sending ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What the relay said: `status` is None when no HTTP answer came (network error)."""

    status: int | None
    text: str
    retryable: bool
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def ambiguous(self) -> bool:
        """The relay may have recorded the transition even though the answer says otherwise."""
        return self.status is None or self.status >= 500

    @property
    def ignored(self) -> bool:
        """The relay took it but does nothing with it: the repository is below level L2."""
        return self.ok and self.json().get("status") == "ignored"

    @property
    def refuses_transition(self) -> bool:
        """A 400 for a repeated or out-of-order transition (the relay's wording)."""
        return self.status == 400 and "invalid state transition" in self.text

    def json(self) -> dict[str, Any]:
        try:
            value = json.loads(self.text)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @property
    def detail(self) -> str:
        return str(self.json().get("detail") or self.text or "no answer").strip()

    def retry_after_header(self) -> str | None:
        """The Retry-After as whole seconds, as a sender in GitHub Actions tells crcr."""
        return None if self.retry_after is None else str(math.ceil(self.retry_after))

    def describe(self) -> str:
        return f"{self.status or 'no answer'}: {self.detail}"


def send(
    url: str, body: Mapping[str, Any], token_provider: TokenProvider, timeout: float = 30.0
) -> Answer:
    """POST one callback; retryable only for 429, 5xx and network errors."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    token = token_provider.token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode()
    # The relay matches its path exactly, and the action's documented URL ends in a slash
    # that the action strips before posting; so does this.
    request = urllib.request.Request(url.rstrip("/"), data=data, headers=headers, method="POST")
    try:
        with _NO_REDIRECTS.open(request, timeout=timeout) as response:
            return answer_of(response.status, response.read().decode(errors="replace"))
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        return answer_of(error.code, text, error.headers.get("Retry-After"))
    except (OSError, http.client.HTTPException) as error:
        reason = getattr(error, "reason", None) or error
        return answer_of(None, f"network error: {reason}")


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is the relay's answer, never followed: following it would carry the
    bearer token to a host nobody allow-listed."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_NO_REDIRECTS = urllib.request.build_opener(_RefuseRedirects)


def answer_of(status: int | None, text: str, retry_after: str | None = None) -> Answer:
    """An answer as it came (`status` None: none came), retryable only on 429, 5xx and no
    answer; also how crcr reads an answer a reporter in GitHub Actions writes back."""
    retryable = status is None or status == 429 or status >= 500
    wait = parse_retry_after(retry_after) if status is not None else None
    return Answer(status, text, retryable, wait)


def parse_retry_after(
    value: str | None, now: datetime | None = None, cap: float = RETRY_AFTER_CAP
) -> float | None:
    """Seconds from a Retry-After header, in either of its forms (seconds or an HTTP date),
    at most `cap`; None when absent or garbled (the caller backs off instead)."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return min(cap, float(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(cap, max(0.0, (when - (now or datetime.now(UTC))).total_seconds()))


def backoff(
    attempt: int, base: float = 2.0, cap: float = 600.0, jitter: Callable[[], float] = random.random
) -> float:
    """Seconds to wait before retry `attempt` (0-based): exponential with full jitter."""
    return jitter() * min(cap, base * 2 ** min(attempt, 32))


def settle(answer: Answer, *, after_ambiguous: bool) -> Outcome:
    """What an answer means for the outbox row that sent it.

    A transition refused as repeated, after an earlier attempt whose answer was lost (5xx or
    no answer), means that earlier attempt landed: the row is delivered, not refused.
    """
    if answer.ok:
        return "delivered"
    if answer.retryable:
        return "retry"
    if after_ambiguous and answer.refuses_transition:
        return "delivered"
    return "refused"
