import sys

from django.core.management.base import BaseCommand

from evalstudy.audit import audit_record
from evalstudy.management.base import get_study
from metrics.selectors import metrics_write_csv


class Command(BaseCommand):
    help = "Write a study's metric results as tidy CSV: item,system,metric,value,..."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--csv", dest="path", default="-", help="file ('-': standard output)")
        parser.add_argument("--metrics", nargs="+", help="only these scorers")

    def handle(self, *args, slug, path="-", metrics=None, **options):
        study = get_study(slug)
        audit_record(actor=None, source="command", action="export", target=study,
                     changes={"what": "metric results", "format": "csv",
                              "file": "stdout" if path == "-" else path,
                              "metrics": metrics or "all"})
        if path == "-":
            metrics_write_csv(study, sys.stdout, metrics=metrics)
            return
        with open(path, "w", encoding="utf-8", newline="") as handle:
            rows = metrics_write_csv(study, handle, metrics=metrics)
        self.stdout.write(f"wrote {rows} rows to {path}")
