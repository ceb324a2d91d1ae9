from django.core.management.base import BaseCommand

from runs import demo


class Command(BaseCommand):
    help = "Set up the embedded demo and feed a merged-PR dispatch through the intake."

    def handle(self, *args, **options):
        demo.create_demo_user()
        state = demo.load_backend()
        self.stdout.write(f"backend: {state.backend.name} (config v{state.config.number})")
        upstream = demo.ensure_upstream()
        if upstream:
            self.stdout.write(f"upstream: a local stand-in clone at {upstream}")
        dispatch = demo.feed_dispatch(state.backend)
        self.stdout.write(f"dispatch {dispatch.delivery_id}: {dispatch.get_verdict_display()}")
        self.stdout.write(f"  {dispatch.verdict_reason}")
        trigger = getattr(dispatch, "trigger", None)
        for run in trigger.runs.all() if trigger else []:
            self.stdout.write(f"  run {run.job_name} at {run.pytorch_sha[:12]}: {run.status}")
        self.stdout.write(
            f"\nsign in at http://127.0.0.1:8000/ as {demo.DEMO_USERNAME} / {demo.DEMO_PASSWORD}"
        )
