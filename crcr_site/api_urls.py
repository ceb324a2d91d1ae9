"""The one place every app's machine API is mounted: /api/, namespace `api`."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.request import Request
from rest_framework.response import Response


class ApiDocsView(SpectacularSwaggerSplitView):
    """drf-spectacular's Swagger page, drawn inside crcr's frame with "API" as its section."""

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().get(request, *args, **kwargs)
        response.data["nav"] = "api"
        return response


app_name = "api"
urlpatterns = [
    path("", include("runs.api_urls")),
    path("", include("reproducibility.api_urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The schema, browsable: for people signed in (machines read /api/schema/). Its
    # start-up script is served apart (`?script`) and its styles from files, as the
    # Content-Security-Policy asks (crcr_site/lib/csp.py).
    path(
        "docs/",
        login_required(ApiDocsView.as_view(url_name="api:schema", template_name="api_docs.html")),
        name="docs",
    ),
]
