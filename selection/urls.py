from django.urls import path

from selection.views import (
    configpage,
    configprs,
    flaky,
    onboarding,
    pipeline,
    review,
    submissions,
    tests,
)

app_name = "selection"
urlpatterns = [
    path("review/", review.proposal_list, name="proposal_list"),
    path("review/bulk/", review.proposal_bulk, name="proposal_bulk"),
    path("review/<uuid:uuid>/", review.proposal_detail, name="proposal_detail"),
    path("review/<uuid:uuid>/review/", review.proposal_review, name="proposal_review"),
    path("review/<uuid:uuid>/edit/", review.proposal_edit, name="proposal_edit"),
    path("config-prs/", configprs.configchange_list, name="configchange_list"),
    path("config-prs/new/", configprs.configchange_create, name="configchange_create"),
    path("config-prs/<uuid:uuid>/", configprs.configchange_detail, name="configchange_detail"),
    path(
        "config-prs/<uuid:uuid>/approve/",
        configprs.configchange_approve,
        name="configchange_approve",
    ),
    path(
        "config-prs/<uuid:uuid>/comment/",
        configprs.configchange_comment,
        name="configchange_comment",
    ),
    path("config-prs/<uuid:uuid>/merge/", configprs.configchange_merge, name="configchange_merge"),
    path(
        "config-prs/<uuid:uuid>/rebase/", configprs.configchange_rebase, name="configchange_rebase"
    ),
    path(
        "config-versions/<uuid:uuid>/crcr-config.yaml",
        configprs.configversion_yaml,
        name="configversion_yaml",
    ),
    path(
        "config-versions/<uuid:uuid>/crcr-config.patch",
        configprs.configversion_patch,
        name="configversion_patch",
    ),
    path("backends/new/", onboarding.backend_create, name="backend_create"),
    path(
        "config-work/<uuid:uuid>/",
        submissions.configsubmission_detail,
        name="configsubmission_detail",
    ),
    path("configs/<slug:slug>/", configpage.backendconfig_detail, name="backendconfig_detail"),
    path(
        "configs/<slug:slug>/v<int:number>/",
        configpage.configversion_detail,
        name="configversion_detail",
    ),
    path(
        "configs/<slug:slug>/v<int:number>/blame/",
        configpage.configversion_blame,
        name="configversion_blame",
    ),
    path("flaky/", flaky.flaky_list, name="flaky_list"),
    path("tests/", tests.test_search, name="test_search"),
    path("operators/", pipeline.operator_list, name="operator_list"),
    path("operators/enable/", pipeline.operator_enable, name="operator_enable"),
    path("selection-runs/<uuid:uuid>/", pipeline.selectionrun_detail, name="selectionrun_detail"),
]
