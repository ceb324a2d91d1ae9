from django.core.management.base import BaseCommand

from reproducibility import capture
from reproducibility.models import Bundle
from runs.models import Run


class Command(BaseCommand):
    help = "Record and bundle every finished run that has no bundle yet (idempotent)."

    def handle(self, *args, **options):
        finished = Run.objects.filter(status__in=Run.FINISHED)
        bundled = Bundle.objects.exclude(status=Bundle.Status.PRUNED).values("run")
        for run in finished.exclude(pk__in=bundled).order_by("created_at"):
            bundle = capture.record_run_end(run)
            self.stdout.write(f"run {run.uuid}: bundle {bundle.get_status_display()}")
