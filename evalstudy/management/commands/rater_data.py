import json
import sys

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from evalstudy.audit import audit_record
from evalstudy.models import AuditEvent, Rater
from evalstudy.privacy import NotAPerson, rater_data_erase, rater_data_export


def find_rater(key: str, kind: str | None) -> Rater:
    """The rater whose database id or external id (e.g. a Prolific PID) is `key`."""
    query = Q(external_id=key)
    if key.isdigit():
        query |= Q(pk=int(key))
    raters = Rater.objects.filter(query)
    if kind:
        raters = raters.filter(kind=kind)
    found = list(raters[:5])
    if not found:
        raise CommandError(f"no rater with id or external id {key!r}")
    if len(found) > 1:
        listed = ", ".join(f"id {r.pk} ({r.kind}, {r.external_id!r})" for r in found)
        raise CommandError(f"{key!r} matches several raters: {listed}; pass the id or --kind")
    return found[0]


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
        parser.add_argument("--out", help="export: write the JSON here (default: standard "
                                          "output)")
        parser.add_argument("--yes", action="store_true", help="erase: do not ask")

    def handle(self, *args, export=None, erase=None, kind=None, out=None, yes=False, **options):
        if export:
            rater = find_rater(export, kind)
            text = json.dumps(rater_data_export(rater), indent=2, ensure_ascii=False) + "\n"
            audit_record(actor=None, source=AuditEvent.Source.COMMAND,
                         action=AuditEvent.Action.EXPORT, target=("evalstudy.rater", rater.pk,
                                                                  f"rater {rater.pk}"),
                         changes={"what": "personal data", "format": "json",
                                  "file": out or "stdout"})
            if out:
                with open(out, "w", encoding="utf-8") as handle:
                    handle.write(text)
                self.stdout.write(f"wrote the personal data of rater {rater.pk} to {out}")
            else:
                sys.stdout.write(text)
            return
        rater = find_rater(erase, kind)
        if not yes:
            if not sys.stdin.isatty():
                raise CommandError("erasing cannot be undone: pass --yes to confirm")
            answer = input(f"Erase the personal data of rater {rater.pk} ({rater.kind})? "
                           "Judgments are kept. Type 'erase' to confirm: ")
            if answer.strip() != "erase":
                raise CommandError("not erased")
        try:
            rater_data_erase(rater, actor=None, source=AuditEvent.Source.COMMAND)
        except NotAPerson as error:
            raise CommandError(str(error)) from None
        rater.refresh_from_db()
        self.stdout.write(f"erased the personal data of rater {rater.pk}; it is now "
                          f"{rater.external_id!r} and keeps its judgments")
