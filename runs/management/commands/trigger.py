from django.core.management.base import BaseCommand, CommandError

from runs import triggers
from runs.models import Backend
from runs.upstream import UpstreamError


class Command(BaseCommand):
    help = "Start a release (--release release/X.Y), manual (--sha) or nightly (--nightly) run."

    def add_arguments(self, parser):
        parser.add_argument("--backend", required=True, help="backend slug")
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--release", metavar="release/X.Y")
        target.add_argument("--sha")
        target.add_argument("--nightly", action="store_true")
        parser.add_argument(
            "--labels", default="", help="run only the tests these labels select (smoke,core)"
        )

    def handle(self, *args, backend, release, sha, nightly, labels, **options):
        profile = Backend.objects.filter(slug=backend).first()
        if profile is None:
            raise CommandError(f"no backend named {backend!r}")
        if nightly and labels:
            raise CommandError("--labels applies to --release and --sha runs")
        try:
            labels = triggers.label_selection(labels)
            if release:
                trigger = triggers.start_release(profile, release, labels=labels)
            elif sha:
                trigger = triggers.start_manual(profile, sha, labels=labels)
            else:
                trigger = triggers.start_nightly(profile)
        except (triggers.TriggerError, UpstreamError) as error:
            raise CommandError(str(error)) from None
        for run in trigger.runs.all():
            self.stdout.write(f"run {run.uuid}: {run.job_name} at {run.pytorch_sha}")
