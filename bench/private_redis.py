"""A redis-server of a bench's own, without persistence: no other worker sees its queues."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The server and its URL (database 0); `folder` is its working directory."""
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ping = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True)
        if ping.stdout.strip() == b"PONG":
            return server, f"redis://127.0.0.1:{port}/0"
        time.sleep(0.1)
    raise SystemExit("redis-server did not start")
