import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from evalstudy.audit import COMMAND
from evalstudy.management.base import get_study, judge_batches_here, wait_for_run
from metrics.models import MetricRun
from metrics.scorers.registry import DEFAULT_METRICS
from metrics.services import (
    metric_batch_score,
    metric_run_dispatch,
    metric_run_refresh,
    metric_run_start,
)


class Command(BaseCommand):
    help = (
        "Compute automatic metrics for every output of a study: on the Celery workers (default; "
        "waits and shows progress), or in this process with --sync. Results already stored "
        "for the same configuration are not computed again."
    )

    def add_arguments(self, parser):
        parser.add_argument("--study", required=True, help="study slug")
        parser.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS),
                            metavar="METRIC", help=f"default: {' '.join(DEFAULT_METRICS)}")
        parser.add_argument("--params", default="{}",
                            help='JSON {metric: {param: value}}, e.g. {"bertscore": {"idf": true}}')
        parser.add_argument("--model", default="",
                            help="encoder model directory (inside EVALSTUDY_MODEL_DIRS)")
        parser.add_argument("--sync", action="store_true", help="compute here, without workers")
        parser.add_argument("--no-wait", action="store_true", help="start and return at once")

    def handle(self, *args, study, metrics, params, model, sync, no_wait, **options):
        target = get_study(study)
        try:
            parsed = json.loads(params)
        except json.JSONDecodeError as error:
            raise CommandError(f"--params is not valid JSON: {error}") from None
        try:
            run = metric_run_start(study=target, metrics=metrics, params=parsed,
                                   model_path=model, enqueue=not sync, source=COMMAND)
        except ValidationError as error:
            raise CommandError("; ".join(error.messages)) from None
        self.stdout.write(f"metric run {run.pk}: {', '.join(run.metrics)} on "
                          f"{run.total // max(len(run.metrics), 1)} outputs")
        if sync:
            batches = []
            metric_run_dispatch(run, send=lambda kind, ids, names: batches.append((ids, names)))
            run = metric_run_refresh(run)
            judge_batches_here(
                run, batches, lambda batch: metric_batch_score(
                    run_id=run.pk, output_ids=batch[0], metrics=batch[1]),
                out=self.stdout._out, unit="result")
        elif not no_wait:
            wait_for_run(run, out=self.stdout._out, unit="result")
        run.refresh_from_db()
        self.stdout.write(f"metric run {run.pk}: {run.status}, {run.done}/{run.total} results, "
                          f"{run.failed_outputs} with errors")
        if run.status == MetricRun.Status.FAILED:
            raise CommandError(run.error)
