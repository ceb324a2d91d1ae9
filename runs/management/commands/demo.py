from django.core.management.base import BaseCommand

from runs import demo


class Command(BaseCommand):
    help = "Set up the embedded demo: the demo user and the reference-device backend."

    def handle(self, *args, **options):
        demo.create_demo_user()
        state = demo.load_backend()
        self.stdout.write(f"backend: {state.backend.name} (config v{state.config.number})")
        self.stdout.write(
            f"sign in at http://127.0.0.1:8000/ as {demo.DEMO_USERNAME} / {demo.DEMO_PASSWORD}"
        )
