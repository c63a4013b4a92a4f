from django.apps import AppConfig


class ProlificConfig(AppConfig):
    name = "prolific"
    verbose_name = "Prolific"

    def ready(self):
        from annotation.monitor_views import monitor_section_register
        from evalstudy.privacy import privacy_contribution_register

        from .privacy import CONTRIBUTION
        from .views import monitor_section

        privacy_contribution_register(CONTRIBUTION)
        monitor_section_register(monitor_section)
