from django.apps import AppConfig


class EvalstudyConfig(AppConfig):
    name = "evalstudy"
    verbose_name = "Studies"

    def ready(self):
        from kit import audit, rest

        from .audit import audit_record
        from .spec.errors import SpecInvalid, spec_problem_rows

        # The audited admin pages (kit.admin) write this app's trail.
        audit.recorder_register(audit_record)
        # A spec or item file with problems: 400 listing each, wherever an API view reads one.
        rest.file_problems_register(SpecInvalid, spec_problem_rows)
