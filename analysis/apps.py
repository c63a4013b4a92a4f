from django.apps import AppConfig


class AnalysisConfig(AppConfig):
    name = "analysis"

    def ready(self):
        from evalstudy.admin.studies import study_admin_action_register
        from evalstudy.privacy import privacy_contribution_register

        from .admin import run_analysis
        from .privacy import CONTRIBUTION

        study_admin_action_register(run_analysis)
        privacy_contribution_register(CONTRIBUTION)
