import sys

from django.core.management.base import BaseCommand

from evalstudy.audit import COMMAND
from evalstudy.management.base import get_study
from evalstudy.services import design_export


class Command(BaseCommand):
    help = "Write every list seat of a study as CSV: list,position,item,system,kind,..."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--csv", dest="path", default="-", help="file ('-': standard output)")

    def handle(self, *args, slug, path="-", **options):
        study = get_study(slug)
        if path == "-":
            design_export(study=study, stream=sys.stdout, file="stdout", source=COMMAND)
            return
        with open(path, "w", encoding="utf-8", newline="") as handle:
            rows = design_export(study=study, stream=handle, file=path, source=COMMAND)
        self.stdout.write(f"wrote {rows} slots of {study.assignments.count()} seats to {path}")
