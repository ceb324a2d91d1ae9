from django.core.management.base import BaseCommand, CommandError

from runs.models import Backend
from selection import pipeline, proposers
from selection.progress import Bar


class Command(BaseCommand):
    help = (
        "Inventory a test tree and run selection stages 1-4 for a backend; proposals go to review."
    )

    def add_arguments(self, parser):
        parser.add_argument("--backend", required=True, help="backend slug")
        parser.add_argument(
            "--tree", help="a PyTorch checkout (default: TORCH_ROOT, the bundled tree)"
        )
        parser.add_argument(
            "--sha", help="its PyTorch SHA (default: a hash of the tree's test files)"
        )
        parser.add_argument(
            "--no-device", action="store_true", help="stop after stage 3 (no device run)"
        )

    def handle(self, *args, backend, tree, sha, no_device, **options):
        profile = Backend.objects.filter(slug=backend).first()
        if profile is None:
            raise CommandError(f"no backend named {backend!r}")
        try:
            classifier = proposers.configured_classifier()
        except proposers.ClassifierError as error:
            raise CommandError(str(error)) from None
        bar = Bar()
        run = pipeline.run_for_backend(
            profile, tree, sha, progress=bar, classifier=classifier, device=not no_device
        )
        bar.close()
        summary = run.summary
        self.stdout.write(f"selection run {run.uuid}: {run.status}")
        stage1 = summary.get("stage1", {})
        for path, reason in stage1.get("excluded", {}).items():
            self.stdout.write(f"  left out {path}: {reason}")
        modes: dict[str, int] = {}
        for decision in summary.get("decisions", []):
            modes[decision["mode"]] = modes.get(decision["mode"], 0) + 1
        self.stdout.write("  decisions: " + ", ".join(f"{n} {m}" for m, n in sorted(modes.items())))
        self.stdout.write(f"  proposals: {run.proposals_said or 'none'}")
        self.stdout.write(f"  seconds: {summary.get('seconds')}")
