from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from evalstudy.audit import COMMAND
from evalstudy.importers import study_import_spec
from evalstudy.management.base import read_text, spec_errors
from evalstudy.media import path_source
from evalstudy.services import spec_limits, study_open
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.limits import check_spec_size
from evalstudy.spec.study import parse_study_spec


class Command(BaseCommand):
    help = "Create or update a study from a spec file (YAML or JSON). Atomic; safe to re-run."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--owner", help="username of the researcher who owns the study")
        parser.add_argument("--open", action="store_true", help="open the study for raters")
        parser.add_argument("--media", help="a directory or .zip archive holding the media "
                                            "files the items name by relative path (default: "
                                            "EVALSTUDY_MEDIA_IMPORT_ROOT)")

    def handle(self, *args, file, owner=None, open=False, **options):
        owner_user = None
        if owner:
            owner_user = get_user_model().objects.filter(username=owner).first()
            if owner_user is None:
                raise CommandError(f"no user {owner!r}")
        limits = spec_limits()
        try:
            # By its size on disk first: an oversized spec is refused unread.
            size = Path(file).stat().st_size if Path(file).is_file() else 0
            check_spec_size(size, file, limits)
            spec = parse_study_spec(read_text(file), file, limits)
            with path_source(options.get("media")) as media_from:
                study, outcome = study_import_spec(spec=spec, file_name=file, owner=owner_user,
                                                   source=COMMAND, media_from=media_from)
        except SpecInvalid as error:
            raise spec_errors(error) from None
        self.stdout.write(
            f"{outcome} study {study.slug}: {study.systems.count()} systems, "
            f"{study.items.count()} items, {study.criteria.count()} criteria"
        )
        if open:
            try:
                study = study_open(study=study, source=COMMAND)
            except ValidationError as error:
                raise CommandError("cannot open: " + "; ".join(error.messages)) from None
            self.stdout.write(f"opened with {study.assignments.count()} seats")
