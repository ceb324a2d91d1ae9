"""The one place every app's machine API is mounted: /api/, namespace `api`."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

app_name = "api"
urlpatterns = [
    path("", include("runs.api_urls")),
    path("", include("reproducibility.api_urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
]
