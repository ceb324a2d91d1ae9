"""`python -m runs.relay.reporter` without crcr: configuration, exit codes, the workflow."""

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTIONS_ENV = {
    "PATH": "/usr/bin:/bin",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "acme/torch-acme",
    "GITHUB_WORKFLOW": "crcr report",
    "GITHUB_RUN_ID": "7001",
    "CRCR_BACKEND": "acme",
    "CRCR_TOKEN": "t0ken",
    "RELAY_URL": "http://127.0.0.1:9/github/callback",
}


def reporter(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runs.relay.reporter", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_outside_github_actions_it_mints_no_token_and_says_why():
    done = reporter(env=ACTIONS_ENV | {"CRCR_URL": "http://127.0.0.1:9"})

    assert done.returncode == 2
    assert "id-token: write" in done.stderr


def test_missing_configuration_exits_2_and_help_exits_0():
    missing = reporter(env={"PATH": "/usr/bin:/bin"})
    helped = reporter("--help", env={"PATH": "/usr/bin:/bin"})

    assert missing.returncode == 2
    assert "missing --crcr, --backend, crcr token, --relay-url" in missing.stderr
    assert helped.returncode == 0 and "Exit codes: 0 nothing left" in helped.stdout


def test_an_unreachable_crcr_exits_3(tmp_path):
    token = tmp_path / "relay-token"
    token.write_text("s3cret")
    env = ACTIONS_ENV | {"CRCR_URL": "http://127.0.0.1:9", "RELAY_TOKEN": f"file:{token}"}

    done = reporter("--crcr-retry-for", "0.3", env=env)

    assert done.returncode == 3
    assert "crcr unreachable" in done.stderr


def test_the_reporter_imports_nothing_from_django():
    check = (
        "import sys, runs.relay.reporter; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework')]"
    )

    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True)

    assert done.returncode == 0, done.stderr


def test_the_report_workflow_runs_every_five_minutes_or_by_hand_with_an_oidc_token():
    flow = yaml.safe_load((ROOT / "runs/relay/workflows/crcr-report.yml").read_text())

    assert flow[True] == {"schedule": [{"cron": "*/5 * * * *"}], "workflow_dispatch": None}
    assert flow["permissions"] == {"contents": "read"}
    assert flow["concurrency"]["cancel-in-progress"] is False
    job = flow["jobs"]["report"]
    assert job["permissions"] == {"id-token": "write", "contents": "read"}
    step = job["steps"][-1]
    assert step["run"].startswith("python -m runs.relay.reporter")
    assert step["env"]["RELAY_TOKEN"] == "oidc"
    assert set(step["env"]) == {
        "CRCR_URL",
        "CRCR_BACKEND",
        "CRCR_TOKEN",
        "RELAY_URL",
        "RELAY_TOKEN",
    }
