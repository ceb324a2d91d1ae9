import sys

from django.core.management import call_command
from django.core.management.base import BaseCommand

from runs import demo
from selection import pipeline
from selection.progress import Bar


class Command(BaseCommand):
    help = "The main job on the embedded default: the whole loop, then (--serve) the UI."

    def add_arguments(self, parser):
        parser.add_argument(
            "--serve", action="store_true", help="then serve the UI on 127.0.0.1:8000"
        )
        parser.add_argument(
            "--no-selection", action="store_true", help="skip the selection pipeline's stages"
        )

    def select(self, backend) -> None:
        self.step("selection: inventory, stages 1-4 on the device, proposals to review")
        bar = Bar(sys.stderr)
        selection = pipeline.run_for_backend(backend, demo.BUNDLED_TREE, progress=bar)
        bar.close()
        self.stdout.write(f"    proposals: {selection.summary.get('proposals')}")
        self.stdout.write("    waiting for review at http://127.0.0.1:8000/review/")

    def step(self, text: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(f"==> {text}"))

    def handle(self, *args, serve, no_selection, **options):
        self.step("demo user and the reference-device backend")
        demo.create_demo_user()
        state = demo.load_backend()
        self.stdout.write(f"    backend {state.backend.name}, config v{state.config.number}")
        upstream = demo.ensure_upstream()
        if upstream:
            self.stdout.write(f"    upstream: a local stand-in clone at {upstream}")
        simulator = demo.relay_simulator(state.backend)
        self.stdout.write(f"    relay simulator at {simulator.url}")
        try:
            self.step("a merged-PR dispatch through the intake, the gate and its run")
            dispatch = demo.feed_dispatch(state.backend)
            self.stdout.write(f"    dispatch {dispatch.delivery_id}: {dispatch.verdict}")
            self.stdout.write(f"    {dispatch.verdict_reason}")
            trigger = getattr(dispatch, "trigger", None)
            for run in trigger.runs.all() if trigger else []:
                counts = run.test_counts()
                self.stdout.write(
                    f"    run {run.job_name}: {run.status}, {counts['passed']} passed, "
                    f"{counts['failed']} failed, {counts['skipped']} skipped; "
                    f"{run.failures.count()} failures classified"
                )
                self.stdout.write(f"    {run.page_url()}")
            self.stdout.write(f"    the relay accepted {len(simulator.accepted)} callback(s)")
            if not no_selection:
                self.select(state.backend)
            self.stdout.write(
                f"\nsign in at http://127.0.0.1:8000/ as {demo.DEMO_USERNAME} / "
                f"{demo.DEMO_PASSWORD}"
            )
            if serve:
                call_command("runserver", "127.0.0.1:8000", use_reloader=False)
        finally:
            simulator.stop()
