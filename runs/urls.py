from django.urls import path

from runs import views

app_name = "runs"
urlpatterns = [
    path("", views.hud, name="hud"),
    path("runs/", views.run_list, name="run_list"),
]
