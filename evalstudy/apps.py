from django.apps import AppConfig


class EvalstudyConfig(AppConfig):
    name = "evalstudy"
    verbose_name = "Studies"

    def ready(self):
        from django.db.models.signals import post_delete

        from kit import audit, rest

        from .audit import audit_record
        from .media import media_file_forget
        from .models import ItemMedia
        from .spec.errors import SpecInvalid, spec_problem_rows

        # The audited admin pages (kit.admin) write this app's trail.
        audit.recorder_register(audit_record)
        # A spec or item file with problems: 400 listing each, wherever an API view reads one.
        rest.file_problems_register(SpecInvalid, spec_problem_rows)
        # Stored media files leave with their rows, whichever way the rows are deleted.
        post_delete.connect(media_file_forget, sender=ItemMedia,
                            dispatch_uid="evalstudy.media_file_forget")
