"""Learned proxies through Django: trained on a study's human judgments, saved as a versioned
artefact, then used as a proxy rater (kind `metric`) on another study."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone

from annotation.models import Judgment
from evalstudy.models import Assignment, AssignmentSlot, Item, Output, Rater, System
from proxies.models import LearnedProxy, ProxyRun
from proxies.quality import auc_with_ci
from proxies.runs import proxy_run_start
from proxies.training import learned_proxy_start, learned_proxy_train
from tests.factories import make_study
from tests.proxies.judges.fake_openai import FakeOpenAI
from tests.proxies.learned.synthetic import make_synthetic_study
from tests.proxies.test_proxy_runs import latte_responder, run_here
from tests.workers import running_worker, wait_for

# Trained proxies go to a fresh directory per test (tests/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("proxy_dir_in_tmp")]


def synthetic_study(slug: str, *, seed: int, n_references: int = 60, humans: bool = True):
    """A study whose items are synthetic references and whose three systems produce outputs
    labelled (by one human rater on `usable`) by whether they keep the meaning."""
    study = make_study(n_items=0, n_systems=3, slug=slug)
    systems = list(System.objects.filter(study=study).order_by("name"))
    examples = make_synthetic_study(n_references, 3, seed=seed)
    rater = Rater.objects.create(kind=Rater.Kind.SLP, external_id=f"slp-{slug}")
    seat = Assignment.objects.create(study=study, rater=rater, source=Assignment.Source.IMPORTED,
                                     state=Assignment.State.DONE)
    usable = study.criteria.get(key="usable")
    now = timezone.now()
    items: dict[int, Item] = {}
    labels = {}
    for position, example in enumerate(examples):
        reference_index, output_index, _kind = example.key
        if reference_index not in items:
            items[reference_index] = Item.objects.create(
                study=study, external_id=f"ref-{reference_index:03d}",
                reference=example.reference)
        output = Output.objects.create(item=items[reference_index],
                                       system=systems[output_index], text=example.output)
        labels[output.pk] = example.label
        if humans:
            slot = AssignmentSlot.objects.create(assignment=seat, position=position,
                                                 output=output, completed_at=now,
                                                 kind=AssignmentSlot.Kind.TARGET)
            Judgment.objects.create(slot=slot, criterion=usable, rater=rater, submitted_at=now,
                                    value="yes" if example.label else "no")
    return study, labels


def test_train_on_one_study_and_judge_another():
    trained_on, _ = synthetic_study("train-study", seed=1)
    proxy = learned_proxy_start(study=trained_on, criterion_key="usable", kind="wer_bertscore",
                                enqueue=False)
    assert proxy.status == LearnedProxy.Status.PENDING and proxy.total == 180
    proxy = learned_proxy_train(proxy.pk)
    assert proxy.status == LearnedProxy.Status.DONE and proxy.version == 1
    assert (Path(proxy.artifact_path) / "manifest.json").exists()
    assert proxy.report["split_sizes"]["test"]["examples"] > 0
    assert proxy.report["metrics"]["auc"]["test"]["value"] > 0.85
    assert 0 <= proxy.report["threshold"] <= 1
    # A second training of the same name is a new version beside the first.
    again = learned_proxy_train(learned_proxy_start(
        study=trained_on, criterion_key="usable", kind="wer_bertscore", name=proxy.name,
        enqueue=False).pk)
    assert again.version == 2

    target, labels = synthetic_study("new-study", seed=2, humans=False)
    run = run_here(proxy_run_start(study=target, method="learned", learned_proxy=proxy,
                                   criteria=["usable"], enqueue=False))
    assert run.queue == "cpu" and run.status == ProxyRun.Status.DONE and run.done == 180
    assert run.rater.kind == Rater.Kind.METRIC
    assert run.rater.metadata["backend"]["name"] == f"{proxy.name}-v1"
    rows = list(Judgment.objects.filter(rater=run.rater, criterion__key="usable")
                .values_list("slot__output_id", "value", "numeric_value"))
    scores = np.array([score for _, _, score in rows])
    truth = np.array([labels[output] for output, _, _ in rows])
    assert auc_with_ci(scores, truth).auc.value > 0.85
    threshold = proxy.report["threshold"]
    assert all(value == ("yes" if score >= threshold else "no") for _, value, score in rows)


def test_training_needs_enough_human_labels_and_a_decision_criterion(study):
    with pytest.raises(ValidationError, match="at least 20 are needed"):
        learned_proxy_start(study=study, criterion_key="usable", kind="embedding_lr")
    with pytest.raises(ValidationError, match="'note' is text"):
        learned_proxy_start(study=study, criterion_key="note", kind="embedding_lr")
    with pytest.raises(ValidationError, match="kind"):
        learned_proxy_start(study=study, criterion_key="usable", kind="random_forest")
    assert not LearnedProxy.objects.exists()


def test_train_proxy_command_prints_the_report(capsys):
    synthetic_study("cmd-study", seed=3, n_references=40)
    call_command("train_proxy", "--study", "cmd-study", "--criterion", "usable",
                 "--kind", "embedding_lr", "--sync")
    out = capsys.readouterr().out
    assert "v1 at" in out and '"auc"' in out and "threshold:" in out


def test_learned_and_llm_proxies_are_compared_with_humans_by_the_same_analysis(
        allow_loopback_judges):
    """Both proxies appear in the analysis' proxy validity section, next to the metrics."""
    from analysis.selectors import judgments_tidy
    from analysis.stats.pipeline import proxy_validity

    study, _ = synthetic_study("both", seed=4, n_references=30)
    proxy = learned_proxy_train(learned_proxy_start(
        study=study, criterion_key="usable", kind="embedding_lr", enqueue=False).pk)
    learned = run_here(proxy_run_start(study=study, method="learned", learned_proxy=proxy,
                                       enqueue=False))
    for output in Output.objects.filter(item__study=study):
        output.text += f" (variant {output.pk % 3})"  # what the scripted LLM judge reads
        output.save()
    with FakeOpenAI(latte_responder) as server:
        llm = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                       backend={"base_url": server.base_url, "model": "m"},
                                       enqueue=False))
    validity = proxy_validity(judgments_tidy(study), {"kind": "binary", "key": "usable"},
                              None, {}, [])
    names = {entry["proxy"] for entry in validity["proxies"]}
    assert {f"rater:{learned.rater}", f"rater:{llm.rater}"} <= names


@pytest.mark.django_db(transaction=True)
def test_real_worker_trains_a_proxy_and_judges_with_it(settings):
    study, _ = synthetic_study("worker-study", seed=5, n_references=30)
    with running_worker(["cpu"], name=f"learn-{uuid.uuid4().hex[:6]}",
                        env={"EVALSTUDY_PROXY_DIR": settings.EVALSTUDY_PROXY_DIR}):
        proxy = learned_proxy_start(study=study, criterion_key="usable", kind="embedding_lr")
        assert wait_for(lambda: LearnedProxy.objects.get(pk=proxy.pk).status in (
            "done", "failed"), timeout=180)
        proxy.refresh_from_db()
        assert proxy.status == "done", proxy.error
        run = proxy_run_start(study=study, method="learned", learned_proxy=proxy,
                              criteria=["usable"])
        assert wait_for(lambda: ProxyRun.objects.get(pk=run.pk).status == "done", timeout=120)
    assert Judgment.objects.filter(rater=run.rater).count() == 90


def test_a_cross_encoder_on_histories_keeps_their_most_recent_tokens(monkeypatch):
    """Items with a context and no reference are histories: the cross-encoder trained on them
    truncates the history from the left unless its params say otherwise; the examples carry
    the human share, by which the top-1 accuracy per history ranks completions."""
    import proxies.learned

    study, _ = synthetic_study("histories", seed=6, n_references=10)
    for item in Item.objects.filter(study=study):
        item.context, item.reference = item.reference, ""
        item.save()
    seen = {}

    def capture(kind, examples, *, params, **options):
        seen.update(params=params, examples=examples)
        raise ValueError("captured")

    monkeypatch.setattr(proxies.learned, "train_proxy", capture)
    for given, expected in (({}, "history_left"), ({"truncation": "longest_first"},
                                                   "longest_first")):
        proxy = learned_proxy_start(study=study, criterion_key="usable", kind="cross_encoder",
                                    params=given, enqueue=False)
        with pytest.raises(ValidationError, match="captured"):
            learned_proxy_train(proxy.pk)
        assert seen["params"]["truncation"] == expected
    assert {e.human_score for e in seen["examples"]} <= {0.0, 1.0}
    # A study of references keeps the default.
    references, _ = synthetic_study("references", seed=7, n_references=10)
    with pytest.raises(ValidationError, match="captured"):
        learned_proxy_train(learned_proxy_start(study=references, criterion_key="usable",
                                                kind="cross_encoder", enqueue=False).pk)
    assert "truncation" not in seen["params"]
