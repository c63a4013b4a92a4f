import json
import sys

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from evalstudy.audit import COMMAND
from evalstudy.models import Rater
from evalstudy.privacy import NotAPerson, rater_data_erase, rater_data_export


def find_raters(key: str, kind: str | None, study: str | None = None) -> list[Rater]:
    """The raters whose database id or external id (e.g. a Prolific PID) is `key`. Raters
    belong to studies, so one person (one PID) who took part in several studies is several
    raters: a request about that person covers all of them (narrow with `study`)."""
    query = Q(external_id=key)
    if key.isdigit():
        query |= Q(pk=int(key))
    raters = Rater.objects.filter(query).select_related("study").order_by("pk")
    if kind:
        raters = raters.filter(kind=kind)
    if study:
        raters = raters.filter(Q(study__slug=study) | Q(enrollments__study__slug=study)
                               ).distinct()
    found = list(raters)
    if not found:
        raise CommandError(f"no rater with id or external id {key!r}")
    if len({r.kind for r in found}) > 1 and not kind:
        listed = ", ".join(f"id {r.pk} ({r.kind}, {r.external_id!r})" for r in found)
        raise CommandError(f"{key!r} matches raters of several kinds: {listed}; pass the id "
                           "or --kind")
    return found


class Command(BaseCommand):
    help = ("Export (JSON) or erase a rater's personal data: Prolific id, display name, "
            "metadata, account name and email, crowd session ids. Erasure keeps the rater "
            "under a pseudonym with all its judgments, so analyses do not change.")

    def add_arguments(self, parser):
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--export", metavar="RATER", help="rater id or external id")
        group.add_argument("--erase", metavar="RATER", help="rater id or external id")
        parser.add_argument("--kind", choices=Rater.Kind.values,
                            help="when an external id is used by raters of several kinds")
        parser.add_argument("--study", help="only the rater(s) of this study (slug)")
        parser.add_argument("--out", help="export: write the JSON here (default: standard "
                                          "output)")
        parser.add_argument("--yes", action="store_true", help="erase: do not ask")

    def handle(self, *args, export=None, erase=None, kind=None, study=None, out=None,
               yes=False, **options):
        if export:
            raters = find_raters(export, kind, study)
            documents = [rater_data_export(rater, file=out or "stdout", source=COMMAND)
                         for rater in raters]
            document = documents[0] if len(documents) == 1 else documents
            text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
            ids = ", ".join(str(rater.pk) for rater in raters)
            if out:
                with open(out, "w", encoding="utf-8") as handle:
                    handle.write(text)
                self.stdout.write(f"wrote the personal data of rater(s) {ids} to {out}")
            else:
                sys.stdout.write(text)
            return
        raters = find_raters(erase, kind, study)
        described = ", ".join(f"{rater.pk} ({rater.kind}"
                              f"{', study ' + rater.study.slug if rater.study else ''})"
                              for rater in raters)
        if not yes:
            if not sys.stdin.isatty():
                raise CommandError("erasing cannot be undone: pass --yes to confirm")
            answer = input(f"Erase the personal data of rater(s) {described}? "
                           "Judgments are kept. Type 'erase' to confirm: ")
            if answer.strip() != "erase":
                raise CommandError("not erased")
        for rater in raters:
            try:
                rater_data_erase(rater, source=COMMAND)
            except NotAPerson as error:
                raise CommandError(str(error)) from None
            rater.refresh_from_db()
            self.stdout.write(f"erased the personal data of rater {rater.pk}; it is now "
                              f"{rater.external_id!r} and keeps its judgments")
