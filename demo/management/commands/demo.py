import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import OperationalError, connection

from demo import main_job
from runs.models import Backend, RelayCallback, Run, Trigger
from selection import pipeline
from selection.progress import Bar, Progress


@contextmanager
def run_progress(backend: Backend, progress: Progress) -> Iterator[None]:
    """Report the backend's newest run, shard by shard, while the block runs it."""
    stopped = threading.Event()

    def watch() -> None:
        try:
            while not stopped.wait(1.0):
                try:
                    run = Run.objects.filter(backend=backend).order_by("-pk").first()
                    shards = list(run.shards.all()) if run else []
                except OperationalError:
                    continue  # SQLite: the run's writer holds the file for a moment
                if run is None:
                    continue
                total = sum(len(shard.test_ids) for shard in shards)
                done = sum(shard.tests_done for shard in shards)
                running = [shard.index for shard in shards if shard.status == "running"]
                stage = f"run {run.job_name}: " + (
                    f"shard {running[0] + 1} of {len(shards)}" if running else run.status
                )
                progress(stage, done, total)
        finally:
            connection.close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stopped.set()
        watcher.join()


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
        done = backend.selection_runs.filter(kind="select", status="done").last()
        if done:
            self.stdout.write(f"    done before ({done.finished_at:%Y-%m-%d %H:%M}): not re-run")
        else:
            bar = Bar(sys.stderr)
            selection = pipeline.run_for_backend(backend, main_job.BUNDLED_TREE, progress=bar)
            bar.close()
            self.stdout.write(f"    proposals: {selection.summary.get('proposals')}")
        change = main_job.open_config_pr(backend)
        if change:
            self.stdout.write(
                f'    config PR "{change.title}" with {change.proposals.count()} '
                f"device-verified decision(s), waiting for approval at "
                f"http://127.0.0.1:8000/config-prs/{change.uuid}/ "
                f"(by {main_job.DEMO_REVIEWER}: its author may not approve it)"
            )
        pending = backend.proposals.filter(status="pending").count()
        self.stdout.write(f"    {pending} proposal(s) waiting at http://127.0.0.1:8000/review/")

    def report_runs(self, trigger: Trigger | None) -> None:
        """Each of the trigger's runs: its outcome, its page and its reproduction bundle."""
        if trigger is None:
            return
        for run in trigger.runs.all():
            counts = run.test_counts()
            self.stdout.write(
                f"    run {run.job_name} ({trigger.get_kind_display()}): {run.status}, "
                f"{counts['passed']} passed, {counts['failed']} failed, "
                f"{counts['skipped']} skipped; {run.failures.count()} failures classified"
            )
            self.stdout.write(f"    {run.page_url()}")
            bundle = run.bundles.current().first()
            if bundle:
                self.stdout.write(
                    f"    repro bundle: {bundle.get_status_display()}, {bundle.size:,} bytes, "
                    f"at {run.page_url()}reproducibility/"
                )

    def step(self, text: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(f"==> {text}"))

    def handle(self, *args, serve, no_selection, **options):
        # Eager tasks log each success, and kombu its default host: noise on the console.
        for name in ("celery.app.trace", "kombu.connection"):
            logging.getLogger(name).setLevel(logging.ERROR)
        self.step("demo user and the reference-device backend")
        main_job.create_demo_user()
        state = main_job.load_backend()
        self.stdout.write(f"    backend {state.backend.name}, config v{state.config.number}")
        upstream = main_job.ensure_upstream()
        if upstream:
            self.stdout.write(f"    upstream: a local stand-in clone at {upstream}")
        simulator = main_job.relay_simulator(state.backend)
        self.stdout.write(f"    relay simulator at {simulator.url}")
        try:
            self.step("a merged-PR dispatch through the intake, the gate and its run")
            bar = Bar(sys.stderr)
            with run_progress(state.backend, bar):
                dispatch = main_job.feed_dispatch(state.backend)
            bar.close()
            self.stdout.write(f"    dispatch {dispatch.delivery_id}: {dispatch.verdict}")
            self.stdout.write(f"    {dispatch.verdict_reason}")
            self.report_runs(getattr(dispatch, "trigger", None))
            self.step("the nightly of the same commit: the same job, run as a nightly")
            bar = Bar(sys.stderr)
            with run_progress(state.backend, bar):
                nightly = main_job.start_nightly(state.backend)
            bar.close()
            self.report_runs(nightly)
            delivered = RelayCallback.objects.filter(
                run__backend=state.backend, status=RelayCallback.Status.DELIVERED
            ).count()
            self.stdout.write(f"    {delivered} HUD callback(s) delivered to the relay simulator")
            self.stdout.write(
                "    pull-request and nightly figures at http://127.0.0.1:8000/summary/ "
                "and http://127.0.0.1:8000/metrics/"
            )
            if not no_selection:
                self.select(state.backend)
            self.stdout.write(
                f"\nsign in at http://127.0.0.1:8000/ as {main_job.DEMO_USERNAME} / "
                f"{main_job.DEMO_PASSWORD} (admin), or as {main_job.DEMO_REVIEWER} / "
                f"{main_job.DEMO_PASSWORD} (the second reviewer)"
            )
            if serve:
                call_command("runserver", "127.0.0.1:8000", use_reloader=False)
        finally:
            simulator.stop()
