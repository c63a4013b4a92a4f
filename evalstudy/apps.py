from django.apps import AppConfig


class EvalstudyConfig(AppConfig):
    name = "evalstudy"
    verbose_name = "Studies"

    def ready(self):
        from . import checks  # noqa: F401 - registers the deploy checks
