"""Shared fixtures: a real Celery worker on the configured broker, a real Chromium."""

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Playwright's sync API runs an event loop in the test thread; Django's ORM calls
# made by the test around it are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"


def _own_broker_database() -> None:
    """Under pytest-xdist each worker's in-process Celery worker consumes a Redis database
    of its own (the configured one, minus the worker's number), so no worker runs a task
    another sent against its own test database. Processes the tests start inherit it."""
    from django.conf import settings

    from crcr_site.celery import app

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    url = settings.CELERY_BROKER_URL
    if not worker.startswith("gw") or not url or not url.startswith("redis"):
        return
    base, _, number = url.rpartition("/")
    url = f"{base}/{int(number or 0) - int(worker[2:])}"
    os.environ["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL = app.conf.broker_url = url


_own_broker_database()


def _quick_passwords() -> None:
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["tests.hashers.QuickPBKDF2"]


_quick_passwords()


@pytest.fixture(scope="session", autouse=True)
def flush_by_delete() -> Iterator[None]:
    """A transactional test empties every table after it: DELETE rather than Django's
    TRUNCATE, which costs seconds a time on PostgreSQL for the few rows a test leaves
    (the foreign keys are deferred, so one transaction deletes in any order)."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(
        ops: Any, style: Any, tables: Any, *, reset_sequences: bool = False, **kw: Any
    ) -> list[str]:
        if reset_sequences or not tables:
            return truncate(ops, style, tables, reset_sequences=reset_sequences, **kw)
        return [f"DELETE FROM {ops.quote_name(table)};" for table in tables]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        yield


@pytest.fixture(scope="session")
def celery_worker_session(django_db_setup: Any, django_db_blocker: Any) -> Iterator[Any]:
    """One in-process Celery worker for the whole session, consuming every queue."""
    from celery.contrib.testing.worker import start_worker
    from django.conf import settings

    from crcr_site.celery import app

    if not settings.CELERY_BROKER_URL:
        pytest.fail("CELERY_BROKER_URL is not set: the suite needs a real broker (see README)")
    with (
        django_db_blocker.unblock(),
        start_worker(
            app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=30
        ) as worker,
    ):
        yield worker


@pytest.fixture(scope="session", autouse=True)
def environment_cache(tmp_path_factory: Any) -> Any:
    """One device host's cache of combination environments for the whole session (worker
    processes the tests start inherit it): torch is unpacked once, later builds link it.
    pytest-xdist's workers share it (their temporary folders sit side by side), as the
    workers of one device host do; its lock makes one of them build each environment."""
    from django.conf import settings

    if os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / "environments"
        path.mkdir(exist_ok=True)
    else:
        path = tmp_path_factory.mktemp("environments")
    settings.CRCR_ENV_DIR = path
    os.environ["CRCR_ENV_DIR"] = str(path)
    return path


@pytest.fixture(scope="session", autouse=True)
def secrets_dir(tmp_path_factory: Any) -> Path:
    """The tests' relay token files live in their temporary folders: that is the secrets
    folder (CRCR_SECRETS_DIR) for the session, and for the processes it starts."""
    from django.conf import settings

    path = tmp_path_factory.getbasetemp().resolve()
    settings.CRCR_SECRETS_DIR = path
    os.environ["CRCR_SECRETS_DIR"] = str(path)
    return path


@pytest.fixture(autouse=True)
def empty_cache() -> None:
    """Each test starts with an empty Django cache, as with a fresh database: a page that
    keeps what it read (the HUD, a config version's lines) is then measured as first seen."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def celery_worker(celery_worker_session: Any, transactional_db: Any) -> Iterator[Any]:
    """The session worker, with a database whose commits the worker's thread can see.
    A test may end while tasks it started still run (a run planning its shards): the
    database is emptied only once the worker has been idle a moment, or after a minute,
    so no task of this test writes between the flush's deletes or into the next test."""
    yield celery_worker_session
    wait_until_idle()


def wait_until_idle(timeout: float = 60.0, quiet_for: float = 0.3) -> None:
    """Wait until the in-process worker has run no task for `quiet_for` seconds (a task
    that sends another leaves a short gap between them), at most `timeout` seconds."""
    from celery.worker import state

    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        if state.active_requests or state.reserved_requests:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_for:
            return
        time.sleep(0.05)


@pytest.fixture
def broker() -> Iterator[str]:
    """A Redis server of the test's own for the worker processes it starts."""
    from tests.workers import own_redis

    with own_redis() as url:
        yield url


@pytest.fixture
def machine_token(request: Any, db: Any) -> str:
    """The API token of a machine client (the relay's forwarder): the machine role, acting
    for the test's `backend` where it has that fixture (else for none)."""
    from tests.factories import make_token, make_user

    scope = [request.getfixturevalue("backend")] if "backend" in request.fixturenames else []
    return make_token(make_user("relay-forwarder", role="machine"), *scope)


@pytest.fixture(scope="session")
def real_data() -> Path:
    """PyTorch CI's real data folder (`shared/data`): a test whose point is the real file
    takes it, and is skipped, always with the same reason, where the data is absent."""
    from tests.data import real_data_dir

    return real_data_dir()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium driven by Playwright (no browser download)."""
    from playwright.sync_api import sync_playwright

    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, live_server: Any) -> Iterator[Any]:
    """A page on the live server; a test whose pages broke the Content-Security-Policy
    (Chromium reports each refused script or style in the console) fails."""
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    violations: list[str] = []
    page.on("console", lambda message: violations.extend(csp_violations([message.text])))
    yield page
    context.close()
    assert not violations, f"Content-Security-Policy violations: {violations}"


def csp_violations(texts: list[str]) -> list[str]:
    return [text for text in texts if "Content Security Policy" in text]


def pytest_report_header(config: Any) -> list[str]:
    """Say which real services this run uses, so a CI log shows it."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    return [
        f"crcr database: {database['ENGINE'].rsplit('.', 1)[-1]} "
        f"{database.get('HOST') or ''} {database['NAME']}",
        f"crcr broker: {settings.CELERY_BROKER_URL or 'none (eager tasks)'}",
        f"crcr browser: {CHROMIUM}",
    ]


def drain() -> None:
    """Wait until the background thread has run everything sent to it so far."""
    from crcr_site.lib import enqueue

    # One thread runs the work in order: a no-op sent now runs after all of it.
    enqueue._background.submit(lambda: None).result(timeout=300)


@pytest.fixture
def held(transactional_db, settings, tmp_path):
    """The embedded default, its background thread busy until the test sets the event."""
    from crcr_site.lib import enqueue

    settings.CELERY_TASK_ALWAYS_EAGER = True  # no broker: tasks run in the web process
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    go = threading.Event()
    enqueue._background.submit(go.wait, 300)
    yield go
    go.set()  # never leave the thread waiting for a failed test
    drain()  # and leave nothing running against the next test's database
