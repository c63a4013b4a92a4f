from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from evalstudy.audit import COMMAND
from evalstudy.importers import items_import
from evalstudy.management.base import get_study, read_text, spec_errors
from evalstudy.media import path_source
from evalstudy.services import spec_limits
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.files import parse_items_file


class Command(BaseCommand):
    help = (
        "Add items and outputs to a draft study from CSV (item,system,output[,reference,"
        "context,metadata columns...]) or JSONL (one spec item per line). Atomic."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--study", required=True, help="study slug")
        parser.add_argument("--format", choices=["csv", "jsonl"], default=None,
                            help="default: from the file extension")
        parser.add_argument("--media", help="a directory or .zip archive holding the media "
                                            "files the items name by relative path (default: "
                                            "EVALSTUDY_MEDIA_IMPORT_ROOT)")

    def handle(self, *args, file, study, format=None, media=None, **options):
        fmt = format or Path(file).suffix.lower().lstrip(".")
        if fmt not in ("csv", "jsonl"):
            raise CommandError(f"{file}: cannot tell the format; pass --format csv or jsonl")
        target = get_study(study)
        try:
            limits = spec_limits()
            items = parse_items_file(read_text(file), file, fmt, limits)
            with path_source(media) as media_from:
                n_items, n_outputs = items_import(study=target, items=items, file_name=file,
                                                  limits=limits, source=COMMAND,
                                                  media_from=media_from)
        except SpecInvalid as error:
            raise spec_errors(error) from None
        self.stdout.write(f"{target.slug}: wrote {n_items} items and {n_outputs} outputs")
