"""Loads the two demo studies and creates a demo researcher and demo raters (idempotent)."""

from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand
from django.db import transaction
from django.urls import reverse

from evalstudy.importers import study_import_spec
from evalstudy.management.base import read_text, spec_errors
from evalstudy.models import Rater
from evalstudy.services import study_open
from evalstudy.spec import SpecInvalid, parse_study_spec

DEMO_DIR = Path(settings.BASE_DIR) / "demo"
DEMO_SPECS = ("asr_meaning.yaml", "summary_preference.yaml")
RESEARCHER = ("researcher", "researcher-demo")
# (username, kind, display name)
DEMO_RATERS = (
    ("slp1", Rater.Kind.SLP, "Demo SLP 1"),
    ("slp2", Rater.Kind.SLP, "Demo SLP 2"),
    ("crowd1", Rater.Kind.CROWD, "Demo crowd rater 1"),
    ("crowd2", Rater.Kind.CROWD, "Demo crowd rater 2"),
)


class Command(BaseCommand):
    help = "Load the demo studies, open them, and create demo accounts (safe to re-run)."

    def add_arguments(self, parser):
        parser.add_argument("--base-url", default=settings.SITE_URL)

    def handle(self, *args, base_url, **options):
        base_url = base_url.rstrip("/")
        with transaction.atomic():
            researcher = self._researcher()
            for name in DEMO_SPECS:
                path = str(DEMO_DIR / name)
                try:
                    spec = parse_study_spec(read_text(path), path)
                    study, outcome = study_import_spec(spec=spec, source=path, owner=researcher)
                except SpecInvalid as error:
                    raise spec_errors(error) from None
                study_open(study=study)
                self.stdout.write(f"demo study {study.slug}: {outcome}, open, "
                                  f"{study.assignments.count()} seats")
            raters = [self._rater(*row) for row in DEMO_RATERS]
        user, password = RESEARCHER
        self.stdout.write("")
        self.stdout.write(f"Researcher: {base_url}/admin/  user {user!r}, password {password!r}")
        self.stdout.write("Demo raters (personal links, no password needed):")
        for rater in raters:
            link = base_url + reverse("annotation:enter", args=[rater.access_token])
            self.stdout.write(f"  {rater.display_name:<20} {link}")

    def _researcher(self):
        username, password = RESEARCHER
        user, created = get_user_model().objects.get_or_create(
            username=username, defaults={"is_staff": True, "first_name": "Demo researcher"}
        )
        if created:
            user.set_password(password)
            user.save()
            user.user_permissions.set(
                Permission.objects.filter(content_type__app_label__in=[
                    "evalstudy", "annotation", "metrics", "analysis"])
            )
        return user

    def _rater(self, username, kind, display_name):
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
            user.save()
        rater, _ = Rater.objects.get_or_create(
            user=user, defaults={"kind": kind, "display_name": display_name,
                                 "external_id": f"demo-{username}"},
        )
        return rater
