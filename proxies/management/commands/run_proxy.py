import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from evalstudy.audit import COMMAND
from evalstudy.criteria import BINARY_KINDS
from evalstudy.management.base import get_study, judge_batches_here, wait_for_run
from proxies.methods import METHODS
from proxies.models import LearnedProxy, ProxyRun
from proxies.runs import (
    latte_scores,
    proxy_batch_judge,
    proxy_run_dispatch,
    proxy_run_start,
    proxy_threshold_choose,
)


def _json(option: str, text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandError(f"{option} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise CommandError(f"{option} must be a JSON object")
    return value


class Command(BaseCommand):
    help = (
        "Run a proxy judge (LLM: latte, rubric, drpe; or a trained learned proxy) over every "
        "unit of a study; its answers are stored as judgments of a non-human rater. Runs on "
        "the Celery workers (default; waits and shows progress) or here with --sync. Answers "
        "already stored, or cached for the same model and prompt, cost nothing again."
    )

    def add_arguments(self, parser):
        parser.add_argument("--study", required=True, help="study slug")
        parser.add_argument("--method", required=True, choices=METHODS)
        parser.add_argument("--criteria", nargs="+", metavar="KEY",
                            help="criterion keys (default: every criterion the method answers)")
        parser.add_argument("--backend", default="{}",
                            help='JSON, e.g. {"base_url": "http://127.0.0.1:8080/v1", '
                                 '"model": "llama3", "api_key_env": "MY_KEY"} or '
                                 '{"backend": "hf", "model_path": "/models/flan-t5"}')
        parser.add_argument("--template-file", help="LATTE prompt template ({reference}, "
                                                    "{output})")
        parser.add_argument("--params", default="{}", help='JSON, e.g. {"threshold": 0.85}')
        parser.add_argument("--learned", type=int, metavar="ID",
                            help="learned proxy id (for --method learned)")
        parser.add_argument("--choose-threshold", metavar="KEY",
                            help="afterwards, choose the threshold on a dev split of this "
                                 "criterion's human labels")
        parser.add_argument("--target-precision", type=float, default=0.9)
        parser.add_argument("--latte-by", metavar="FIELD",
                            help="afterwards, print LATTEScore per system, item or metadata "
                                 "field")
        parser.add_argument("--sync", action="store_true", help="judge here, without workers")
        parser.add_argument("--no-wait", action="store_true", help="start and return at once")

    def handle(self, *args, study, method, criteria, backend, template_file, params, learned,
               choose_threshold, target_precision, latte_by, sync, no_wait, **options):
        target = get_study(study)
        template = ""
        if template_file:
            try:
                with open(template_file, encoding="utf-8") as handle:
                    template = handle.read()
            except OSError as error:
                raise CommandError(f"{template_file}: {error.strerror}") from None
        learned_proxy = None
        if learned is not None:
            learned_proxy = LearnedProxy.objects.filter(pk=learned).first()
            if learned_proxy is None:
                raise CommandError(f"no learned proxy with id {learned}")
        try:
            run = proxy_run_start(
                study=target, method=method, criteria=criteria,
                backend=_json("--backend", backend) or None, template=template,
                params=_json("--params", params), learned_proxy=learned_proxy,
                enqueue=not sync, source=COMMAND)
        except ValidationError as error:
            raise CommandError("; ".join(error.messages)) from None
        self.stdout.write(f"proxy run {run.pk}: {run.method} as rater "
                          f"{run.rater.external_id!r} on {', '.join(run.criteria)} "
                          f"({run.total} answers, queue {run.queue})")
        if sync or not no_wait:
            self._follow(run, sync=sync)
        run.refresh_from_db()
        usage = run.usage
        self.stdout.write(f"proxy run {run.pk}: {run.status}, {run.done}/{run.total} answers, "
                          f"{run.failed} unreadable; usage {json.dumps(usage)}")
        if run.status == ProxyRun.Status.FAILED:
            raise CommandError(run.error)
        if no_wait:
            return
        if choose_threshold:
            try:
                report = proxy_threshold_choose(run, criterion_key=choose_threshold,
                                                target_precision=target_precision,
                                                enqueue=not sync, source=COMMAND)
            except ValidationError as error:
                raise CommandError("; ".join(error.messages)) from None
            self.stdout.write(f"threshold {report['threshold']:.3f}: dev {report['dev']}, "
                              f"test {report['test']}")
            run = ProxyRun.objects.get(pk=report["run"])
            self.stdout.write(f"proxy run {run.pk} decides at that threshold as rater "
                              f"{run.rater.external_id!r}")
            self._follow(run, sync=sync)
        if latte_by:
            key = choose_threshold or next(
                (c for c in run.criteria
                 if target.criteria.get(key=c).kind in BINARY_KINDS), None)
            if key is None:
                raise CommandError("--latte-by needs a binary or severity criterion")
            for row in latte_scores(run, criterion_key=key, by=latte_by):
                self.stdout.write(f"{latte_by}={row['group']}: LATTEScore {row['latte_score']}"
                                  f" (n={row['n']})")

    def _follow(self, run, *, sync: bool) -> None:
        """Judge here (--sync) or wait for the workers, with a progress bar."""
        if sync:
            batches = []
            proxy_run_dispatch(run, send=lambda queue, ids: batches.append(ids))
            judge_batches_here(run, batches,
                               lambda ids: proxy_batch_judge(run_id=run.pk, slot_ids=ids),
                               out=self.stdout._out, unit="answer")
        else:
            wait_for_run(run, out=self.stdout._out, unit="answer")
        run.refresh_from_db()
