import json
import os
import signal
import sys
import threading

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from evalstudy.audit import COMMAND
from evalstudy.management.base import get_study, wait_for_run
from proxies.methods import LEARNED_KINDS, learned_kind
from proxies.models import LearnedProxy
from proxies.training import learned_proxy_start, learned_proxy_train


class Stopped(BaseException):
    """Raised in the main thread by the SIGTERM / SIGHUP handler: unwinds the training (not an
    Exception, so that no `except Exception` on the way swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _stop(signum, frame):
    raise Stopped(signum)


class Command(BaseCommand):
    help = (
        "Train a learned proxy on a study's human judgments of one binary or severity "
        "criterion (train/dev/test split with no reference shared), pick its threshold on dev, "
        "report test AUC, and save it as a versioned artefact usable with "
        "`run_proxy --method learned --learned ID` on any study. Kind pairwise_logistic: "
        "on the human preferences of a pairwise criterion, from the study's stored metric "
        "results, cross-validated by reference; its out-of-fold answers are stored as a proxy "
        "rater's judgments."
    )

    def add_arguments(self, parser):
        parser.add_argument("--study", required=True, help="study slug")
        parser.add_argument("--criterion", required=True, help="criterion key")
        parser.add_argument("--kind", required=True, choices=sorted(LEARNED_KINDS))
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
                          f"{proxy.total} {'pairs' if learned_kind(kind).pairwise else 'outputs'}")
        if sync:
            proxy = self._train_here(proxy)
        else:
            wait_for_run(proxy, out=self.stdout._out, unit="output")
        if proxy.status == LearnedProxy.Status.FAILED:
            raise CommandError(proxy.error)
        report = proxy.report
        self.stdout.write(f"learned proxy {proxy.pk}: v{proxy.version} at {proxy.artifact_path}")
        if learned_kind(proxy.kind).pairwise:
            self._pairwise_report(report)
            return
        self.stdout.write("metrics: " + json.dumps(report.get("metrics", {}), default=str))
        self.stdout.write(f"threshold: {report.get('threshold')}")

    def _train_here(self, proxy: LearnedProxy) -> LearnedProxy:
        """Train in this process. SIGTERM (and SIGHUP) mark the training failed before the
        process exits (128 + the signal number); a SIGKILL cannot be caught, and is failed
        by the next status read on this host (`learned_proxies_fail_dead`)."""
        from django.db import connection

        from proxies.training import learned_proxy_fail

        # Signal handlers can only be set from the main thread (call_command elsewhere runs
        # without them).
        main = threading.current_thread() is threading.main_thread()
        previous = ({sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
                    if main else {})
        try:
            return learned_proxy_train(proxy.pk)
        except Stopped as stop:
            name = signal.Signals(stop.signum).name
            # The signal may have cut a query short: a fresh connection records the failure.
            connection.close()
            learned_proxy_fail(proxy_id=proxy.pk, error=(
                f"stopped by {name} (the process running it, pid {os.getpid()}, was asked to "
                "end) "
                "before it finished; start the training again"))
            self.stderr.write(f"learned proxy {proxy.pk}: stopped by {name}, marked failed")
            sys.exit(128 + stop.signum)
        except KeyboardInterrupt:
            connection.close()
            learned_proxy_fail(proxy_id=proxy.pk, error="interrupted (Ctrl-C) before it "
                               "finished; start the training again")
            raise
        except Exception as error:
            learned_proxy_fail(proxy_id=proxy.pk, error=f"{type(error).__name__}: {error}")
            raise CommandError(f"training failed: {error}") from None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _pairwise_report(self, report: dict) -> None:
        metrics = report.get("metrics") or {}
        cv = metrics.get("cv_accuracy") or {}
        self.stdout.write(
            f"cross-validated by reference ({metrics.get('folds')} folds), out of fold on "
            f"{metrics.get('pairs_predicted')} pairs ({metrics.get('labelled_pairs')} with a "
            f"human majority for A or B)")
        self.stdout.write("CV accuracy vs the human majority: " + ", ".join(
            f"{rule} {value:.3f}" if isinstance(value, float) else f"{rule} {value}"
            for rule, value in cv.items()))
        alone = metrics.get("features_alone") or {}
        if alone:
            self.stdout.write("each feature alone (ties_wrong): " + ", ".join(
                f"{name} {row['ties_wrong']['accuracy']:.3f}" for name, row in alone.items()
                if isinstance(row.get("ties_wrong", {}).get("accuracy"), float)))
        self.stdout.write("coefficients: " + json.dumps(metrics.get("coefficients", {})))
        if metrics.get("features_left_out"):
            self.stdout.write("features left out: "
                              + json.dumps(metrics["features_left_out"]))
        if report.get("answers_run"):
            self.stdout.write(f"answers stored by proxy run {report['answers_run']} as rater "
                              f"{report.get('answers_rater')!r} ({report.get('answers_status')})")
