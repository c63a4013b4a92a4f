from django.apps import AppConfig


class EvalstudyConfig(AppConfig):
    name = "evalstudy"
    verbose_name = "Studies"
