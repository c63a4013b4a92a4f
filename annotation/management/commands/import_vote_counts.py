from django.core.management.base import BaseCommand

from annotation.votes import POSITIONS, vote_counts_import
from evalstudy.audit import COMMAND
from evalstudy.management.base import get_study, read_text, spec_errors
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.files import parse_vote_counts_csv


class Command(BaseCommand):
    help = (
        "Load aggregated judgments, as published data sets ship them: CSV "
        "item,system,criterion,value,count (and system_b for a pairwise criterion), the number "
        "of people who gave each answer. Kept apart from named raters in every statistic. "
        "Atomic; re-importing a unit replaces its counts."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--study", required=True, help="study slug")
        parser.add_argument(
            "--position", choices=POSITIONS, default="shown",
            help="pairwise: 'shown' if system is the output people saw as A, 'unknown' if "
                 "A/B is only the file's order (then no position effect is estimated)")

    def handle(self, *args, file, study, position, **options):
        target = get_study(study)
        try:
            rows = parse_vote_counts_csv(read_text(file), file)
            counts = vote_counts_import(study=target, rows=rows, file_name=file,
                                        position=position, source=COMMAND)
        except SpecInvalid as error:
            raise spec_errors(error) from None
        self.stdout.write(f"{target.slug}: {counts.votes} votes on {counts.units} units "
                          f"({counts.replaced} replaced)")
