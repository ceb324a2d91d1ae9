from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.models import Backend
from selection import onboarding
from selection.progress import Bar


class Command(BaseCommand):
    help = (
        "Onboard a backend: its profile and its first config (crcr's YAML, or a Torch Spyre "
        "config imported), validated together; nothing is saved when anything is wrong."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="short name in URLs and job names, e.g. spyre")
        parser.add_argument("--name", required=True, help="shown on pages, e.g. 'IBM Spyre'")
        parser.add_argument("--repository", required=True, help="owner/name on GitHub")
        parser.add_argument(
            "--device-module", required=True, help="module registering the privateuse1 device"
        )
        parser.add_argument(
            "--health-probe", default="",
            help="the device's health probe: python:MODULE:FUNCTION or command:PROGRAM [ARGS]",
        )  # fmt: skip
        parser.add_argument("--config", required=True, type=Path, help="the first config file")
        parser.add_argument(
            "--config-format", choices=onboarding.FORMATS, default="crcr",
            help="crcr (as it is) or spyre (imported with Torch Spyre's meaning)",
        )  # fmt: skip
        parser.add_argument("--backend-version", default="0.0.0", help="its current version")
        parser.add_argument("--tracked-release", default="", help="release/X.Y it follows")
        parser.add_argument(
            "--participation", choices=Backend.Participation.values,
            default=Backend.Participation.ALL,
            help="all dispatches, or nightly (nightly and release dispatches only)",
        )  # fmt: skip
        parser.add_argument("--relay-url", default="", help="CRCR callback endpoint, or none")
        parser.add_argument(
            "--relay-mode", choices=Backend.RelayMode.values, default=Backend.RelayMode.AGGREGATE
        )
        parser.add_argument(
            "--relay-sender",
            choices=Backend.RelaySender.values,
            default=Backend.RelaySender.ACTIONS,
            help="actions for PyTorch's relay (the default), worker for a static-token relay",
        )
        parser.add_argument("--relay-token", default="none", help="file:/path, or none")

    def handle(self, *args: object, **options: object) -> None:
        path = options["config"]
        assert isinstance(path, Path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"--config {path}: cannot be read ({error})") from None
        profile = {
            "slug": options["slug"],
            "name": options["name"],
            "repository": options["repository"],
            "device_module": options["device_module"],
            "health_probe": options["health_probe"],
            "version": options["backend_version"],
            "tracked_release": options["tracked_release"],
            "participation": options["participation"],
            "relay_url": options["relay_url"],
            "relay_mode": options["relay_mode"],
            "relay_sender": options["relay_sender"],
            "relay_token": options["relay_token"],
        }
        bar = Bar()
        try:
            done = onboarding.add_backend(
                profile, text, path.name, str(options["config_format"]), progress=bar
            )
        except onboarding.OnboardingError as error:
            lines = [
                f"{field}: {text}" for field, texts in error.problems.items() for text in texts
            ]
            raise CommandError("nothing was saved:\n" + "\n".join(lines)) from None
        finally:
            bar.close()
        if done.report is not None:
            self.stdout.write(done.report.text())
        self.stdout.write(
            f"created backend {done.backend.slug} ({done.backend.name}) with config "
            f"v{done.config.number}: {done.config.message}"
        )
