from django.urls import include, path

from reproducibility import api, views

app_name = "reproducibility"

# Token-authenticated machine API, under /api/ like runs.api_urls.
api_urlpatterns = [
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

urlpatterns = [
    path("runs/<uuid:uuid>/reproducibility/", views.record_detail, name="record_detail"),
    path(
        "runs/<uuid:uuid>/reproducibility/attestation.json",
        views.attestation_detail,
        name="attestation_detail",
    ),
    path("runs/<uuid:uuid>/reproducibility/bundles/", views.bundle_create, name="bundle_create"),
    path(
        "runs/<uuid:uuid>/reproducibility/bundles/<uuid:bundle_uuid>/download/",
        views.bundle_download,
        name="bundle_download",
    ),
    path(
        "runs/<uuid:uuid>/reproducibility/bundles/<uuid:bundle_uuid>/rerun/",
        views.rerun_create,
        name="rerun_create",
    ),
    path("reruns/<uuid:uuid>/", views.rerun_detail, name="rerun_detail"),
    path(
        "runs/<uuid:uuid>/reproducibility/bisections/",
        views.bisection_create,
        name="bisection_create",
    ),
    path("bisections/<uuid:uuid>/", views.bisection_detail, name="bisection_detail"),
    path("api/", include((api_urlpatterns, "api"))),
]
