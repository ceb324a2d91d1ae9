"""Start-up refuses bad configuration and names the variable at fault."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def start(env: dict[str, str], command: str = "check") -> subprocess.CompletedProcess[str]:
    """Run a management command with this environment on top of a clean one."""
    dropped = ("DATABASE_URL", "DEBUG", "CRCR_SECRETS_DIR")
    clean = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run(
        [sys.executable, "manage.py", command],
        cwd=ROOT,
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"DATABASE_URL": "nonsense"}, "DATABASE_URL"),
        ({"DATABASE_URL": "mysql://root@127.0.0.1/crcr"}, "DATABASE_URL"),
        ({"DEBUG": "maybe"}, "DEBUG"),
        ({"CELERY_BROKER_URL": "localhost:6379"}, "CELERY_BROKER_URL"),
        ({"CRCR_MAX_SHARD_SECONDS": "half an hour"}, "CRCR_MAX_SHARD_SECONDS"),
        ({"CRCR_NIGHTLY_HOUR": "25"}, "CRCR_NIGHTLY_HOUR"),
        ({"SECRET_KEY_FILE": "/nonexistent/secret"}, "SECRET_KEY_FILE"),
    ],
)
def test_it_refuses_to_start_on_a_bad_value_and_names_the_variable(env, named):
    completed = start(env)
    assert completed.returncode != 0
    assert "crcr cannot start" in completed.stderr
    assert named in completed.stderr
    assert "Traceback" not in completed.stderr


def test_it_refuses_debug_off_with_the_development_secret_key():
    completed = start({"DEBUG": "false"})
    assert completed.returncode != 0
    assert "SECRET_KEY_FILE" in completed.stderr and "DEBUG" in completed.stderr


def test_it_starts_with_debug_off_and_a_secret_key_file(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("a-real-production-secret-key-with-enough-entropy-0123456789\n")
    completed = start(
        {"DEBUG": "false", "SECRET_KEY_FILE": str(secret), "CRCR_VAR_DIR": str(tmp_path)}
    )
    assert completed.returncode == 0, completed.stderr


def test_the_embedded_default_needs_no_environment(tmp_path):
    completed = start({"CRCR_VAR_DIR": str(tmp_path)}, command="migrate")
    assert completed.returncode == 0, completed.stderr
    assert (tmp_path / "crcr.sqlite3").exists()


def test_it_refuses_a_secrets_folder_that_holds_the_secret_key_or_crcr(tmp_path):
    """A relay token must never be able to name the secret key file, or crcr's own files."""
    secret = tmp_path / "secret"
    secret.write_text("a-real-production-secret-key-with-enough-entropy-0123456789\n")
    for folder in (tmp_path, ROOT.parent):
        completed = start(
            {"DEBUG": "false", "SECRET_KEY_FILE": str(secret), "CRCR_SECRETS_DIR": str(folder)}
        )
        assert completed.returncode != 0
        assert "CRCR_SECRETS_DIR" in completed.stderr and "Traceback" not in completed.stderr
