from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from crcr_site.lib.access import ADMIN, ROLES
from runs.management.commands.tokens import backends_named
from runs.models import ApiToken


class Command(BaseCommand):
    help = "Create (or update) a user with a role: viewer, reviewer, admin or machine."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, required=True)
        parser.add_argument("--password", help="omit to create a token-only machine user")
        parser.add_argument(
            "--token",
            action="store_true",
            help="issue a new API token and print its key (shown only this once)",
        )
        parser.add_argument(
            "--backend",
            action="append",
            default=[],
            dest="backends",
            metavar="SLUG",
            help="a backend the new token acts for (repeat for several); see manage.py tokens",
        )

    def handle(self, *args, username, role, password, token, backends, **options):
        if not username.strip():
            raise CommandError("username must not be empty")
        scope = backends_named(backends)
        user, created = get_user_model().objects.get_or_create(username=username)
        if password:
            user.set_password(password)
        elif created:
            user.set_unusable_password()
        user.is_staff = user.is_superuser = role == ADMIN
        user.save()
        user.groups.set([Group.objects.get_or_create(name=role)[0]])
        self.stdout.write(f"{'created' if created else 'updated'} {username} as {role}")
        if token:
            # Only the key's hash is stored: this is the one time it can be read.
            issued, key = ApiToken.issue(user, name="create_user --token", backends=scope)
            if not scope and role != ADMIN:
                hint = f"manage.py tokens scope {issued.prefix} --backend SLUG"
                self.stdout.write(f"it acts for no backend yet: {hint}")
            self.stdout.write(f"token: {key}")
