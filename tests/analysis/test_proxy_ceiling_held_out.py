"""End to end (issue 30): a judge whose threshold was chosen on a dev split of the study
(`proxy_threshold_choose`) is scored by the human ceiling on the held-out outputs only, as the
deployment table scores it, and the ceiling's row says how many outputs were left out."""

from __future__ import annotations

import pytest
from django.utils import timezone

from analysis.services import analysis_run_execute, analysis_run_start
from annotation.models import Judgment
from evalstudy.models import Assignment, AssignmentSlot, Output, Rater
from proxies.models import ProxyRun
from proxies.runs import proxy_run_start, proxy_threshold_choose
from tests.analysis.test_proxy_chain import _no_plots, latte, speaker_study  # noqa: F401
from tests.proxies.test_proxy_runs import run_here

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("proxy_dir_in_tmp")]


def second_human(study) -> None:
    """A second SLP who copies the first one's answers (the ceiling needs two humans)."""
    rater = Rater.objects.create(kind=Rater.Kind.SLP, external_id="slp-2")
    seat = Assignment.objects.create(study=study, rater=rater, source=Assignment.Source.IMPORTED,
                                     state=Assignment.State.DONE)
    usable = study.criteria.get(key="usable")
    now = timezone.now()
    first = {j.slot.output_id: j.value for j in Judgment.objects.filter(
        slot__assignment__study=study, criterion=usable).select_related("slot")}
    for position, output in enumerate(Output.objects.filter(item__study=study).order_by("pk")):
        slot = AssignmentSlot.objects.create(assignment=seat, position=position, output=output,
                                             kind=AssignmentSlot.Kind.TARGET, completed_at=now)
        Judgment.objects.create(slot=slot, criterion=usable, rater=rater, submitted_at=now,
                                value=first[output.pk])


def test_the_ceiling_scores_a_dev_threshold_judge_on_held_out_outputs(latte):  # noqa: F811
    study = speaker_study()
    second_human(study)
    backend = {"base_url": latte.base_url, "model": "judge-test"}
    first = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                     backend=backend, enqueue=False))
    report = proxy_threshold_choose(first, criterion_key="usable", target_precision=0.8,
                                    enqueue=False)
    decided = run_here(ProxyRun.objects.get(pk=report["run"]))
    dev = set(report["dev_outputs"])
    run = analysis_run_execute(analysis_run_start(study=study, options={"pdf": False},
                                                  enqueue=False))
    assert run.status == "done", run.error
    (usable,) = [c for c in run.result["criteria"] if c["key"] == "usable"]
    rows = {row["rater"]: row for row in usable["ceiling"]["proxies"]}
    tuned, untuned = rows[str(decided.rater)], rows[str(first.rater)]
    # Two humans, each held out in turn: every output counts twice.
    assert untuned["n_units"] == 2 * 36 and untuned["n_excluded"] == 0
    assert tuned["n_units"] == 2 * (36 - len(dev)) and tuned["n_excluded"] == len(dev)
    assert "dev outputs its threshold was chosen on" in tuned["excluded_because"]
    assert f"{len(dev)} left out" in run.report_html
