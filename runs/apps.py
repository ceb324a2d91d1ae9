from django.apps import AppConfig
from django.db.models.signals import post_delete


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from runs import hud_grid
        from runs.models import Run

        post_delete.connect(hud_grid.forget_runs, sender=Run, dispatch_uid="hud_forget_runs")
