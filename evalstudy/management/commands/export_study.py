import json
import sys

import yaml
from django.core.management.base import BaseCommand

from evalstudy.audit import COMMAND
from evalstudy.importers import study_spec_export
from evalstudy.management.base import get_study


class Command(BaseCommand):
    help = "Write a study back as a spec (YAML by default) that import_study reads."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--output", "-o", help="file to write (default: standard output)")
        parser.add_argument("--format", choices=["yaml", "json"], default=None,
                            help="default: from the file name, else yaml")

    def handle(self, *args, slug, output=None, format=None, **options):
        study = get_study(slug)
        fmt = format or ("json" if output and output.endswith(".json") else "yaml")
        document = study_spec_export(study=study, fmt=fmt, file=output or "stdout",
                                     source=COMMAND)
        if fmt == "json":
            text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        else:
            text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
        if output:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
            self.stdout.write(f"wrote {output}")
        else:
            sys.stdout.write(text)
