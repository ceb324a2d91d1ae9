from django.core.management.base import BaseCommand, CommandError

from runs.models import Backend
from selection import enabling
from selection.progress import Bar


class Command(BaseCommand):
    help = "Enable an operator: run the tests waiting on it with it supported; propose those that pass."

    def add_arguments(self, parser):
        parser.add_argument("op", help="aten operator packet, e.g. lgamma")
        parser.add_argument("--backend", required=True, help="backend slug")
        parser.add_argument("--tree", help="the test tree (default: TORCH_ROOT)")

    def handle(self, *args, op, backend, tree, **options):
        profile = Backend.objects.filter(slug=backend).first()
        if profile is None:
            raise CommandError(f"no backend named {backend!r}")
        bar = Bar()
        run = enabling.enable_operator(profile, op, tree, progress=bar)
        bar.close()
        summary = run.summary
        self.stdout.write(f"enable {summary['op']}: {len(summary['waiting'])} tests waiting on it")
        for test in summary["passing"]:
            self.stdout.write(f"  passes now, proposed mandatory_success: {test}")
        for test, why in summary["failing"].items():
            self.stdout.write(f"  still fails: {test}: {why}")
