from django.core.management.base import BaseCommand

from annotation.services import judgments_import
from evalstudy.audit import COMMAND
from evalstudy.management.base import get_study, read_text, spec_errors
from evalstudy.models import Rater
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.files import parse_judgments_csv


class Command(BaseCommand):
    help = (
        "Load ratings made elsewhere, in tidy CSV: rater,item,system,criterion,value "
        "(optional rater_kind, and system_b for pairwise criteria). Atomic; safe to re-run."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--study", required=True, help="study slug")
        parser.add_argument("--rater-kind", default=Rater.Kind.EXPERT, choices=Rater.Kind.values,
                            help="kind for rows without a rater_kind column value")

    def handle(self, *args, file, study, rater_kind, **options):
        target = get_study(study)
        try:
            rows = parse_judgments_csv(read_text(file), file)
            counts = judgments_import(study=target, rows=rows, file_name=file,
                                      default_rater_kind=rater_kind, source=COMMAND)
        except SpecInvalid as error:
            raise spec_errors(error) from None
        self.stdout.write(
            f"{target.slug}: {counts.created} judgments created, {counts.revised} revised, "
            f"{counts.unchanged} unchanged"
        )
