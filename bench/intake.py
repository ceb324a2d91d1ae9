"""Dispatch intake latency over HTTP, against a trivial authenticated endpoint.

Starts crcr's production web server (crcr_site/web.py) on a free loopback port
(the database named by DATABASE_URL, else a fresh SQLite file; Redis as the broker
so the gate is queued, not run inline), then sends 1,000 real-size CRCR dispatches to
POST /api/dispatches/ interleaved with 1,000 GET /api/whoami/ (token-checked,
one query), each request alone (the client pauses 10 ms after each answer). The
database is VACUUM ANALYZEd after setup, so a fresh one and one other benches filled
are measured in the same state. Prints p50/p99 of each and the p50 ratio. Target:
ratio <= 3.

    .venv/bin/python bench/intake.py [--count 1000]
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TARGET = 3.0
SETUP = """
from runs.models import Backend
from selection.models import ConfigVersion
from runs.models import ApiToken
from django.contrib.auth import get_user_model
backend, _ = Backend.objects.get_or_create(slug="bench", defaults=dict(
    name="bench", device_module="crcr_reuse.reference_device", repository="bench/bench"))
text = "test_suite_config:\\n  files: []\\n"
ConfigVersion.objects.get_or_create(backend=backend, number=1, defaults=dict(
    yaml_text=text, sha256=ConfigVersion.hash_text(text)))
from django.contrib.auth.models import Group
user, _ = get_user_model().objects.get_or_create(username="bench-machine")
user.groups.add(Group.objects.get_or_create(name="machine")[0])
from django.db import connection
if connection.vendor == "postgresql":
    # Planner statistics and visibility maps as autovacuum keeps them: a fresh database
    # has none, one other benches filled has theirs.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
print(ApiToken.issue(user, name="bench", backends=[backend])[1])
"""
# After each answer the client waits this long, so what a request leaves for after its
# response (the gate's message to the broker) never lands on the next one measured.
PAUSE = 0.01


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def environment(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/14")
    env["CRCR_VAR_DIR"] = str(workdir)
    env.setdefault("DEBUG", "true")
    env["LOG_LEVEL"] = "WARNING"
    if "DATABASE_URL" not in env:
        env["DATABASE_URL"] = f"sqlite:///{workdir / 'bench.sqlite3'}"
    return env


def manage(env: dict[str, str], *args: str) -> str:
    command = [sys.executable, "manage.py", *args]
    return subprocess.run(
        command, cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout


def request(port: int, method: str, path: str, token: str, body: bytes | None = None) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    started = time.perf_counter()
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    response.read()
    elapsed = time.perf_counter() - started
    connection.close()
    if response.status not in (200, 202):
        raise SystemExit(f"{method} {path} answered {response.status}")
    return elapsed


def wait_until_up(port: int, token: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            request(port, "GET", "/api/whoami/", token)
            return
        except (ConnectionError, OSError):
            time.sleep(0.2)
    raise SystemExit("the server did not start")


def dispatch_body() -> dict:
    # The real GitHub webhook the demo ships (demo/demo_data/): in every clone.
    payload = json.loads((ROOT / "demo" / "demo_data" / "pull_request.closed.json").read_text())
    payload["action"] = "opened"  # recorded by the gate; the intake cost is what is measured
    return {"event_type": "pull_request", "delivery_id": "", "payload": payload}


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    count = parser.parse_args().count
    with tempfile.TemporaryDirectory(prefix="crcr-bench-") as tmp:
        env = environment(Path(tmp))
        manage(env, "migrate", "--no-input", "-v", "0")
        token = manage(env, "shell", "-c", SETUP).strip().splitlines()[-1]
        port = free_port()
        # The production web server (the Procfile's), on loopback.
        server = subprocess.Popen(
            [sys.executable, "-m", "crcr_site.web", "--listen", f"127.0.0.1:{port}"],
            cwd=ROOT, env=env,
        )  # fmt: skip
        try:
            wait_until_up(port, token)
            body = dispatch_body()
            intake, trivial = [], []
            for index in range(count + 50):
                body["delivery_id"] = str(uuid.uuid4())
                post = request(
                    port, "POST", "/api/dispatches/?backend=bench", token, json.dumps(body).encode()
                )
                time.sleep(PAUSE)
                get = request(port, "GET", "/api/whoami/", token)
                time.sleep(PAUSE)
                if index >= 50:  # the first 50 of each warm the server up
                    intake.append(post)
                    trivial.append(get)
        finally:
            server.terminate()
            server.wait(timeout=30)
    size = len(json.dumps(body))
    p50_ratio = statistics.median(intake) / statistics.median(trivial)
    print(f"{count} dispatches of {size:,} bytes, database {env['DATABASE_URL'].split(':')[0]}")
    print(f"{'endpoint':<28}{'p50 ms':>10}{'p99 ms':>10}")
    for name, samples in (("POST /api/dispatches/", intake), ("GET /api/whoami/", trivial)):
        print(
            f"{name:<28}{percentile(samples, 0.5) * 1e3:>10.2f}{percentile(samples, 0.99) * 1e3:>10.2f}"
        )
    print(f"intake p50 / trivial p50 = {p50_ratio:.2f} (target <= {TARGET})")
    return 0 if p50_ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
