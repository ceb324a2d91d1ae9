"""Slow clients against the web as the Procfile runs it: 32 connections that send
their request a header line (or a body byte) every two seconds are held open while
other people use the site, and each of those is answered; so are the slow ones,
once they finish their requests."""

import socket
import threading
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar

import pytest
from django.conf import settings

from tests.waiting import wait_for
from tests.workers import answers, environment, free_port, start_web, stop

SLOW_CONNECTIONS = 32
EVERY = 2  # seconds between two pieces of a slow request
BODY = 1000  # bytes of a slow request's body, sent one a piece


class SlowClients:
    """Connections that each send `head`, then `piece` every EVERY seconds until
    `finish` sends what ends their request and reads the answers."""

    def __init__(self, port: int, head: bytes, piece: bytes) -> None:
        self.piece, self.rounds, self.closed = piece, 0, 0
        self.connections = [
            socket.create_connection(("127.0.0.1", port), timeout=20)
            for _ in range(SLOW_CONNECTIONS)
        ]
        for connection in self.connections:
            connection.sendall(head)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        while not self.stopping.wait(EVERY):
            for connection in self.connections:
                try:
                    connection.sendall(self.piece)
                except OSError:  # the server closed it: counted, never retried
                    self.closed += 1
            self.rounds += 1

    def finish(self, tail: bytes) -> list[str]:
        """Each connection's answer's status line, once `tail` ends its request."""
        self.stopping.set()
        self.thread.join()
        for connection in self.connections:
            connection.sendall(tail)
        return [answer.makefile("rb").readline().decode().strip() for answer in self.connections]

    def close(self) -> None:
        self.stopping.set()
        for connection in self.connections:
            connection.close()


@pytest.fixture
def port(transactional_db, tmp_path):
    port = free_port()
    web = start_web(environment(tmp_path, settings.CELERY_BROKER_URL), port, tmp_path / "web.log")
    yield port
    stop(web)


def others_are_answered(port: int, slow: SlowClients) -> None:
    """While `slow` trickles, other people's pages are answered, one after another."""
    wait_for(lambda: slow.rounds >= 2, timeout=60, what="the slow clients to be under way")
    for _ in range(5):
        assert answers(port, "/accounts/login/", timeout=20)
    assert slow.closed == 0, "the web dropped slow clients instead of serving them"


def test_slow_request_headers_leave_the_web_answering(port):
    slow = SlowClients(
        port, b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"X-Slow: 1\r\n"
    )
    try:
        others_are_answered(port, slow)
        assert slow.finish(b"Connection: close\r\n\r\n") == ["HTTP/1.1 200 OK"] * SLOW_CONNECTIONS
    finally:
        slow.close()


def test_slow_request_bodies_leave_the_web_answering(port):
    # A webhook's body is read to its end before anything is decided (its signature
    # covers all of it), so a server that reads it on a thread holds the thread.
    head = (
        "POST /api/webhooks/github/acme/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {BODY}\r\nConnection: close\r\n\r\n"
    )
    slow = SlowClients(port, head.encode(), b" ")
    try:
        others_are_answered(port, slow)
        # Unsigned (and no such backend): each finished webhook is refused, as any is.
        statuses = slow.finish(b" " * (BODY - slow.rounds))
        assert statuses == ["HTTP/1.1 401 Unauthorized"] * SLOW_CONNECTIONS
    finally:
        slow.close()


def test_behind_the_local_tls_proxy_a_sign_in_passes_the_origin_check(port):
    """The proxy on 127.0.0.1 says the client used https: the web believes it, so a
    form posted from the https origin is checked (a wrong password), not refused 403."""
    base, origin = f"http://127.0.0.1:{port}", f"https://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar := CookieJar()))
    opener.open(f"{base}/accounts/login/", timeout=20)
    token = next(cookie.value for cookie in jar if cookie.name == "csrftoken")
    form = {"username": "nobody", "password": "wrong", "csrfmiddlewaretoken": token}
    request = urllib.request.Request(
        f"{base}/accounts/login/",
        data=urllib.parse.urlencode(form).encode(),
        headers={
            "Origin": origin,
            "Referer": f"{origin}/accounts/login/",
            "X-Forwarded-Proto": "https",
        },
    )
    with opener.open(request, timeout=20) as response:
        assert response.status == 200
        assert b"Your username and password didn't match." in response.read()
