from django.apps import AppConfig


class SelectionConfig(AppConfig):
    name = "selection"
    verbose_name = "Selection"

    def ready(self) -> None:
        # A finished CI run proposes promotions and quarantines: runs never imports this app.
        from runs import events
        from selection import promotion

        events.run_finished.connect(promotion.from_run, dispatch_uid="proposals_from_run")
