"""API tokens: machine clients' keys, stored as SHA-256 digests and shown once, each
scoped to the backends it may act for."""

import hashlib
import secrets
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from runs.models.backends import Backend

PREFIX_LENGTH = 8
# last_used_at is a hint for an admin, not an audit log: refreshing it at most
# this often keeps the intake (one query per dispatch) free of a write per call.
LAST_USED_PRECISION = timedelta(minutes=1)


def digest_of(key: str) -> str:
    """The stored form of a key.

    A key is 192 random bits, so a plain SHA-256 cannot be reversed by guessing;
    a slow password hash would only slow every API call down.
    """
    return hashlib.sha256(key.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def matching(self, key: str) -> "ApiTokenQuerySet":
        """The token (at most one) whose key this is."""
        return self.filter(digest=digest_of(key))


class ApiToken(models.Model):
    """A key a machine client sends as `Authorization: Token <key>`; only its digest is kept."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, help_text="what the token is for")
    prefix = models.CharField(
        max_length=PREFIX_LENGTH, editable=False, help_text="the key's first characters"
    )
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    # What the token may act for: every machine endpoint checks the backend of what it
    # touches against this (`may_act_for`). None: it acts for no backend.
    backends = models.ManyToManyField(
        Backend,
        blank=True,
        related_name="api_tokens",
        help_text="the backends this token acts for (dispatches, attempts, relay claims, "
        "runs, bundles); none: it acts for none. A superuser's token acts for every backend.",
    )

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        verbose_name = "API token"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    @classmethod
    def issue(
        cls, user: Any, name: str = "", backends: Iterable[Backend] = ()
    ) -> tuple["ApiToken", str]:
        """A new token for `user`, acting for `backends`, and its key, which exists only in
        the return value."""
        token = cls(user=user, name=name)
        key = token.set_new_key()
        token.save()
        token.backends.set(backends)
        return token, key

    def may_act_for(self, backend: Backend) -> bool:
        """Whether the token acts for `backend`: it is in its scope, or the token is a
        superuser's (an admin acts for every backend)."""
        if self.user.is_superuser:
            return True
        return self.backends.filter(pk=backend.pk).exists()

    def scope(self) -> "models.QuerySet[Backend]":
        """The backends the token acts for."""
        return Backend.objects.all() if self.user.is_superuser else self.backends.all()

    def set_new_key(self) -> str:
        """Give an unsaved token a fresh key; return the key, which is not kept."""
        key = secrets.token_hex(24)
        self.prefix, self.digest = key[:PREFIX_LENGTH], digest_of(key)
        return key

    def note_use(self) -> None:
        """Record that the token was just used, at most once per LAST_USED_PRECISION."""
        now = timezone.now()
        if self.last_used_at is not None and now - self.last_used_at < LAST_USED_PRECISION:
            return
        stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_PRECISION)
        # Conditional, so that concurrent calls with one token write it once.
        ApiToken.objects.filter(stale, pk=self.pk).update(last_used_at=now)
        self.last_used_at = now
