from django.apps import AppConfig


class KitConfig(AppConfig):
    """Installed for its deploy checks; the kit has no tables (its models are abstract)."""

    name = "kit"
    verbose_name = "Shared kit"

    def ready(self):
        from . import checks  # noqa: F401 - registers the deploy checks
