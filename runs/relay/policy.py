"""Where crcr's relay worker may read a token and send a callback.

A backend's `relay_token: file:<path>` is read only inside `CRCR_SECRETS_DIR` (symlinks and
`..` resolved first), and its `relay_url` must be on `CRCR_RELAY_URL_ALLOWLIST`, over https
unless `DEBUG` was on at start-up (which also lets the local relay simulator's
`http://127.0.0.1` through). Both are checked where they are typed (`Backend.clean`: the
admin, onboarding, `add_backend`) and again before each send, so a value stored past the
checks (or a symlink swapped in later) sends nothing.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from django.conf import settings

from runs.relay import delivery

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def secrets_dir() -> Path:
    return Path(settings.CRCR_SECRETS_DIR)


def token_problem(spec: str) -> str | None:
    """What is wrong with a backend's token spec, the file's place included, or None."""
    problem = delivery.check_token_spec(spec, absolute=True)
    if problem or not spec.startswith("file:"):
        return problem
    return delivery.outside_problem(Path(spec[len("file:") :]), secrets_dir())


def provider(spec: str) -> delivery.TokenProvider:
    """The token provider of a backend's spec; a TokenSpecError when it may not be used."""
    problem = token_problem(spec)
    if problem:
        raise delivery.TokenSpecError(problem)
    if spec.startswith("file:"):
        return delivery.StaticTokenProvider(spec[len("file:") :], inside=secrets_dir())
    return delivery.provider_from_spec(spec)


def url_problem(url: str) -> str | None:
    """What keeps crcr from sending a callback to `url`, or None (an empty URL: none)."""
    return relay_url_problem(
        url, settings.CRCR_RELAY_URL_ALLOWLIST, local_http=settings.CRCR_RELAY_LOCAL_HTTP
    )


def relay_url_problem(url: str, allowlist: list[str], *, local_http: bool) -> str | None:
    """`url` against the allow-list: entries are hosts (`relay.example.org`, any path) or
    URL prefixes (`https://relay.example.org/github/`), compared part by part, never as
    text (`https://relay.example.org.evil.net` matches neither)."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        return "the relay URL must be an http(s) URL with a host"
    if parts.username is not None or parts.password is not None:
        return "the relay URL may not hold a user name or password"
    if parts.scheme == "http" and not local_http:
        return "the relay URL must use https (http only for a local relay when DEBUG is on)"
    if local_http and host in LOOPBACK:
        return None  # the local relay simulator, on a development machine or in tests
    if any(_matches(parts, entry) for entry in allowlist):
        return None
    return (
        f"the relay URL's host {host} is not on CRCR_RELAY_URL_ALLOWLIST "
        f"({', '.join(allowlist) or 'empty'}): an operator adds the relay there first"
    )


def _matches(parts: urllib.parse.SplitResult, entry: str) -> bool:
    if "://" not in entry:
        host, _, port = entry.lower().partition(":")
        return parts.hostname == host and (not port or str(parts.port) == port)
    allowed = urllib.parse.urlsplit(entry)
    if (parts.scheme, parts.netloc.lower()) != (allowed.scheme, allowed.netloc.lower()):
        return False
    prefix = allowed.path.rstrip("/")
    path = os.path.normpath(parts.path or "/")
    return not prefix or path == prefix or path.startswith(prefix + "/")
