"""The pairwise learned proxy through Django: trained on a study's human preferences (named
raters and counted votes) from its STORED metric results, cross-validated by reference, its
out-of-fold answers stored as a proxy rater's pairwise judgments that the analysis scores on
every pair."""

from __future__ import annotations

import random

import numpy as np
import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from annotation.models import Judgment, VoteCount
from evalstudy.models import Assignment, AssignmentSlot, Item, Output, Rater, System
from proxies.models import LearnedProxy, ProxyRun
from proxies.runs import proxy_run_start
from proxies.training import learned_proxy_start, learned_proxy_train
from tests.factories import make_study
from tests.proxies.test_proxy_runs import run_here

# Trained proxies go to a fresh directory per test (tests/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("proxy_dir_in_tmp")]

WORDS = ("le", "chat", "mange", "une", "souris", "dans", "la", "cuisine", "grise", "petite",
         "maison", "rouge", "jardin", "soleil", "matin", "parle", "avec", "ses", "amis", "vite")


def _garble(text: str, errors: int, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(errors):
        position = rng.randrange(len(chars))
        chars[position] = rng.choice("abcdefghijklmnopqrstuvwxyz")
    return "".join(chars)


def preference_study(slug: str, *, n_items: int = 48, seed: int = 0, named_items: int = 12,
                     ties: int = 3):
    """HATS-like: per item a reference and two transcripts with character errors; 7
    listeners (counted votes) prefer the one with fewer errors more often than not; a named
    rater also judged the first `named_items` pairs; the last `ties` items are 3-3 ties."""
    rng = random.Random(seed)
    study = make_study(n_items=0, n_systems=2, design="pairwise", slug=slug)
    hyp_a, hyp_b = System.objects.filter(study=study).order_by("name")
    criterion = study.criteria.get(key="preference")
    rater = Rater.objects.create(kind=Rater.Kind.EXPERT, external_id=f"expert-{slug}")
    seat = Assignment.objects.create(study=study, rater=rater, source=Assignment.Source.IMPORTED,
                                     state=Assignment.State.DONE)
    now = timezone.now()
    for index in range(n_items):
        reference = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12)))
        item = Item.objects.create(study=study, external_id=f"t{index:03d}", reference=reference)
        errors_a, errors_b = rng.randint(0, 6), rng.randint(0, 6)
        a = Output.objects.create(item=item, system=hyp_a,
                                  text=_garble(reference, errors_a, rng))
        b = Output.objects.create(item=item, system=hyp_b,
                                  text=_garble(reference, errors_b, rng))
        if index >= n_items - ties:
            votes_a, voters = 3, 6
        else:
            p_a = 1 / (1 + np.exp(-1.2 * (errors_b - errors_a)))
            voters = 7
            votes_a = sum(rng.random() < p_a for _ in range(voters))
        for value, count in (("A", votes_a), ("B", voters - votes_a)):
            VoteCount.objects.create(study=study, criterion=criterion, output=a, output_b=b,
                                     value=value, count=count, position_known=False,
                                     imported_at=now)
        if index < named_items:
            slot = AssignmentSlot.objects.create(assignment=seat, position=index, output=a,
                                                 output_b=b, completed_at=now,
                                                 kind=AssignmentSlot.Kind.TARGET)
            Judgment.objects.create(slot=slot, criterion=criterion, rater=rater,
                                    submitted_at=now, value="A" if errors_a < errors_b else "B")
    return study


def compute(study, *metrics):
    call_command("compute_metrics", "--study", study.slug, "--sync", "--metrics", *metrics)


def test_training_stores_out_of_fold_answers_the_analysis_scores_on_every_pair(capsys):
    from analysis.selectors import judgments_tidy, metric_scores, proxy_raters, vote_counts
    from analysis.stats.votes import pairwise_entry

    study = preference_study("pref")
    compute(study, "wer", "cer")
    call_command("train_proxy", "--study", "pref", "--criterion", "preference", "--kind",
                 "pairwise_logistic", "--params", '{"features": ["wer", "cer"], "folds": 4}',
                 "--sync")
    out = capsys.readouterr().out
    assert "CV accuracy vs the human majority: ties_wrong" in out
    assert "answers stored by proxy run" in out
    proxy = LearnedProxy.objects.get(study=study)
    assert proxy.status == LearnedProxy.Status.DONE and proxy.kind == "pairwise_logistic"
    metrics = proxy.report["metrics"]
    assert metrics["folds"] == 4 and metrics["features"] == ["wer", "cer"]
    assert metrics["labelled_pairs"] == 45 and metrics["human_ties_left_out"] == 3
    assert metrics["coefficients"]["cer"] < 0
    assert set(proxy.report["split_sizes"]) == {"fold 1", "fold 2", "fold 3", "fold 4"}
    assert proxy.report["target_precision"] is None

    run = ProxyRun.objects.get(pk=proxy.report["answers_run"])
    assert run.status == ProxyRun.Status.DONE and run.rater.kind == Rater.Kind.METRIC
    # Every pair people judged (named raters on 12, counted votes on all 48) is answered.
    answers = list(Judgment.objects.filter(rater=run.rater).values_list(
        "slot__output_id", "slot__output_b_id", "value", "numeric_value"))
    assert len(answers) == 48 and run.usage["answers_out_of_fold"] == 48
    from proxies.learned import load_artifact

    table = load_artifact(proxy.artifact_path).proxy.out_of_fold_table()
    for output, output_b, value, p_a in answers:
        assert p_a == pytest.approx(table[(output, output_b)])
        assert value == ("A" if p_a >= 0.5 else "B")  # the criterion offers no tie

    # The analysis scores the proxy rater on every pair: nothing is excluded, and its
    # figure is the proxy's own cross-validated accuracy.
    info = proxy_raters(study)[str(run.rater)]
    assert not info.get("exclude_scores")
    entry = pairwise_entry(judgments_tidy(study), vote_counts(study)[lambda v: v[
        "criterion"] == "preference"], metric_scores(study), {"key": "preference"})
    rows = {row["proxy"]: row for row in entry["tables"]["ties_wrong"]}
    mine = rows[f"rater:{run.rater}"]
    assert mine["all"]["n"] == 48
    assert mine["all"]["accuracy"] == pytest.approx(metrics["cv_accuracy"]["ties_wrong"])
    excluded = {row["proxy"]: row for row in entry["tables"]["ties_excluded"]}
    assert excluded[f"rater:{run.rater}"]["all"]["accuracy"] == pytest.approx(
        metrics["cv_accuracy"]["ties_excluded"])


def test_missing_metrics_are_named_with_the_command_that_computes_them():
    study = preference_study("nometrics", n_items=30)
    with pytest.raises(ValidationError, match=r"compute_metrics --study nometrics --metrics "):
        learned_proxy_start(study=study, criterion_key="preference", kind="pairwise_logistic")
    compute(study, "wer")
    with pytest.raises(CommandError, match=r"per \(metric per\), heval \(metric heval\)"):
        call_command("train_proxy", "--study", "nometrics", "--criterion", "preference",
                     "--kind", "pairwise_logistic", "--params",
                     '{"features": ["wer", "per", "heval"]}', "--sync")
    assert not LearnedProxy.objects.exists()
    # By default, the default features the study stores (wer and its parts here).
    proxy = learned_proxy_train(learned_proxy_start(
        study=study, criterion_key="preference", kind="pairwise_logistic", enqueue=False).pk)
    assert proxy.report["metrics"]["features"] == ["wer", "sub_rate", "del_rate", "ins_rate"]
    assert "per" in proxy.report["metrics"]["features_left_out"]


def test_kinds_and_criteria_must_match():
    study = preference_study("kinds", n_items=30)
    compute(study, "wer", "cer")
    with pytest.raises(ValidationError, match="train kind pairwise_logistic"):
        learned_proxy_start(study=study, criterion_key="preference", kind="embedding_lr")
    binary = make_study(slug="binary")
    with pytest.raises(ValidationError, match="needs a pairwise criterion"):
        learned_proxy_start(study=binary, criterion_key="usable", kind="pairwise_logistic")
    tiny = preference_study("tiny", n_items=10, seed=3)
    compute(tiny, "cer")
    with pytest.raises(ValidationError, match="at least 20 are needed"):
        learned_proxy_start(study=tiny, criterion_key="preference", kind="pairwise_logistic")


def test_used_on_another_study_from_its_stored_metrics():
    trained_on = preference_study("source")
    compute(trained_on, "wer", "cer")
    proxy = learned_proxy_train(learned_proxy_start(
        study=trained_on, criterion_key="preference", kind="pairwise_logistic",
        params={"features": ["cer"]}, enqueue=False).pk)
    target = preference_study("target", n_items=20, seed=9, named_items=0, ties=0)
    with pytest.raises(ValidationError, match="takes no threshold"):
        proxy_run_start(study=target, method="learned", learned_proxy=proxy,
                        params={"threshold": 0.5}, enqueue=False)
    run = run_here(proxy_run_start(study=target, method="learned", learned_proxy=proxy,
                                   enqueue=False))
    assert run.criteria == ["preference"]
    assert run.failed == 20 and "cer" in next(iter(run.unreadable.values()))  # not computed
    compute(target, "cer")
    from proxies.runs import proxy_run_resume

    proxy_run_resume(run)
    run = run_here(ProxyRun.objects.get(pk=run.pk))
    assert run.done == 20 and run.failed == 0 and run.usage["answers_model"] == 20


def test_on_a_copy_of_its_training_study_it_answers_no_pair_in_sample():
    """A copy (or subset) of the training study has the same references: the model fitted
    on every labelled pair would answer them in-sample, and the analysis would score it on
    its own training data."""
    trained_on = preference_study("source-copy")
    compute(trained_on, "cer")
    proxy = learned_proxy_train(learned_proxy_start(
        study=trained_on, criterion_key="preference", kind="pairwise_logistic",
        params={"features": ["cer"]}, enqueue=False).pk)
    copy = preference_study("the-copy")  # the same seed: the same references and texts
    compute(copy, "cer")
    run = run_here(proxy_run_start(study=copy, method="learned", learned_proxy=proxy,
                                   enqueue=False))
    assert run.done == 0 and run.failed > 0
    assert "in-sample" in next(iter(run.unreadable.values()))


def test_it_learns_from_the_answers_the_analysis_reads():
    """A rater the researcher excluded is not read by the analysis: before, the proxy
    trained on their answers anyway."""
    from evalstudy.models import Enrollment
    from proxies.training import human_units

    study = preference_study("exclusions", n_items=24, named_items=0, ties=0)
    criterion = study.criteria.get(key="preference")
    before = human_units(study, criterion)[["a", "b"]].to_numpy().sum()
    item = Item.objects.filter(study=study).order_by("id").first()
    a, b = Output.objects.filter(item=item).order_by("system__name")
    now = timezone.now()
    for kind, external_id in ((AssignmentSlot.Kind.TARGET, "excluded-one"),):
        rater = Rater.objects.create(study=study, kind=Rater.Kind.CROWD,
                                     external_id=external_id)
        seat = Assignment.objects.create(study=study, rater=rater, state=Assignment.State.DONE,
                                         source=Assignment.Source.IMPORTED)
        slot = AssignmentSlot.objects.create(assignment=seat, position=0, output=a,
                                             output_b=b, completed_at=now, kind=kind)
        Judgment.objects.create(slot=slot, criterion=criterion, rater=rater, submitted_at=now,
                                value="A")
        Enrollment.objects.create(study=study, rater=rater, excluded_at=now)
    assert human_units(study, criterion)[["a", "b"]].to_numpy().sum() == before
    Enrollment.objects.filter(rater__external_id="excluded-one").update(excluded_at=None)
    assert human_units(study, criterion)[["a", "b"]].to_numpy().sum() == before + 1
