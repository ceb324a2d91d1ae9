"""Credentials taken out of text that came from a test process, before crcr stores it.

A test runs upstream code on a worker that holds crcr's own credentials; whatever it
prints (a failure message, a traceback) is shown on the run page, sent to the HUD and
packed into bundles, so it is redacted where it is stored (`runs/ingest.py`). Steps:
1. the values of this process's secret-looking variables and of crcr's own settings
   (the database and broker URLs, the secret key), wherever they appear;
2. the user and password part of any URL (`postgres://crcr:pw@db/…`);
3. a value written after a secret-looking name (`API_TOKEN=…`, `"password": "…"`);
4. bearer tokens and AWS access key ids.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from django.conf import settings

HIDDEN = "[redacted]"
SECRET_WORDS = r"(?:SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|ACCESS_KEY|PRIVATE_KEY)"
# crcr's own settings a test must never see, whatever their names look like.
OWN_VARIABLES = ("DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CACHE_URL")
MIN_VALUE = 8  # shorter values ("1", "true") would redact ordinary words
PATTERNS = (
    (
        re.compile(r"(?P<keep>\b[a-z][a-z0-9+.-]*://)[^\s/@:]*:[^\s/@]*@", re.I),
        rf"\g<keep>{HIDDEN}@",
    ),
    (
        # A value of 6 characters or more: `max_tokens=10` is no credential.
        re.compile(
            rf"(?P<keep>\b\w*{SECRET_WORDS}\w*[\"']?\s*[:=]\s*[\"']?)[^\s\"',;)}}]{{6,}}", re.I
        ),
        rf"\g<keep>{HIDDEN}",
    ),
    (re.compile(r"(?P<keep>\bBearer\s+)[A-Za-z0-9._~+/=-]+", re.I), rf"\g<keep>{HIDDEN}"),
    (re.compile(r"\bA(?:KIA|SIA)[0-9A-Z]{16}\b"), HIDDEN),
)


def is_secret(name: str) -> bool:
    """Whether a variable of this name holds a credential (or says where one is)."""
    return name in OWN_VARIABLES or re.search(SECRET_WORDS, name, re.I) is not None


def known_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values this process must never let through, longest first."""
    environ = os.environ if environ is None else environ
    values = [value for name, value in environ.items() if is_secret(name)]
    values.append(str(getattr(settings, "SECRET_KEY", "")))
    return sorted({v for v in values if len(v) >= MIN_VALUE}, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """`text` with every credential it shows replaced by `[redacted]` (steps above)."""
    for secret in known_secrets() if secrets is None else secrets:
        text = text.replace(secret, HIDDEN)
    for pattern, replacement in PATTERNS:
        text = pattern.sub(replacement, text)
    return text
