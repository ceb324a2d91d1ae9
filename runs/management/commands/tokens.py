"""Issue, list, scope and revoke API tokens: `manage.py tokens issue|list|scope|revoke`."""

from argparse import ArgumentParser
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from runs.models import ApiToken, Backend


def backends_named(slugs: list[str]) -> list[Backend]:
    """The backends of these slugs; an unknown slug is refused, naming the known ones."""
    found = {backend.slug: backend for backend in Backend.objects.filter(slug__in=slugs)}
    unknown = sorted(set(slugs) - set(found))
    if unknown:
        known = ", ".join(Backend.objects.order_by("slug").values_list("slug", flat=True))
        raise CommandError(f"no backend named {', '.join(unknown)} (known: {known or 'none'})")
    return [found[slug] for slug in dict.fromkeys(slugs)]


def token_with_prefix(prefix: str) -> ApiToken:
    """The one token whose key starts with `prefix` (as `tokens list` shows it)."""
    matches = list(ApiToken.objects.filter(prefix__startswith=prefix)[:2]) if prefix else []
    if len(matches) != 1:
        problem = "no token" if not matches else "more than one token"
        raise CommandError(f"{problem} has the prefix {prefix!r}: see manage.py tokens list")
    return matches[0]


def describe(token: ApiToken) -> str:
    if token.user.is_superuser:
        scope = "every backend (superuser)"
    else:
        scope = ",".join(sorted(b.slug for b in token.backends.all())) or "no backend"
    used = f"{token.last_used_at:%Y-%m-%d %H:%M}" if token.last_used_at else "never"
    return f"{token.prefix}  {token.name or '-'}  user={token.user}  acts-for={scope}  used={used}"


class Command(BaseCommand):
    help = (
        "Machine API tokens, each acting for the backends it is scoped to: issue one "
        "(its key is printed once), list them, change a token's backends, revoke one."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        issue = actions.add_parser("issue", help="issue a token and print its key once")
        issue.add_argument("--user", required=True, help="its user (manage.py create_user)")
        issue.add_argument("--name", default="", help="what the token is for, e.g. ci-acme")
        self._backend_option(issue)
        listing = actions.add_parser("list", help="every token: prefix, user, backends")
        listing.add_argument("--backend", help="only the tokens acting for this backend")
        scope = actions.add_parser("scope", help="set the backends a token acts for")
        scope.add_argument("prefix", help="the token's prefix, as `tokens list` shows it")
        self._backend_option(scope)
        revoke = actions.add_parser("revoke", help="delete a token: its key stops working")
        revoke.add_argument("prefix")

    @staticmethod
    def _backend_option(parser: ArgumentParser) -> None:
        parser.add_argument(
            "--backend",
            action="append",
            default=[],
            dest="backends",
            metavar="SLUG",
            help="a backend it acts for (repeat for several); none: it acts for none",
        )

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        getattr(self, f"_{action}")(**options)

    def _issue(self, user: str, name: str, backends: list[str], **_: Any) -> None:
        owner = get_user_model().objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"no user named {user!r}: create it with manage.py create_user")
        if not backends and not owner.is_superuser:
            raise CommandError("a token with no backend acts for none: name one with --backend")
        token, key = ApiToken.issue(owner, name=name, backends=backends_named(backends))
        self.stdout.write(describe(token))
        # Only the key's hash is stored: this is the one time it can be read.
        self.stdout.write(f"token: {key}")

    def _list(self, backend: str | None, **_: Any) -> None:
        tokens = ApiToken.objects.select_related("user").prefetch_related("backends")
        if backend:
            tokens = tokens.filter(backends__in=backends_named([backend]))
        for token in tokens.order_by("created_at"):
            self.stdout.write(describe(token))

    def _scope(self, prefix: str, backends: list[str], **_: Any) -> None:
        token = token_with_prefix(prefix)
        token.backends.set(backends_named(backends))
        self.stdout.write(describe(token))

    def _revoke(self, prefix: str, **_: Any) -> None:
        token = token_with_prefix(prefix)
        line = describe(token)
        token.delete()
        self.stdout.write(f"revoked {line}")
