"""Loads the demo studies (one with audio, whose recordings it makes) and creates a demo
researcher and demo raters (idempotent)."""

import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand
from django.db import transaction
from django.urls import reverse

from evalstudy.audit import COMMAND
from evalstudy.importers import study_import_spec
from evalstudy.management.base import read_text, spec_errors
from evalstudy.media import media_source
from evalstudy.models import Assignment, Rater
from evalstudy.services import invitation_answer, rater_invite, study_open
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.study import parse_study_spec

DEMO_DIR = Path(settings.BASE_DIR) / "demo"
DEMO_SPECS = ("asr_meaning.yaml", "summary_preference.yaml", "asr_listening.yaml")
# Where the audio demo's recordings are made (speech from espeak-ng, else tones), by spec.
DEMO_MEDIA = {"asr_listening.yaml": "asr-listening"}
RESEARCHER = ("researcher", "researcher-demo")
# An account holder who signs in (as speech-language pathologists usually do) and is enrolled
# in every demo study.
DEMO_ACCOUNT = ("slp", "slp-demo", "Demo SLP (account)")
# Per demo study: (external id, kind, display name) of raters with personal entry links; a
# link works in its own study only.
DEMO_RATERS = (
    ("demo-1", Rater.Kind.SLP, "Demo rater 1"),
    ("demo-2", Rater.Kind.CROWD, "Demo rater 2"),
)


class Command(BaseCommand):
    help = "Load the demo studies, open them, and create demo accounts (safe to re-run)."

    def add_arguments(self, parser):
        parser.add_argument("--base-url", default=settings.SITE_URL)
        parser.add_argument("--migrate", action="store_true",
                            help="apply the migrations first, in the same process (make run: "
                                 "one Django start instead of two)")

    def handle(self, *args, base_url, migrate=False, **options):
        if migrate:
            from django.core.management import call_command

            call_command("migrate", interactive=False, verbosity=0)
        base_url = base_url.rstrip("/")
        links: list[tuple[str, str]] = []
        with transaction.atomic():
            researcher = self._researcher()
            account = self._account()
            for name in DEMO_SPECS:
                path = str(DEMO_DIR / name)
                try:
                    spec = parse_study_spec(read_text(path), path)
                    media = (media_source(directory=self._recordings(spec, DEMO_MEDIA[name]))
                             if name in DEMO_MEDIA else None)
                    study, outcome = study_import_spec(spec=spec, file_name=path,
                                                       owner=researcher, source=COMMAND,
                                                       media_from=media)
                except SpecInvalid as error:
                    raise spec_errors(error) from None
                study_open(study=study, source=COMMAND)
                seats = study.assignments.filter(source=Assignment.Source.DESIGN).count()
                self.stdout.write(f"demo study {study.slug}: {outcome}, open, {seats} seats")
                rater_invite(study=study, kind=Rater.Kind.SLP, user=account, source=COMMAND)
                # The demo account accepts at once (a real one answers on its page).
                invitation_answer(study=study, rater=Rater.objects.get(user=account),
                                  accept=True)
                for external_id, kind, display_name in DEMO_RATERS:
                    rater = (Rater.objects.filter(study=study, external_id=external_id).first()
                             or rater_invite(study=study, kind=kind, external_id=external_id,
                                             display_name=display_name, source=COMMAND))
                    link = base_url + reverse("annotation:enter", args=[rater.access_token])
                    links.append((f"{rater.display_name} ({study.slug})", link))
        user, password = RESEARCHER
        self.stdout.write("")
        self.stdout.write(f"Researcher: {base_url}/admin/  user {user!r}, password {password!r}")
        username, password, _ = DEMO_ACCOUNT
        self.stdout.write(f"Rater with an account: {base_url}/accounts/login/  user "
                          f"{username!r}, password {password!r}")
        self.stdout.write("Demo raters (personal links for one study each, no password needed):")
        for label, link in links:
            self.stdout.write(f"  {label:<40} {link}")

    def _recordings(self, spec, folder: str) -> Path:
        """The spoken sentences of the audio demo (each item's reference), made once: speech
        from espeak-ng when it is installed, else a tone per word (numpy)."""
        directory = Path(settings.VAR_DIR) / "demo-media" / folder
        directory.mkdir(parents=True, exist_ok=True)
        speak = shutil.which("espeak-ng")
        for item in spec.items:
            path = directory / item.media
            if not item.media or path.exists():
                continue
            if speak:
                subprocess.run([speak, "-s", "140", "-w", str(path), item.reference],  # noqa: S603
                               check=True, timeout=60, capture_output=True)
            else:
                _tones(path, len(item.reference.split()))
        if not speak:
            self.stdout.write("espeak-ng is not installed: the audio demo plays tones")
        return directory

    def _researcher(self):
        return demo_researcher()

    def _account(self):
        username, password, name = DEMO_ACCOUNT
        user, created = get_user_model().objects.get_or_create(
            username=username, defaults={"first_name": name})
        if created:
            user.set_password(password)
            user.save()
        return user


def demo_researcher():
    """The demo researcher (RESEARCHER: staff, not a superuser, with the study apps'
    permissions), created when missing. The tutorial's test signs in with it as make run's
    user does."""
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


def _tones(path: Path, words: int, rate: int = 16000) -> None:
    """A short tone per word, as 16-bit PCM WAV (the audio demo without espeak-ng)."""
    pieces = []
    for index in range(words):
        t = np.arange(int(0.3 * rate)) / rate
        pieces += [0.3 * np.sin(2 * np.pi * (330 + 40 * index) * t), np.zeros(int(0.1 * rate))]
    samples = (np.concatenate(pieces or [np.zeros(rate)]) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
