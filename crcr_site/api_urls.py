"""The one place every app's machine API is mounted: /api/, namespace `api`."""

from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

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
        login_required(
            SpectacularSwaggerSplitView.as_view(
                url_name="api:schema", template_name="api_docs.html"
            )
        ),
        name="docs",
    ),
]
