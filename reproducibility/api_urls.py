"""The machine API of reproducibility, mounted under /api/ by crcr_site.api_urls."""

from django.urls import path

from reproducibility import api

urlpatterns = [
    path("runs/<uuid:uuid>/reproducibility/", api.RecordAPI.as_view(), name="record_detail"),
    path("runs/<uuid:uuid>/attestation/", api.AttestationAPI.as_view(), name="attestation_detail"),
    path("runs/<uuid:uuid>/bundles/", api.BundleListAPI.as_view(), name="bundle_list"),
    path(
        "runs/<uuid:uuid>/bundles/<uuid:bundle_uuid>/",
        api.BundleDetailAPI.as_view(),
        name="bundle_detail",
    ),
    path(
        "runs/<uuid:uuid>/bundles/<uuid:bundle_uuid>/download/",
        api.BundleDownloadAPI.as_view(),
        name="bundle_download",
    ),
    path(
        "runs/<uuid:uuid>/bundles/<uuid:bundle_uuid>/reruns/",
        api.RerunCreateAPI.as_view(),
        name="rerun_create",
    ),
    path("reruns/<uuid:uuid>/", api.RerunDetailAPI.as_view(), name="rerun_detail"),
    path("runs/<uuid:uuid>/bisections/", api.BisectionCreateAPI.as_view(), name="bisection_create"),
    path("bisections/<uuid:uuid>/", api.BisectionDetailAPI.as_view(), name="bisection_detail"),
]
