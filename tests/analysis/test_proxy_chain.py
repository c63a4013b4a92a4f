"""Proxies through the whole chain: proxy runs and learned proxies on a study, then the analysis
run, whose report must use each proxy's own threshold and score it only on outputs it never
saw in training or threshold choice (saying which and how many)."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from analysis.selectors import metric_scores
from analysis.services import analysis_run_execute, analysis_run_start
from annotation.models import Judgment
from evalstudy.models import Assignment, AssignmentSlot, Output, Rater
from metrics.services import metric_batch_score, metric_run_dispatch, metric_run_start
from proxies.learned import load_artifact
from proxies.models import LearnedProxy, ProxyRun
from proxies.quality import auc_with_ci
from proxies.runs import proxy_run_start, proxy_threshold_choose
from proxies.training import learned_proxy_start, learned_proxy_train
from tests.factories import make_study
from tests.proxies.conftest import LOOPBACK_NETWORKS
from tests.proxies.judges.fake_openai import FakeOpenAI
from tests.proxies.test_learned_proxy_runs import synthetic_study
from tests.proxies.test_proxy_runs import latte_responder, run_here

# Trained proxies go to a fresh directory per test (tests/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("proxy_dir_in_tmp")]


@pytest.fixture
def latte(settings):
    """The scripted LATTE judge (P(yes) 0.9 / 0.6 / 0.2 for variants 0 / 1 / 2) on loopback,
    which an operator must allow (as allow_loopback_judges in tests/proxies/conftest.py does)."""
    settings.EVALSTUDY_JUDGE_ALLOWED_NETWORKS = list(LOOPBACK_NETWORKS)
    with FakeOpenAI(latte_responder) as server:
        yield server


@pytest.fixture(autouse=True)
def _no_plots(monkeypatch):
    """The report renders without its plots: these studies have systems whose human
    proportion is 0, whose Wilson lower limit (2.8e-17) lies above it, and the proportions
    plot then refuses a negative error bar (not what these tests are about). The template
    still renders every table from the JSON."""
    monkeypatch.setattr("analysis.report.render.build_plots", lambda result: {})


# (item index, variant) -> the SLP's answer where it differs from "variant 0 keeps the meaning,
# variants 1 and 2 do not": no system at 0 % or 100 %.
EXCEPTIONS = {(11, "0"): "no", (0, "1"): "yes", (5, "2"): "yes"}


def human_labels(study):
    """One SLP judging every output's `usable` criterion (see EXCEPTIONS)."""
    rater = Rater.objects.create(kind=Rater.Kind.SLP, external_id="slp-1")
    seat = Assignment.objects.create(study=study, rater=rater, source=Assignment.Source.IMPORTED,
                                     state=Assignment.State.DONE)
    usable = study.criteria.get(key="usable")
    now = timezone.now()
    items = {pk: i for i, pk in enumerate(study.items.order_by("external_id")
                                          .values_list("pk", flat=True))}
    for position, output in enumerate(Output.objects.filter(item__study=study).order_by("pk")):
        variant = re.search(r"\(variant (\d)\)", output.text).group(1)
        default = "yes" if variant == "0" else "no"
        slot = AssignmentSlot.objects.create(assignment=seat, position=position, output=output,
                                             kind=AssignmentSlot.Kind.TARGET, completed_at=now)
        Judgment.objects.create(slot=slot, criterion=usable, rater=rater, submitted_at=now,
                                value=EXCEPTIONS.get((items[output.item_id], variant), default))


def speaker_study():
    """12 items x 3 systems; items 0-5 are speaker s1, 6-11 speaker s2; one SLP says variant 0
    (sys-0) keeps the meaning, variants 1 and 2 do not, with one exception each; WER."""
    study = make_study(n_items=12, n_systems=3)
    for index, item in enumerate(study.items.order_by("external_id")):
        item.metadata = {"speaker": "s1" if index < 6 else "s2"}
        item.save()
    human_labels(study)
    run = metric_run_start(study=study, metrics=["wer"], enqueue=False)
    batches = []
    metric_run_dispatch(run, send=lambda kind, ids, names: batches.append((ids, names)))
    for ids, names in batches:
        metric_batch_score(run_id=run.pk, output_ids=ids, metrics=names)
    return study


def analysed(study, **options):
    run = analysis_run_execute(analysis_run_start(study=study, options={"pdf": False, **options},
                                                  enqueue=False))
    assert run.status == "done", run.error
    return next(v for v in run.result["validity"] if v.get("criterion") == "usable")


def test_llm_proxy_deployment_table_per_speaker_within_system_at_the_runs_threshold(latte):
    study = speaker_study()
    run = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                   backend={"base_url": latte.base_url, "model": "judge-test"},
                                   params={"threshold": 0.7}, enqueue=False))
    validity = analysed(study)
    deployment = validity["deployment"]
    assert "error" not in deployment, deployment
    assert (deployment["group_by"], deployment["within"]) == ("item.speaker", "system")
    name = f"rater:{run.rater}"
    rows = {(r["system"], r["group"]): r for r in deployment["rows"]}
    assert set(rows) == {(f"sys-{k}", s) for k in range(3) for s in ("s1", "s2")}
    for speaker in ("s1", "s2"):
        assert rows[("sys-0", speaker)]["proxies"][name] == 100.0
        # P(yes) = 0.6 is below the run's 0.7: not preserved (at 0.5 it would be 100 %).
        assert rows[("sys-1", speaker)]["proxies"][name] == 0.0
        assert rows[("sys-1", speaker)]["n"] == 6
    # Human % per speaker within each system (EXCEPTIONS): not pooled over systems.
    assert rows[("sys-0", "s1")]["human_mp"] == 100.0
    assert rows[("sys-0", "s2")]["human_mp"] == pytest.approx(500 / 6)
    assert rows[("sys-1", "s1")]["human_mp"] == pytest.approx(100 / 6)
    assert rows[("sys-1", "s2")]["human_mp"] == 0.0
    # LATTE's per-speaker WordAcc: one corpus WER over the speaker's outputs, from the
    # stored counts (not the mean of per-output WordAcc).
    counts = metric_scores(study).set_index("output")
    s1_sys1 = list(Output.objects.filter(item__study=study, system__name="sys-1",
                                         item__metadata__speaker="s1")
                   .values_list("pk", flat=True))
    errors = counts.loc[s1_sys1, ["substitutions", "deletions", "insertions"]].to_numpy().sum()
    corpus_wer = errors / counts.loc[s1_sys1, "ref_words"].sum()
    assert rows[("sys-1", "s1")]["word_acc"] == pytest.approx(100 - min(100 * corpus_wer, 100))
    assert rows[("sys-1", "s1")]["word_acc_n"] == 6
    assert [r["group"] for r in deployment["by_system"]] == ["sys-0", "sys-1", "sys-2"]
    decider = next(d for d in deployment["deciders"] if d["decider"] == name)
    assert decider["threshold"] == 0.7 and decider["threshold_source"] == "run parameter"
    assert "P(yes) >= 0.7" in decider["rule"]
    agreement = {a["decider"]: a for a in deployment["agreement"]}
    assert agreement[name]["accuracy"] == 1.0 and agreement[name]["disagreements"] == []
    assert deployment["held_out_tables"] == []
    entry = next(p for p in validity["proxies"] if p["proxy"] == name)
    assert entry["evaluated_on"]["n_excluded"] == 0 and entry["evaluated_on"]["n_outputs"] == 36


def test_threshold_chosen_on_a_dev_split_keeps_that_split_out_of_decisions(latte):
    study = speaker_study()
    backend = {"base_url": latte.base_url, "model": "judge-test"}
    first = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                     backend=backend, enqueue=False))
    report = proxy_threshold_choose(first, criterion_key="usable", target_precision=0.8,
                                    enqueue=False)
    decided = run_here(ProxyRun.objects.get(pk=report["run"]))
    dev = set(report["dev_outputs"])
    assert len(dev) == report["dev"]["n"] and 0 < len(dev) < 36
    choice = decided.rater.metadata["threshold_choices"][-1]
    assert choice["dev_outputs"] == sorted(dev) and choice["threshold"] == report["threshold"]

    validity = analysed(study)
    name, default = f"rater:{decided.rater}", f"rater:{first.rater}"
    deployment = validity["deployment"]
    # The first run decides at the judge's default 0.5, chosen on nothing: the main table.
    assert deployment["proxies"] == [default] and deployment["n_outputs"] == 36
    (held_out,) = deployment["held_out_tables"]
    assert held_out["proxies"] == [name]
    assert held_out["n_outputs"] == 36 - len(dev) and held_out["n_excluded"] == len(dev)
    assert sum(r["n"] for r in held_out["rows"]) == 36 - len(dev)
    assert "dev outputs its threshold was chosen on" in held_out["excluded_because"]
    decider = next(d for d in held_out["deciders"] if d["decider"] == name)
    assert decider["threshold"] == report["threshold"]
    assert "proxy_threshold_choose" in decider["threshold_source"]
    entry = next(p for p in validity["proxies"] if p["proxy"] == name)
    # AUC does not depend on the threshold: every output; decisions: the test split only.
    assert entry["evaluated_on"]["n_outputs"] == 36
    assert entry["decisions"]["n_excluded"] == len(dev)


def test_a_choice_not_applied_still_follows_a_rater_deciding_at_that_threshold(latte):
    study = speaker_study()
    backend = {"base_url": latte.base_url, "model": "judge-test"}
    first = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                     backend=backend, enqueue=False))
    report = proxy_threshold_choose(first, criterion_key="usable", target_precision=0.8,
                                    apply=False)
    assert "run" not in report and ProxyRun.objects.count() == 1
    # Later, by hand, a run at the chosen threshold: another rater, the same decisions.
    later = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                     backend=backend, params={"threshold": report["threshold"]},
                                     enqueue=False))
    assert later.rater_id != first.rater_id
    validity = analysed(study)
    (held_out,) = validity["deployment"]["held_out_tables"]
    assert held_out["proxies"] == [f"rater:{later.rater}"]
    assert held_out["n_excluded"] == len(report["dev_outputs"])


def test_a_learned_proxy_is_scored_only_on_outputs_it_never_saw():
    """The report's AUC of a proxy trained on the study was its AUC on every output, training
    outputs included (0.812 in the report vs 0.773 on its own held-out split)."""
    study, labels = synthetic_study("learned-here", seed=11, n_references=60)
    proxy = learned_proxy_train(learned_proxy_start(
        study=study, criterion_key="usable", kind="embedding_lr", enqueue=False).pk)
    run = run_here(proxy_run_start(study=study, method="learned", learned_proxy=proxy,
                                   criteria=["usable"], enqueue=False))
    sizes = proxy.report["split_sizes"]
    validity = analysed(study)
    name = f"rater:{run.rater}"
    entry = next(p for p in validity["proxies"] if p["proxy"] == name)
    # The report's AUC is the proxy's own test-split AUC, not the flattering in-sample one.
    test_auc = proxy.report["metrics"]["auc"]["test"]["value"]
    assert entry["auc"]["auc"]["value"] == pytest.approx(test_auc)
    assert entry["auc"]["auc"]["n"] == sizes["test"]["examples"]
    rows = list(Judgment.objects.filter(rater=run.rater, criterion__key="usable")
                .values_list("slot__output_id", "numeric_value"))
    everywhere = auc_with_ci([s for _, s in rows], [labels[o] for o, _ in rows]).auc.value
    assert everywhere > test_auc  # what the report used to print

    split_keys = proxy.report["split_keys"]  # output ids, recorded at training
    assert sorted(k for keys in split_keys.values() for k in keys) == sorted(labels)
    assert load_artifact(proxy.artifact_path).split_keys == split_keys
    assert len(split_keys["test"]) == sizes["test"]["examples"]
    held_out = entry["evaluated_on"]
    assert held_out["n_outputs"] == sizes["test"]["examples"]
    assert held_out["n_excluded"] == sizes["train"]["examples"] + sizes["dev"]["examples"]
    assert "never saw" in held_out["outputs"]
    assert f"trained on {sizes['train']['examples']} outputs" in held_out["excluded_because"]
    slices = entry["by_slice"]["system"]
    assert sum(row["n"] for row in slices) == sizes["test"]["examples"]
    assert all({"n_neg", "p_adjusted"} <= set(row) for row in slices)
    (table,) = validity["deployment"]["held_out_tables"]
    assert table["proxies"] == [name] and table["n_outputs"] == sizes["test"]["examples"]
    decider = next(d for d in table["deciders"] if d["decider"] == name)
    assert decider["threshold"] == proxy.report["threshold"]
    assert decider["threshold_source"].startswith("chosen on the learned proxy's own dev split")

    # A proxy trained here before splits were recorded: nothing says which outputs it saw.
    LearnedProxy.objects.filter(pk=proxy.pk).update(
        report={k: v for k, v in proxy.report.items() if k != "split_keys"})
    entry = next(p for p in analysed(study)["proxies"] if p["proxy"] == name)
    assert entry["evaluated_on"]["n_outputs"] == 0 and "auc" not in entry
    assert entry["note"].startswith("no output left")
    assert "retrain" in entry["evaluated_on"]["excluded_because"]


def test_a_proxy_trained_on_another_study_skips_the_references_it_was_trained_on():
    """LATTE section 5.1: utterances whose ground truth was in the classifier's training or
    dev split were filtered out of the real-conversation test set."""
    trained_on, _ = synthetic_study("source", seed=12, n_references=60)
    proxy = learned_proxy_train(learned_proxy_start(
        study=trained_on, criterion_key="usable", kind="embedding_lr", enqueue=False).pk)
    # Same seed: the same references, new outputs (new ids) with the same texts.
    target, _ = synthetic_study("target", seed=12, n_references=60)
    run = run_here(proxy_run_start(study=target, method="learned", learned_proxy=proxy,
                                   criteria=["usable"], enqueue=False))
    validity = analysed(target)
    entry = next(p for p in validity["proxies"] if p["proxy"] == f"rater:{run.rater}")
    sizes = proxy.report["split_sizes"]
    assert entry["evaluated_on"]["n_outputs"] == sizes["test"]["examples"]
    assert "study 'source'" in entry["evaluated_on"]["excluded_because"]
    assert Output.objects.filter(item__study=target).count() == 180

