from django.apps import AppConfig


class ReproducibilityConfig(AppConfig):
    name = "reproducibility"
    verbose_name = "Reproducibility"
