import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from evalstudy.audit import COMMAND
from evalstudy.management.base import get_study, wait_for_run
from proxies.learned_services import learned_proxy_start, learned_proxy_train
from proxies.models import LearnedProxy


class Command(BaseCommand):
    help = (
        "Train a learned proxy on a study's human judgments of one binary or severity "
        "criterion (train/dev/test split with no reference shared), pick its threshold on dev, "
        "report test AUC, and save it as a versioned artefact usable with "
        "`run_proxy --method learned --learned ID` on any study."
    )

    def add_arguments(self, parser):
        parser.add_argument("--study", required=True, help="study slug")
        parser.add_argument("--criterion", required=True, help="criterion key")
        parser.add_argument("--kind", required=True, choices=LearnedProxy.Kind.values)
        parser.add_argument("--name", default="", help="artefact name (default: derived)")
        parser.add_argument("--params", default="{}",
                            help='JSON, e.g. {"epochs": 3, "seed": 0, "target_precision": 0.9}')
        parser.add_argument("--sync", action="store_true", help="train here, without workers")

    def handle(self, *args, study, criterion, kind, name, params, sync, **options):
        try:
            parsed = json.loads(params)
        except json.JSONDecodeError as error:
            raise CommandError(f"--params is not valid JSON: {error}") from None
        try:
            proxy = learned_proxy_start(study=get_study(study), criterion_key=criterion,
                                        kind=kind, name=name, params=parsed, enqueue=not sync,
                                        source=COMMAND)
        except ValidationError as error:
            raise CommandError("; ".join(error.messages)) from None
        self.stdout.write(f"learned proxy {proxy.pk} ({proxy.name}, {proxy.kind}): training on "
                          f"{proxy.total} outputs")
        if sync:
            try:
                proxy = learned_proxy_train(proxy.pk)
            except Exception as error:
                from proxies.learned_services import learned_proxy_fail

                learned_proxy_fail(proxy_id=proxy.pk, error=f"{type(error).__name__}: {error}")
                raise CommandError(f"training failed: {error}") from None
        else:
            wait_for_run(proxy, out=self.stdout._out, unit="output")
        if proxy.status == LearnedProxy.Status.FAILED:
            raise CommandError(proxy.error)
        report = proxy.report
        self.stdout.write(f"learned proxy {proxy.pk}: v{proxy.version} at {proxy.artifact_path}")
        self.stdout.write("metrics: " + json.dumps(report.get("metrics", {}), default=str))
        self.stdout.write(f"threshold: {report.get('threshold')}")
