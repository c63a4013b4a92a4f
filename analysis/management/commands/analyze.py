from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from analysis.exports import judgments_export, report_export
from analysis.selectors import JudgmentFilter
from analysis.services import analysis_run_execute, analysis_run_start
from evalstudy.audit import COMMAND
from evalstudy.management.base import get_study


class Command(BaseCommand):
    help = ("Analyse a study (descriptives, mixed models, agreement, proxies vs humans) and write "
            "the results as JSON and the report as HTML and/or PDF.")

    def add_arguments(self, parser):
        parser.add_argument("--study", required=True)
        parser.add_argument("--json", help="write every statistic as JSON")
        parser.add_argument("--html", help="write the HTML report")
        parser.add_argument("--pdf", help="write the PDF report")
        parser.add_argument("--judgments-csv", help="write the tidy judgment table as CSV")
        parser.add_argument("--stats-csv", help="write every statistic as a tidy CSV")
        parser.add_argument("--formula", help="model formula, e.g. 'rating ~ temp + contact + "
                                              "(1|rater)' (terms may name system/item metadata)")
        parser.add_argument("--engine", default="auto",
                            choices=["auto", "R", "pymer4", "statsmodels"])
        parser.add_argument("--include-calibration", action="store_true")
        parser.add_argument("--exclude-attention-failed", action="store_true")
        parser.add_argument("--exclude-incomplete", action="store_true")
        parser.add_argument("--exclude-unheard", action="store_true",
                            help="leave out judgments of audio or video not heard to the end")
        parser.add_argument("--raters", choices=["all", "human", "proxy"], default="all")
        parser.add_argument("--include-excluded", action="store_true",
                            help="keep the raters a researcher excluded from the analysis")
        parser.add_argument("--min-competence", type=float, metavar="THETA",
                            help="leave out raters whose MACE competence (0..1) is below THETA")
        parser.add_argument("--separation", choices=["auto", "penalised", "off"], default="auto",
                            help="binary criteria with separation (a system at 0%% or 100%%): "
                                 "add a penalised GLMM (blme::bglmer) when detected (auto), "
                                 "always (penalised), or only diagnose (off)")
        parser.add_argument("--deployment-group", metavar="FIELD",
                            help="item metadata field the deployment table groups by within "
                                 "each system (default: speaker, when items have it)")

    def handle(self, *args, study, **options):
        target = get_study(study)
        filters = {
            "include_calibration": options["include_calibration"],
            "exclude_attention_failed": options["exclude_attention_failed"],
            "exclude_incomplete": options["exclude_incomplete"], "raters": options["raters"],
            "exclude_unheard": options["exclude_unheard"],
            "include_excluded": options["include_excluded"],
            "min_competence": options["min_competence"],
        }
        run_options = {"filters": filters, "engine": options["engine"],
                       "pdf": bool(options["pdf"]), "separation": options["separation"]}
        if options["deployment_group"]:
            run_options["deployment_group"] = options["deployment_group"]
        if options["formula"]:
            run_options["formula"] = options["formula"]
        try:
            run = analysis_run_start(study=target, options=run_options, enqueue=False,
                                     source=COMMAND)
        except ValidationError as error:
            raise CommandError("; ".join(error.messages)) from None
        run = analysis_run_execute(run)
        # Each file asked for, from the services that record the export (evalstudy.audit).
        for option, fmt in (("json", "json"), ("html", "html"), ("pdf", "pdf"),
                            ("stats_csv", "stats_csv")):
            if options[option]:
                Path(options[option]).write_bytes(report_export(
                    run=run, fmt=fmt, file=options[option], source=COMMAND))
        if options["judgments_csv"]:
            Path(options["judgments_csv"]).write_bytes(judgments_export(
                study=target, filters=JudgmentFilter(**filters), fmt="csv",
                file=options["judgments_csv"], source=COMMAND))
        warnings = run.result.get("warnings", [])
        self.stdout.write(f"analysis {run.pk} of {target.slug}: {run.status} in "
                          f"{run.result.get('seconds')} s, {len(warnings)} warning(s)")
        for warning in warnings:
            self.stdout.write(f"  warning: {warning}")
