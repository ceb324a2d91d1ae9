"""Roles and the access checks every view uses.

Four roles, as Django groups: ``viewer`` reads everything, ``reviewer`` may also
approve, reject and merge, ``admin`` may also administer; ``machine`` is a
forwarder's token that may also post dispatches (which start runs whose results
reach the HUD) and reads like a viewer. A superuser is an admin. A signed-in
user without a group is a viewer.

Machines authenticate with hashed API tokens (``runs.ApiToken``), each scoped to the
backends it acts for: every machine endpoint checks the backend of what it touches
(``check_backend``), so one team's token cannot act for another's. People sign in
with a password, throttled by django-axes, whose lockout page is rendered here.
"""

from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission

VIEWER, REVIEWER, ADMIN, MACHINE = "viewer", "reviewer", "admin", "machine"
ROLES = (VIEWER, REVIEWER, ADMIN, MACHINE)


def role_of(user: Any) -> str | None:
    """The strongest role the user holds, or None for an anonymous visitor."""
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return ADMIN
    names = set(user.groups.values_list("name", flat=True))
    for role in (ADMIN, REVIEWER):
        if role in names:
            return role
    return VIEWER


def can_review(user: Any) -> bool:
    return role_of(user) in (REVIEWER, ADMIN)


def can_dispatch(user: Any) -> bool:
    """Only a machine user (or an admin) may post upstream events."""
    if not user.is_authenticated:
        return False
    if user.is_superuser:
        return True
    known = getattr(user, "may_dispatch", None)  # read with the token, when it was
    if known is not None:
        return bool(known)
    return bool(user.groups.filter(name__in=(MACHINE, ADMIN)).exists())


class RoleTokenAuthentication(TokenAuthentication):
    """`Authorization: Token <key>` against the hashed keys of `runs.ApiToken`,
    reading in the same query whether the token's user may dispatch (the intake
    is the hot path: one query less per dispatch)."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        # By label: crcr_site.lib sits below the runs app and imports none of it.
        tokens: Any = apps.get_model("runs", "ApiToken").objects
        may_dispatch = Group.objects.filter(user=OuterRef("user"), name__in=(MACHINE, ADMIN))
        found = tokens.matching(key).select_related("user")
        token = found.annotate(may_dispatch=Exists(may_dispatch)).first()
        if token is None:
            raise AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise AuthenticationFailed("User inactive or deleted.")
        token.note_use()
        token.user.may_dispatch = token.may_dispatch
        return token.user, token


def check_backend(request: Any, backend: Any) -> None:
    """403 unless the request's API token acts for `backend` (`ApiToken.may_act_for`).

    Called before anything is written, so a refused request changes nothing."""
    token = getattr(request, "auth", None)
    if token is None or not token.may_act_for(backend):
        raise exceptions.PermissionDenied(
            f"this token does not act for backend {backend.slug!r} "
            f"(manage.py tokens scope <prefix> --backend {backend.slug})"
        )


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any
) -> HttpResponse:
    """The page django-axes shows a sign-in refused for too many failures (429).

    Every refused attempt restarts the wait (axes' default), so the lockout
    ends one full lockout period after this request.
    """
    minutes = settings.CRCR_LOGIN_LOCKOUT_MINUTES
    context = {"minutes": minutes, "until": timezone.now() + timedelta(minutes=minutes)}
    return render(request, "registration/lockout.html", context, status=429)


def reviewer_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Strangers go to sign in; signed-in users without the reviewer role get 403."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not can_review(request.user):
            raise PermissionDenied("This action needs the reviewer role.")
        return view(request, *args, **kwargs)

    return wrapper


class IsReviewer(BasePermission):
    """DRF permission: the token's user holds the reviewer or admin role."""

    message = "This action needs the reviewer role."

    def has_permission(self, request: Any, view: Any) -> bool:
        return can_review(request.user)


class IsMachine(BasePermission):
    """DRF permission: the token's user holds the machine (or admin) role."""

    message = "Posting dispatches needs the machine role (manage.py create_user --role machine)."

    def has_permission(self, request: Any, view: Any) -> bool:
        return can_dispatch(request.user)


def roles(request: HttpRequest) -> dict[str, Any]:
    """Template context: the signed-in user's role, for showing or hiding actions.

    A request refused before the authentication middleware ran (a 400 for a malformed
    query string) has no user: its error page is drawn for an anonymous visitor."""
    user = getattr(request, "user", None)
    role = role_of(user) if user is not None else None
    return {"role": role, "can_review": role in (REVIEWER, ADMIN)}
