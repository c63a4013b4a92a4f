import sys

from django.core.management.base import BaseCommand

from evalstudy.audit import audit_record
from evalstudy.management.base import get_study
from evalstudy.selectors import design_write_csv


class Command(BaseCommand):
    help = "Write every list seat of a study as CSV: list,position,item,system,kind,..."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--csv", dest="path", default="-", help="file ('-': standard output)")

    def handle(self, *args, slug, path="-", **options):
        study = get_study(slug)
        audit_record(actor=None, source="command", action="export", target=study,
                     changes={"what": "design", "format": "csv",
                              "file": "stdout" if path == "-" else path})
        if path == "-":
            design_write_csv(study, sys.stdout)
            return
        with open(path, "w", encoding="utf-8", newline="") as handle:
            rows = design_write_csv(study, handle)
        self.stdout.write(f"wrote {rows} slots of {study.assignments.count()} seats to {path}")
