from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from reproducibility import bundles


class Command(BaseCommand):
    help = "Check a bundle archive (.tar.gz) against its manifest; names every file that differs."

    def add_arguments(self, parser):
        parser.add_argument("archive", type=Path)
        parser.add_argument("--sha256", default="", help="the archive's expected SHA-256")

    def handle(self, *args, **options):
        archive: Path = options["archive"]
        if not archive.is_file():
            raise CommandError(f"{archive} is not a file")
        problems = bundles.verify_archive(archive, options["sha256"])
        if problems:
            raise CommandError("the bundle does not verify:\n  " + "\n  ".join(problems))
        self.stdout.write(f"{archive.name}: every file matches the manifest")
