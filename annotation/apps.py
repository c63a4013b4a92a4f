from django.apps import AppConfig


class AnnotationConfig(AppConfig):
    name = "annotation"

    def ready(self):
        from evalstudy.admin.studies import study_admin_page_register
        from evalstudy.privacy import privacy_contribution_register

        from .admin import import_judgments_view
        from .privacy import CONTRIBUTION

        study_admin_page_register("<int:pk>/import-judgments/", import_judgments_view,
                                  "evalstudy_study_import_judgments")
        privacy_contribution_register(CONTRIBUTION)
