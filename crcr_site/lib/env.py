"""Typed readers for environment variables that refuse bad values.

Each reader names the variable in its error, so a typo in a deployment stops
start-up with a message that says which setting to fix.
"""

import os
from pathlib import Path
from typing import Any, overload

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None = None) -> str | None: ...
def env_str(name: str, default: str | None = None) -> str | None:
    value = _raw(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={value!r} is not a boolean; use one of {sorted(_TRUE | _FALSE)}"
    )


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum {minimum}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_path(name: str, default: Path) -> Path:
    value = _raw(name)
    return default if value is None else Path(value).expanduser().resolve()


def env_file_text(name: str) -> str | None:
    """The stripped text of the file the variable names (secrets live in files)."""
    value = _raw(name)
    if value is None:
        return None
    path = Path(value)
    try:
        text = path.read_text().strip()
    except OSError as error:
        raise ImproperlyConfigured(f"{name}={value!r} cannot be read: {error.strerror}") from None
    if not text:
        raise ImproperlyConfigured(f"{name}={value!r} names an empty file")
    return text


def env_database(name: str, default: dict[str, Any], conn_max_age: int = 60) -> dict[str, Any]:
    """A Django DATABASES entry from a URL; only PostgreSQL and SQLite are supported."""
    value = _raw(name)
    if value is None:
        return default
    try:
        config = dict(
            dj_database_url.parse(value, conn_max_age=conn_max_age, conn_health_checks=True)
        )
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}={value!r} is not a database URL: {error}") from None
    engine = config.get("ENGINE", "")
    if engine not in ("django.db.backends.postgresql", "django.db.backends.sqlite3"):
        raise ImproperlyConfigured(
            f"{name}={value!r}: only postgres:// and sqlite:// URLs are supported"
        )
    if engine.endswith("postgresql") and not config.get("NAME"):
        raise ImproperlyConfigured(f"{name}={value!r} names no database")
    return config


@overload
def env_url(name: str, default: str, schemes: tuple[str, ...]) -> str: ...
@overload
def env_url(name: str, default: None, schemes: tuple[str, ...]) -> str | None: ...
def env_url(name: str, default: str | None, schemes: tuple[str, ...]) -> str | None:
    value = _raw(name)
    if value is None:
        return default
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in schemes:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a URL with a scheme among {', '.join(schemes)}"
        )
    return value
