from django.urls import path

from selection import configpr_views, pipeline_views, views

app_name = "selection"
urlpatterns = [
    path("review/", views.proposal_list, name="proposal_list"),
    path("review/bulk/", views.proposal_bulk, name="proposal_bulk"),
    path("review/<uuid:uuid>/", views.proposal_detail, name="proposal_detail"),
    path("review/<uuid:uuid>/review/", views.proposal_review, name="proposal_review"),
    path("review/<uuid:uuid>/edit/", views.proposal_edit, name="proposal_edit"),
    path("config-prs/", configpr_views.configchange_list, name="configchange_list"),
    path("config-prs/new/", configpr_views.configchange_create, name="configchange_create"),
    path("config-prs/<uuid:uuid>/", configpr_views.configchange_detail, name="configchange_detail"),
    path(
        "config-prs/<uuid:uuid>/approve/",
        configpr_views.configchange_approve,
        name="configchange_approve",
    ),
    path(
        "config-prs/<uuid:uuid>/comment/",
        configpr_views.configchange_comment,
        name="configchange_comment",
    ),
    path(
        "config-prs/<uuid:uuid>/merge/",
        configpr_views.configchange_merge,
        name="configchange_merge",
    ),
    path(
        "config-prs/<uuid:uuid>/rebase/",
        configpr_views.configchange_rebase,
        name="configchange_rebase",
    ),
    path(
        "config-versions/<uuid:uuid>/crcr-config.yaml",
        configpr_views.configversion_yaml,
        name="configversion_yaml",
    ),
    path(
        "config-versions/<uuid:uuid>/crcr-config.patch",
        configpr_views.configversion_patch,
        name="configversion_patch",
    ),
    path("operators/", pipeline_views.operator_list, name="operator_list"),
]
