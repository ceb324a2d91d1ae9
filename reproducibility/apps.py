from django.apps import AppConfig


class ReproducibilityConfig(AppConfig):
    name = "reproducibility"
    verbose_name = "Reproducibility"

    def ready(self) -> None:
        # What runs announce is recorded here: runs never imports this app.
        from reproducibility import capture
        from runs import events

        events.run_planned.connect(capture.record_run_start, dispatch_uid="record_run_start")
        events.shard_attempt_started.connect(capture.record_worker, dispatch_uid="record_worker")
        events.run_finished.connect(capture.record_run_end, dispatch_uid="record_run_end")
