"""The one place every app's machine API is mounted: /api/, namespace `api`."""

from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

app_name = "api"
urlpatterns = [
    path("", include("runs.api_urls")),
    path("", include("reproducibility.api_urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The schema, browsable: for people signed in (machines read /api/schema/).
    path(
        "docs/",
        login_required(SpectacularSwaggerView.as_view(url_name="api:schema")),
        name="docs",
    ),
]
