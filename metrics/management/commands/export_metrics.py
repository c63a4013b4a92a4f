import sys

from django.core.management.base import BaseCommand

from evalstudy.audit import COMMAND
from evalstudy.management.base import get_study
from metrics.services import metrics_export


class Command(BaseCommand):
    help = "Write a study's metric results as tidy CSV: item,system,metric,value,..."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--csv", dest="path", default="-", help="file ('-': standard output)")
        parser.add_argument("--metrics", nargs="+", help="only these scorers")

    def handle(self, *args, slug, path="-", metrics=None, **options):
        study = get_study(slug)
        if path == "-":
            metrics_export(study=study, stream=sys.stdout, metrics=metrics, file="stdout",
                           source=COMMAND)
            return
        with open(path, "w", encoding="utf-8", newline="") as handle:
            rows = metrics_export(study=study, stream=handle, metrics=metrics, file=path,
                                  source=COMMAND)
        self.stdout.write(f"wrote {rows} rows to {path}")
