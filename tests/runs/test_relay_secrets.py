"""Secrets by reference only from the secrets folder, callbacks only to allow-listed relays:
refused where they are typed, and again before anything is sent."""

import http.server
import threading

import pytest
from django.contrib.auth import get_user_model

from runs.models import Backend, RelayCallback
from runs.relay import delivery, outbox
from runs.relay.policy import relay_url_problem
from runs.relay.simulator import RelaySimulator
from tests.factories import PASSWORD, make_backend, make_config
from tests.runs.relay_runs import REPO, dispatched_run, in_progress
from tests.runs.test_relay_token_spec import admin_form

OUTSIDE = "outside the secrets folder (CRCR_SECRETS_DIR)"


@pytest.fixture
def secrets(settings, tmp_path):
    """The secrets folder, a token inside it, and a secret key file beside it (outside)."""
    folder = tmp_path / "secrets"
    folder.mkdir()
    (folder / "relay-token").write_text("s3cret\n")
    (tmp_path / "secret-key").write_text("django-secret-key\n")
    settings.CRCR_SECRETS_DIR = folder
    settings.CRCR_RELAY_URL_ALLOWLIST = ["relay.example.org"]
    return folder


@pytest.fixture
def admin_client(db, client):
    client.force_login(get_user_model().objects.create_superuser("ada", password=PASSWORD))
    return client


@pytest.fixture
def simulator():
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, strict=True) as sim:
        yield sim


def post_backend(client, **fields):
    form = admin_form(relay_sender="worker", relay_url="https://relay.example.org/github/callback")
    return client.post("/admin/runs/backend/add/", form | fields)


def refused(response, field):
    assert response.status_code == 200 and not Backend.objects.exists()
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    return errors[field][0]


def outside_specs(secrets):
    (secrets / "link").symlink_to(secrets.parent / "secret-key")
    return {
        "a file elsewhere": f"file:{secrets.parent / 'secret-key'}",
        "a way out with ..": f"file:{secrets}/../secret-key",
        "a symlink pointing out": f"file:{secrets / 'link'}",
    }


def test_the_admin_refuses_a_token_file_outside_the_secrets_folder(secrets, admin_client):
    for how, spec in outside_specs(secrets).items():
        message = refused(post_backend(admin_client, relay_token=spec), "relay_token")
        assert OUTSIDE in message, how
        assert "secret-key" not in message  # the path typed is never quoted back


def test_the_model_refuses_it_too_and_takes_a_file_inside(secrets, db):
    backend = make_backend("acme", relay_url="https://relay.example.org/github/callback")
    for how, spec in outside_specs(secrets).items():
        backend.relay_token = spec
        with pytest.raises(Exception, match=r"CRCR_SECRETS_DIR") as caught:
            backend.full_clean()
        assert list(caught.value.message_dict) == ["relay_token"], how
    backend.relay_token = f"file:{secrets / 'relay-token'}"
    backend.full_clean()


def test_the_admin_takes_a_token_file_inside_the_secrets_folder(secrets, admin_client):
    spec = f"file:{secrets / 'relay-token'}"
    assert post_backend(admin_client, relay_token=spec).status_code == 302
    assert Backend.objects.get().relay_token == spec


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://relay.evil.net/github/callback", "relay.evil.net is not on"),
        ("https://relay.example.org.evil.net/github/callback", "not on"),
        ("https://relay.example.org@evil.net/github/callback", "user name"),
        ("http://relay.example.org/github/callback", "must use https"),
        ("http://127.0.0.1:9/github/callback", "must use https"),
    ],
)
def test_the_admin_refuses_a_relay_url_off_the_allowlist_or_without_https(
    secrets, admin_client, settings, url, problem
):
    settings.CRCR_RELAY_LOCAL_HTTP = False  # DEBUG off at start-up: production
    message = refused(post_backend(admin_client, relay_url=url), "relay_url")
    assert problem in message


def test_an_allow_listed_https_relay_is_taken(secrets, admin_client, settings):
    settings.CRCR_RELAY_LOCAL_HTTP = False
    assert post_backend(admin_client).status_code == 302


def test_allow_list_entries_are_hosts_or_url_prefixes_compared_part_by_part():
    prefix = ["https://relay.example.org/github/"]
    assert (
        relay_url_problem("https://relay.example.org/github/callback", prefix, local_http=False)
        is None
    )
    for url in (
        "https://relay.example.org/other/callback",
        "https://relay.example.org/github/../other",
        "https://relay.example.org:8443/github/callback",
        "https://relay.example.org.evil.net/github/callback",
    ):
        assert relay_url_problem(url, prefix, local_http=False), url
    assert relay_url_problem("http://127.0.0.1:8080/github/callback", [], local_http=True) is None
    assert relay_url_problem("http://10.0.0.1/github/callback", [], local_http=True)


def backend_sending_to(simulator, spec):
    backend = make_backend("acme", relay_url=simulator.url, relay_token=spec)
    make_config(backend)
    return backend


def held_and_unsent(callback, simulator):
    outbox.deliver(callback.pk)
    callback.refresh_from_db()
    assert callback.status == RelayCallback.Status.PENDING and callback.auth_misconfigured
    assert callback.attempts == 0
    assert not simulator.accepted and not simulator.refused
    return callback.auth_problem


@pytest.mark.parametrize("how", ["a file elsewhere", "a way out with ..", "a symlink pointing out"])
def test_a_stored_token_outside_the_folder_sends_nothing(secrets, db, simulator, how):
    """Stored past the checks (an update, an older crcr), or a symlink swapped in later."""
    spec = outside_specs(secrets)[how]
    run = dispatched_run(backend_sending_to(simulator, spec), simulator)
    assert OUTSIDE in held_and_unsent(in_progress(run), simulator)


def test_a_stored_relay_url_off_the_allow_list_sends_nothing(secrets, db, simulator, settings):
    settings.CRCR_RELAY_LOCAL_HTTP = False  # the simulator's http://127.0.0.1 is refused
    run = dispatched_run(
        backend_sending_to(simulator, f"file:{secrets / 'relay-token'}"), simulator
    )
    assert "must use https" in held_and_unsent(in_progress(run), simulator)


def test_a_token_inside_the_folder_is_sent(secrets, db, simulator):
    run = dispatched_run(
        backend_sending_to(simulator, f"file:{secrets / 'relay-token'}"), simulator
    )
    callback = in_progress(run)
    outbox.deliver(callback.pk)
    callback.refresh_from_db()
    assert callback.status == RelayCallback.Status.DELIVERED
    assert [status for _, status, _ in simulator.accepted] == ["in_progress"]


class Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request with a redirect to `target` (when set), recording what it got.
    (urllib follows a 302 to a POST as a GET, Authorization and all.)"""

    seen: list[str | None] = []
    target = ""

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.seen.append(self.headers.get("Authorization"))
        self.send_response(302 if self.target else 200)
        if self.target:
            self.send_header("Location", self.target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


def test_a_relay_redirect_is_an_answer_and_the_token_goes_nowhere_else(secrets):
    class Relay(Recorder):
        seen: list[str | None] = []

    class Elsewhere(Recorder):
        seen: list[str | None] = []

    servers = [http.server.HTTPServer(("127.0.0.1", 0), cls) for cls in (Relay, Elsewhere)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    Relay.target = f"http://127.0.0.1:{servers[1].server_port}/github/callback"
    try:
        provider = delivery.StaticTokenProvider(secrets / "relay-token", inside=secrets)
        url = f"http://127.0.0.1:{servers[0].server_port}/github/callback"
        answer = delivery.send(url, {"status": "in_progress"}, provider, timeout=5)
    finally:
        for server in servers:
            server.shutdown()
    assert answer.status == 302 and not answer.retryable
    assert Relay.seen == ["Bearer s3cret"] and Elsewhere.seen == []
