from django.urls import path

from reproducibility import views

app_name = "reproducibility"

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
    path("runs/<uuid:uuid>/log/", views.test_log, name="test_log"),
    path("runs/<uuid:uuid>/log/shard-<int:index>/", views.shard_log, name="shard_log"),
    path("reruns/<uuid:uuid>/", views.rerun_detail, name="rerun_detail"),
    path(
        "runs/<uuid:uuid>/reproducibility/bisections/",
        views.bisection_create,
        name="bisection_create",
    ),
    path("bisections/<uuid:uuid>/", views.bisection_detail, name="bisection_detail"),
]
