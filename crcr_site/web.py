"""The production web server: waitress serving crcr's WSGI application.

A slow client costs a socket, never a thread. waitress reads each request, headers
and body (a large body spooled to a temporary file), on its event loop and hands
only a complete request to one of its threads. So clients that send a header line or
a body byte every few seconds cannot take every thread as they took gunicorn's
(gthread gives a connection a thread from its first byte until its request is read).

    python -m crcr_site.web --listen 127.0.0.1:8000

The Procfile and deploy/systemd/crcr-web.service run exactly this; the tests and
benches start the Procfile's line. Its limits are below and in settings
(`CRCR_WEB_THREADS`, `CRCR_WEB_CONNECTION_LIMIT`; README, "Operations").
"""

import argparse
import signal
import sys
from types import FrameType

from django.conf import settings
from waitress import serve

# The largest body crcr takes is a config file uploaded on the onboarding page: at
# most 8 MiB of YAML (the engine's yaml_limits.MAX_BYTES) and the form's other fields.
# Twice that leaves room, so a file a little over the YAML limit still reaches the
# form and is told which limit it crossed; a larger body is answered 413 unread.
MAX_BODY_BYTES = 16 * 1024 * 1024
# A connection with no byte in either direction for this long is closed: an idle
# kept-alive browser, or a client that stopped in the middle of its request.
IDLE_SECONDS = 60


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve crcr's web with waitress.")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    listen = parser.parse_args(argv).listen
    from crcr_site.wsgi import application  # sets Django up, so settings can be read

    # systemd and honcho stop the web with SIGTERM: waitress then stops taking
    # requests and gives those its threads are serving 5 s to finish.
    signal.signal(signal.SIGTERM, _exit)
    serve(
        application,
        listen=listen,
        threads=settings.CRCR_WEB_THREADS,
        connection_limit=settings.CRCR_WEB_CONNECTION_LIMIT,
        # poll(), not select(): select() fails past file descriptor 1023.
        asyncore_use_poll=True,
        channel_timeout=IDLE_SECONDS,
        max_request_body_size=MAX_BODY_BYTES,
        # A TLS proxy on the same host says the client's scheme (gunicorn trusted it
        # from 127.0.0.1 too), so links and CSRF checks see https.
        trusted_proxy="127.0.0.1",
        trusted_proxy_headers={"x-forwarded-proto"},
        clear_untrusted_proxy_headers=True,
    )


def _exit(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)


if __name__ == "__main__":
    main()
