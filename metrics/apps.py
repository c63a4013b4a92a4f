from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "metrics"

    def ready(self):
        from evalstudy.admin.studies import study_admin_action_register

        from .admin import compute_metrics

        study_admin_action_register(compute_metrics)
