import threading
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from runs.relay.simulator import ADMIN_PREFIX, RelaySimulator


def _pair(text: str, what: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise CommandError(f"{what} must look like owner/repo=VALUE, not {text!r}")
    return name, value


def _read_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error}") from None
    if not token:
        raise CommandError(f"{path} is empty")
    return token


class Command(BaseCommand):
    help = "Run a local CRCR relay simulator in the foreground (see runs/relay/README.md)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8765)
        parser.add_argument(
            "--allow",
            action="append",
            default=[],
            metavar="REPO=LEVEL",
            help="allowlist entry, e.g. acme/backend=L2 (repeatable)",
        )
        parser.add_argument(
            "--token-file", help="bearer token that proves --repo (default: first --allow)"
        )
        parser.add_argument("--repo", help="repository the --token-file token proves")
        parser.add_argument(
            "--token-for",
            action="append",
            default=[],
            metavar="REPO=PATH",
            help="another repository and the file holding its token (repeatable)",
        )
        parser.add_argument("--rate-limit", type=int, default=100, help="requests per window")
        parser.add_argument("--rate-window", type=float, default=60.0, help="seconds")
        parser.add_argument(
            "--auto-dispatch",
            action="store_true",
            help="treat every delivery as dispatched (dry runs without a dispatch)",
        )
        parser.add_argument(
            "--accept-unsigned-oidc",
            action="store_true",
            help="accept JWTs for the relay's audience by their repository claim, unverified",
        )
        parser.add_argument(
            "--strict",
            action="store_true",
            help="also refuse what crcr's own validate_callback refuses (the relay does not)",
        )
        parser.add_argument("--serve-for", type=float, help=None)  # for tests: stop after N s

    def handle(self, *args, **options):
        if not options["allow"]:
            raise CommandError("name at least one repository with --allow owner/repo=L2")
        allowlist = dict(_pair(entry, "--allow") for entry in options["allow"])
        tokens = {
            _read_token(path): repo
            for repo, path in (_pair(entry, "--token-for") for entry in options["token_for"])
        }
        if options["token_file"]:
            tokens[_read_token(options["token_file"])] = options["repo"] or next(iter(allowlist))
        try:
            simulator = RelaySimulator(
                options["host"],
                options["port"],
                allowlist=allowlist,
                tokens=tokens,
                rate_limit=options["rate_limit"],
                rate_window=options["rate_window"],
                accept_unsigned_oidc=options["accept_unsigned_oidc"],
                auto_dispatch=options["auto_dispatch"],
                strict=options["strict"],
                log=lambda line: self.stdout.write(line),
            )
            simulator.start()
        except (ValueError, OSError) as error:
            raise CommandError(str(error)) from None
        strict = " (strict: crcr's own validation too)" if options["strict"] else ""
        self.stdout.write(f"relay simulator{strict}: POST callbacks to {simulator.url}")
        self.stdout.write(
            f"  register a dispatch: POST {simulator.base_url}{ADMIN_PREFIX}dispatches"
        )
        self.stdout.write(f"  what it recorded:    GET {simulator.base_url}{ADMIN_PREFIX}log")
        self.stdout.write(
            f"  move its clock on:   POST {simulator.base_url}{ADMIN_PREFIX}advance"
            ' {"seconds": N}'
        )
        try:
            threading.Event().wait(options["serve_for"])
        except KeyboardInterrupt:
            pass
        finally:
            simulator.stop()
        accepted, refused = simulator.accepted, simulator.refused
        self.stdout.write(f"stopped: {len(accepted)} accepted, {len(refused)} refused")
