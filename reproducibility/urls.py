app_name = "reproducibility"
urlpatterns: list = []
