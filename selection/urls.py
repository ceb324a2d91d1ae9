from django.urls import path

from selection import views

app_name = "selection"
urlpatterns = [
    path("review/", views.proposal_list, name="proposal_list"),
    path("review/<uuid:uuid>/review/", views.proposal_review, name="proposal_review"),
    path("config-prs/", views.configchange_list, name="configchange_list"),
    path("operators/", views.operator_list, name="operator_list"),
]
