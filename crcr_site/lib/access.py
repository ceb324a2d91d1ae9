"""Roles and the access checks every view uses.

Three roles, as Django groups: ``viewer`` reads everything, ``reviewer`` may also
approve, reject and merge, ``admin`` may also administer. A superuser is an admin.
A signed-in user without a group is a viewer.
"""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from rest_framework.permissions import BasePermission

VIEWER, REVIEWER, ADMIN = "viewer", "reviewer", "admin"
ROLES = (VIEWER, REVIEWER, ADMIN)


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


def roles(request: HttpRequest) -> dict[str, Any]:
    """Template context: the signed-in user's role, for showing or hiding actions."""
    role = role_of(request.user)
    return {"role": role, "can_review": role in (REVIEWER, ADMIN)}
