from django.core.management.base import BaseCommand

from reproducibility import bundles


class Command(BaseCommand):
    help = "Delete the archives of bundles kept longer than CRCR_BUNDLE_RETENTION_DAYS."

    def handle(self, *args, **options):
        pruned = bundles.prune()
        self.stdout.write(f"pruned {len(pruned)} bundle(s)")
