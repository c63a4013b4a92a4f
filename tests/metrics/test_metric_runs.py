"""Metric runs end to end: sync command, idempotency, errors per output, export, API, and real
workers (including one killed mid-run with SIGKILL)."""

import csv
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from evalstudy.models import Item, Output
from metrics.models import MetricResult, MetricRun
from metrics.services import metric_run_start
from tests.factories import UserFactory, make_study
from tests.workers import running_worker, start_worker, stop_worker, wait_for

TEXT_METRICS = ["wer", "cer", "bleu", "chrf", "rouge"]


@pytest.fixture
def asr_study(db):
    study = make_study(n_items=3, n_systems=2)
    texts = {
        "item-000": ("the cat sat on the mat", ["the cat sat on the mat", "the cat sit on mat"]),
        "item-001": ("turn on the kitchen light", ["turn on the kitchen light please",
                                                   "turn of the light"]),
        "item-002": ("call my sister at seven", ["call my sister at eleven", ""]),
    }
    for external_id, (reference, outputs) in texts.items():
        item = Item.objects.get(study=study, external_id=external_id)
        item.reference = reference
        item.save()
        for system_name, text in zip(["sys-0", "sys-1"], outputs, strict=True):
            Output.objects.filter(item=item, system__name=system_name).update(text=text)
    return study


def _wer(study, item, system):
    result = MetricResult.objects.get(output__item__study=study, output__item__external_id=item,
                                      output__system__name=system, config__metric="wer")
    return result.values


def test_sync_command_computes_everything_once(asr_study, capsys):
    call_command("compute_metrics", "--study", asr_study.slug, "--sync", "--metrics",
                 *TEXT_METRICS)
    assert "done, 30/30 results" in capsys.readouterr().out
    values = _wer(asr_study, "item-000", "sys-1")
    assert (values["substitutions"], values["deletions"], values["hits"]) == (1, 1, 4)
    assert values["wer"] == pytest.approx(2 / 6)
    assert _wer(asr_study, "item-002", "sys-1")["wer"] == 1.0  # empty hypothesis: all deleted
    ids = set(MetricResult.objects.values_list("id", flat=True))
    call_command("compute_metrics", "--study", asr_study.slug, "--sync", "--metrics",
                 *TEXT_METRICS)
    assert set(MetricResult.objects.values_list("id", flat=True)) == ids, "nothing recomputed"
    assert MetricRun.objects.filter(status="done").count() == 2


def test_one_bad_output_gets_an_error_and_the_run_finishes(asr_study):
    Item.objects.filter(study=asr_study, external_id="item-001").update(reference="")
    call_command("compute_metrics", "--study", asr_study.slug, "--sync", "--metrics", "wer")
    run = MetricRun.objects.get()
    assert run.status == "done" and run.failed_outputs == 2
    broken = MetricResult.objects.filter(output__item__external_id="item-001")
    assert all("reference is empty" in result.error for result in broken)


def test_unknown_metric_and_bad_params_are_refused(asr_study):
    with pytest.raises(CommandError, match="unknown metric 'wre'"):
        call_command("compute_metrics", "--study", asr_study.slug, "--metrics", "wre")
    with pytest.raises(CommandError, match="not valid JSON"):
        call_command("compute_metrics", "--study", asr_study.slug, "--params", "{x")
    assert not MetricRun.objects.exists()


def test_export_metrics_tidy_csv(asr_study, tmp_path):
    call_command("compute_metrics", "--study", asr_study.slug, "--sync", "--metrics", "wer",
                 "bleu")
    path = tmp_path / "m.csv"
    call_command("export_metrics", asr_study.slug, "--csv", str(path))
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0])[:4] == ["item", "system", "metric", "value"]
    wer = [r for r in rows if r["metric"] == "wer" and r["item"] == "item-000"
           and r["system"] == "sys-1"]
    assert float(wer[0]["value"]) == pytest.approx(2 / 6)
    assert {"sub_rate", "del_rate", "ins_rate", "word_acc", "bleu"} <= {r["metric"] for r in rows}
    assert "jiwer" in wer[0]["signature"]


def test_metrics_page_and_api(asr_study):
    user = UserFactory(username="metrics-res", is_staff=True)
    asr_study.owner = user
    asr_study.save()
    client = Client()
    client.force_login(user)
    response = client.post(reverse("api-study-metric-runs", args=[asr_study.slug]),
                           {"metrics": ["wer"]}, content_type="application/json")
    assert response.status_code == 202
    run = MetricRun.objects.get()
    assert response["Location"].endswith(reverse("api-metric-run", args=[run.pk]))
    bad = client.post(reverse("api-study-metric-runs", args=[asr_study.slug]),
                      {"metrics": ["nope"]}, content_type="application/json")
    assert bad.status_code == 400 and "unknown metric" in bad.json()["message"]
    from metrics.services import metric_batch_score, metric_run_dispatch

    batches = []
    metric_run_dispatch(run, send=lambda kind, ids, names: batches.append((ids, names)))
    for ids, names in batches:
        metric_batch_score(run_id=run.pk, output_ids=ids, metrics=names)
    status = client.get(reverse("api-metric-run", args=[run.pk])).json()
    assert (status["status"], status["done"], status["total"]) == ("done", 6, 6)
    results = client.get(reverse("api-metric-results", args=[asr_study.slug])).json()
    assert results["count"] == 6
    assert {row["metric"] for row in results["results"]} >= {"wer", "sub_rate"}
    page = client.get(reverse("metrics:page", args=[asr_study.slug])).content.decode()
    assert '<del title="missing">the</del>' in page  # the WER alignment, highlighted
    other = Client()
    other.force_login(UserFactory(username="stranger", is_staff=True))
    assert other.get(reverse("api-metric-run", args=[run.pk])).status_code == 404
    assert other.get(reverse("metrics:page", args=[asr_study.slug])).status_code == 404


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_real_worker_computes_a_run_routed_by_queue(asr_study):
    name = f"metrics-{uuid.uuid4().hex[:6]}"
    with running_worker(["cpu", "gpu", "default"], name=name):
        run = metric_run_start(study=asr_study, metrics=["wer", "semantic_distance"])
        assert wait_for(lambda: MetricRun.objects.get(pk=run.pk).status == "done", timeout=120)
    assert MetricResult.objects.count() == 12


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_killed_worker_mid_run_finishes_after_restart_without_gaps_or_duplicates(settings):
    """SIGKILL the worker while it scores; a new worker picks the unacknowledged batch up again
    (Redis visibility timeout shortened for the test) and the run completes exactly."""
    study = make_study(n_items=120, n_systems=3)
    env = {"CELERY_VISIBILITY_TIMEOUT": "4", "EVALSTUDY_METRIC_BATCH_SIZE": "40",
           "CELERY_UNACKED_RESTORE_INTERVAL": "1", "CELERY_UNACKED_RESTORE_THROTTLE": "1"}
    settings.EVALSTUDY_METRIC_BATCH_SIZE = 40
    name = f"kill-{uuid.uuid4().hex[:6]}"
    worker = start_worker(["cpu", "gpu", "default"], name=name, env=env)
    try:
        run = metric_run_start(study=study, metrics=["wer", "bertscore", "semantic_distance"])
        started = wait_for(lambda: MetricRun.objects.get(pk=run.pk).done > 0, timeout=180,
                           interval=0.05)
        assert started, "the worker never stored a result"
        stop_worker(worker, kill=True)
        done_when_killed = MetricRun.objects.get(pk=run.pk).done
        assert done_when_killed < run.total, "killed too late to prove anything"
        worker = start_worker(["cpu", "gpu", "default"], name=name + "b", env=env)
        assert wait_for(lambda: MetricRun.objects.get(pk=run.pk).status == "done",
                        timeout=300), "the run did not finish after the restart"
    finally:
        print(stop_worker(worker))
    outputs = 120 * 3
    assert MetricResult.objects.count() == outputs * 3
    pairs = set(MetricResult.objects.values_list("output_id", "config_id"))
    assert len(pairs) == outputs * 3, "no duplicate and no missing (output, config)"
    assert MetricRun.objects.get(pk=run.pk).done == outputs * 3


def test_study_encoder_is_used_and_a_missing_model_directory_is_refused(asr_study, tmp_path):
    from django.core.exceptions import ValidationError

    from metrics.scorers.encoder import encoder_resolve

    asr_study.encoder_path = encoder_resolve()
    asr_study.save(update_fields=["encoder_path"])
    run = metric_run_start(study=asr_study, metrics=["semantic_distance"], enqueue=False)
    assert run.model_path == asr_study.encoder_path
    asr_study.encoder_path = str(tmp_path / "no-such-model")
    asr_study.save(update_fields=["encoder_path"])
    with pytest.raises(ValidationError, match="no-such-model"):
        metric_run_start(study=asr_study, metrics=["semantic_distance"], enqueue=False)
    assert MetricRun.objects.count() == 1
