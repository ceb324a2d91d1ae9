"""A test's failure text never carries the worker's credentials into crcr (issue 37, item 4:
the scrubbing half). What a test prints is stored with its credentials redacted, so the
run page, the HUD's failed tests and the bundles never show them."""

import pytest
from crcr_reuse.outcomes import TestRecord
from django.test import override_settings

from crcr_site.lib.redaction import HIDDEN, known_secrets, redact
from runs import ingest
from runs.models import Run, Shard, TestResult, Trigger
from tests.factories import make_backend, make_config

WORKER = {
    "DATABASE_URL": "postgres://crcr:s3cret-pass@db.internal:5432/crcr",
    "CELERY_BROKER_URL": "redis://:broker-pass-123@redis.internal:6379/0",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "HOME": "/home/worker",
    "TORCH_HOME": "/home/worker/.torch",
}


def test_the_workers_own_values_and_secret_looking_ones_are_redacted():
    secrets = known_secrets(WORKER)
    text = (
        "AssertionError: env was "
        "{'DATABASE_URL': 'postgres://crcr:s3cret-pass@db.internal:5432/crcr', "
        "'AWS_SECRET_ACCESS_KEY': 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', "
        "'HOME': '/home/worker'}"
    )
    shown = redact(text, secrets)
    for value in ("s3cret-pass", "wJalrXUtnFEMI", "postgres://crcr:"):
        assert value not in shown
    assert "/home/worker" in shown  # ordinary values stay: the failure still reads
    assert shown.count(HIDDEN) == 2


@pytest.mark.parametrize(
    ("text", "gone", "kept"),
    [
        ("connect to redis://:hunter22@cache:6379/1 failed", "hunter22", "cache:6379/1"),
        ("https://bot:ghp_abcdefgh@github.com/x.git", "ghp_abcdefgh", "github.com/x.git"),
        ("API_TOKEN=tok-123456789 python x.py", "tok-123456789", "python x.py"),
        ('{"password": "pa55word!!", "user": "ada"}', "pa55word!!", '"user": "ada"'),
        ("Authorization: Bearer abc.def-ghi_123", "abc.def-ghi_123", "Authorization"),
        ("key id AKIAIOSFODNN7EXAMPLE used", "AKIAIOSFODNN7EXAMPLE", "key id"),
    ],
)
def test_credentials_written_in_the_usual_shapes_are_redacted(text, gone, kept):
    shown = redact(text, [])
    assert gone not in shown and kept in shown and HIDDEN in shown


def test_a_text_without_credentials_is_unchanged():
    text = "AssertionError: Tensor-likes are not close!\nMismatched elements: 3 / 12 (25.0%)"
    assert redact(text, known_secrets({"HOME": "/root", "TOKEN_LIMIT": "1"})) == text


@override_settings(SECRET_KEY="django-insecure-the-workers-own-secret-key")
def test_a_stored_failure_message_never_shows_the_workers_credentials(db, monkeypatch):
    for name, value in WORKER.items():
        monkeypatch.setenv(name, value)
    backend = make_backend("redact")
    trigger = Trigger.objects.create(backend=backend, kind="manual", pytorch_sha="0" * 40)
    run = Run.objects.create(
        trigger=trigger, backend=backend, job_name="redact", backend_version="0",
        pytorch_sha="0" * 40, test_suite_sha="0" * 40, config_version=make_config(backend),
    )  # fmt: skip
    shard = Shard.objects.create(run=run, index=0, test_ids=[])
    leaked = (
        "AssertionError: /proc/1/environ held DATABASE_URL="
        "postgres://crcr:s3cret-pass@db.internal:5432/crcr and the key "
        "django-insecure-the-workers-own-secret-key"
    )
    record = TestRecord("test/test_x.py::TestX::test_env", "failed", message=leaked)
    assert ingest.save(shard, [record]) == 1
    stored = TestResult.objects.get(shard=shard).message
    assert "s3cret-pass" not in stored and "the-workers-own-secret-key" not in stored
    assert stored.startswith("AssertionError: /proc/1/environ held DATABASE_URL=")


def test_short_values_after_secret_looking_words_stay_readable():
    assert redact("generate(max_tokens=10) returned 9 tokens", []) == (
        "generate(max_tokens=10) returned 9 tokens"
    )
