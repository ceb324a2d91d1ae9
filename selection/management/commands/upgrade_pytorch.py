from django.core.management.base import BaseCommand, CommandError

from runs.models import Backend
from selection import upgrade
from selection.progress import Bar


class Command(BaseCommand):
    help = "Upgrade to a PyTorch SHA: inventory its tree, classify and run only what changed."

    def add_arguments(self, parser):
        parser.add_argument("--backend", required=True, help="backend slug")
        parser.add_argument("--sha", required=True, help="the new PyTorch SHA")
        parser.add_argument("--tree", required=True, help="a checkout of the new SHA")
        parser.add_argument(
            "--from", dest="old", help="the SHA to compare with (default: the last)"
        )
        parser.add_argument("--no-device", action="store_true", help="stop after stage 3")

    def handle(self, *args, backend, sha, tree, old, no_device, **options):
        profile = Backend.objects.filter(slug=backend).first()
        if profile is None:
            raise CommandError(f"no backend named {backend!r}")
        bar = Bar()
        try:
            run = upgrade.upgrade(profile, sha, tree, old, progress=bar, device=not no_device)
        except upgrade.UpgradeError as error:
            raise CommandError(str(error)) from None
        bar.close()
        summary = run.summary
        diff = summary["diff"]
        self.stdout.write(
            f"{summary['from'][:12]} -> {summary['to'][:12]}: {len(diff['added'])} added, "
            f"{len(diff['changed'])} changed, {len(diff['removed'])} removed, "
            f"{diff['unchanged']} unchanged tests"
        )
        for entry in summary["removed_entries"]:
            self.stdout.write(f"  config entry without a test: {entry['file']} {entry['name']}")
        counts = summary["proposals"]
        self.stdout.write(f"  proposals: {counts['created']} new, {counts['updated']} updated")
