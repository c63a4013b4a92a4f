"""Sync a study's Prolific submissions now: `manage.py prolific_sync --study SLUG`."""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from evalstudy.models import AuditEvent, Study
from prolific.client import ProlificError
from prolific.services import NotLinked, prolific_sync, sync_summary


class Command(BaseCommand):
    help = ("Read a linked study's submissions from Prolific, match them to enrolments and "
            "free the seats of returned and timed-out participants.")

    def add_arguments(self, parser):
        parser.add_argument("--study", required=True, help="The study's slug.")

    def handle(self, *args, **options):
        study = Study.objects.filter(slug=options["study"]).first()
        if study is None:
            raise CommandError(f"No study {options['study']!r}.")
        try:
            counts = prolific_sync(study=study, actor=None, source=AuditEvent.Source.COMMAND)
        except (NotLinked, ProlificError, ValidationError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(sync_summary(counts))
