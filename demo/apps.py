from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "demo"
    verbose_name = "the main job (make run)"
