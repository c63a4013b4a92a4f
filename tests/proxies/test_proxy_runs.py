"""Proxy runs end to end: a real OpenAI-compatible server on loopback answers, the answers are
stored as Judgments of a non-human rater, and the analysis reads them like any rater's."""

from __future__ import annotations

import json
import math
import re

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone

from analysis.selectors import JudgmentFilter, judgments_tidy
from annotation.models import Judgment
from evalstudy.models import Assignment, AssignmentSlot, AuditEvent, Output, Rater
from proxies.models import JudgeResponse, ProxyRun
from proxies.runs import (
    latte_scores,
    proxy_batch_judge,
    proxy_run_dispatch,
    proxy_run_start,
    proxy_threshold_choose,
)
from tests.factories import make_study
from tests.proxies.judges.fake_openai import FakeOpenAI, Reply, answer, yes_no_reply
from tests.proxies.judges.test_judge_local_hf import causal_dir  # noqa: F401 - a fixture

# Every judge here is the fake server on loopback: opted in explicitly (tests/proxies/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_loopback_judges")]

# make_study's outputs are "<reference> (variant k)"; the judge's P(yes) follows the variant.
P_YES = {"0": 0.9, "1": 0.6, "2": 0.2}


def _variant(text: str) -> str:
    return re.search(r"\(variant (\d)\)", text).group(1)


def latte_responder(request):
    return yes_no_reply(request, P_YES[_variant(request.prompt)])


@pytest.fixture
def fake_latte():
    with FakeOpenAI(latte_responder) as server:
        yield server


def backend_for(server, **extra):
    return {"base_url": server.base_url, "model": "judge-test", **extra}


def run_here(run: ProxyRun) -> ProxyRun:
    """Dispatch and judge every batch in this process (the worker path has its own test)."""
    batches = []
    proxy_run_dispatch(run, send=lambda queue, ids: batches.append(ids))
    for ids in batches:
        proxy_batch_judge(run_id=run.pk, slot_ids=ids)
    run.refresh_from_db()
    return run


def test_latte_run_stores_judgments_of_an_llm_rater(study, fake_latte):
    run = proxy_run_start(study=study, method="latte", criteria=["usable", "severity"],
                          backend=backend_for(fake_latte), enqueue=False)
    assert run.total == 2 * 18 and run.queue == "llm"
    run = run_here(run)
    assert run.status == ProxyRun.Status.DONE and run.done == 36 and run.failed == 0
    rater = run.rater
    assert rater.kind == Rater.Kind.LLM and not rater.is_human
    assert rater.metadata["backend"]["model"] == "judge-test"
    assert "Transcript preserves the meaning" in rater.metadata["template"]
    assert rater.metadata["judge_version"]
    seat = Assignment.objects.get(study=study, rater=rater)
    assert seat.source == Assignment.Source.PROXY
    assert seat.slots.count() == 18 and not seat.slots.filter(completed_at__isnull=True).exists()
    for judgment in Judgment.objects.filter(rater=rater).select_related("slot__output",
                                                                       "criterion"):
        p = P_YES[_variant(judgment.slot.output.text)]
        assert judgment.numeric_value == pytest.approx(p)
        if judgment.criterion.key == "usable":
            assert judgment.value == ("yes" if p >= 0.5 else "no")
        else:  # LATTE's binary reading of the severity scale
            assert judgment.value == ("0" if p >= 0.5 else "2")
    # Both criteria send the same LATTE prompt: the second is answered from the cache.
    assert fake_latte.hits == 18
    assert run.usage["requests"] == 18 and run.usage["cache_hits"] == 18
    assert run.usage["answers_logprobs"] == 36
    assert JudgeResponse.objects.count() == 18
    tidy = judgments_tidy(study, JudgmentFilter(raters="proxy"))
    assert len(tidy) == 36 and not tidy["is_human"].any()


def test_rerunning_the_same_judge_costs_nothing_and_reuses_its_rater(study, fake_latte):
    first = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                     backend=backend_for(fake_latte), enqueue=False))
    hits = fake_latte.hits
    second = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                      backend=backend_for(fake_latte), enqueue=False))
    assert second.rater_id == first.rater_id
    assert second.status == ProxyRun.Status.DONE and second.done == 18
    assert fake_latte.hits == hits
    assert Judgment.objects.filter(rater=first.rater).count() == 18
    # A changed prompt is another proxy: a new rater, never mixed with the first one's answers.
    third = proxy_run_start(
        study=study, method="latte", criteria=["usable"], backend=backend_for(fake_latte),
        template="Reference: {reference}\nHypothesis: {output}\nSame meaning? ", enqueue=False)
    assert third.rater_id != first.rater_id


def test_a_batch_judged_twice_stores_each_answer_once(study, fake_latte):
    run = proxy_run_start(study=study, method="latte", criteria=["usable"],
                          backend=backend_for(fake_latte), enqueue=False)
    batches = []
    proxy_run_dispatch(run, send=lambda queue, ids: batches.append(ids))
    proxy_batch_judge(run_id=run.pk, slot_ids=batches[0])
    assert proxy_batch_judge(run_id=run.pk, slot_ids=batches[0]) == 0  # redelivered task
    assert Judgment.objects.filter(rater=run.rater).count() == 18


def test_answers_without_log_probabilities_are_parsed_and_say_so(study):
    def no_logprobs(request):
        return answer(request, "yes}" if _variant(request.prompt) != "2" else "no}",
                      logprobs=False)

    with FakeOpenAI(no_logprobs) as server:
        run = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                       backend=backend_for(server), enqueue=False))
    assert run.usage["answers_parsed"] == 18
    values = dict(Judgment.objects.filter(rater=run.rater).values_list("slot__output__text",
                                                                       "numeric_value"))
    assert {_variant(text): p for text, p in values.items()} == {"0": 1.0, "1": 1.0, "2": 0.0}


def test_failed_answers_are_recorded_and_a_resumed_run_retries_them(study):
    state = {"broken": True}

    def flaky(request):
        if state["broken"] and _variant(request.prompt) == "2":
            return Reply(status=503, body={"error": {"message": "overloaded"}})
        return yes_no_reply(request, P_YES[_variant(request.prompt)])

    with FakeOpenAI(flaky) as server:
        run = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                       backend=backend_for(server, max_retries=0),
                                       enqueue=False))
        assert run.status == ProxyRun.Status.DONE
        assert (run.done, run.failed) == (12, 6) and "resume" in run.error
        state["broken"] = False
        run = run_here(run)
    assert (run.done, run.failed) == (18, 0)


def test_requests_are_refused_with_a_clear_reason(study, fake_latte):
    cases = [
        ({"method": "oracle"}, "method"),
        ({"method": "latte", "criteria": ["nope"]}, "'nope' is not a criterion"),
        ({"method": "latte", "criteria": ["note"]}, "'note' is text"),
        ({"method": "drpe"}, "no criterion a drpe judge answers"),
        ({"method": "latte", "params": {"temperature": 1}}, "not understood by latte"),
        ({"method": "latte", "params": {"threshold": 2}}, "threshold must lie in [0, 1]"),
        ({"method": "latte", "template": "Ground truth: {reference} {speaker}"}, "template"),
        ({"method": "rubric", "template": "x {output}"}, "only the LATTE prompt is editable"),
        ({"method": "latte", "backend": {**backend_for(fake_latte), "api_key": "sk-1"}},
         "keys are never stored"),
        ({"method": "latte", "backend": {**backend_for(fake_latte), "colour": "red"}},
         "unknown key(s) ['colour']"),
        ({"method": "latte", "backend": {"base_url": ""}}, "needs base_url and model"),
        ({"method": "learned"}, "a trained learned proxy is required"),
        ({"method": "latte", "backend": {**backend_for(fake_latte), "api_key_env": "SECRET_KEY"}},
         "api_key_env 'SECRET_KEY' is not one of the key variables allowed"),
        ({"method": "latte", "backend": {"base_url": "http://user:pw@127.0.0.1:9/v1",
                                         "model": "m"}}, "must not carry credentials"),
        ({"method": "latte", "backend": {"base_url": "ftp://127.0.0.1/v1", "model": "m"}},
         "is not an http(s) URL"),
    ]
    for request, expected in cases:
        backend = request.pop("backend", backend_for(fake_latte))
        with pytest.raises(ValidationError) as error:
            proxy_run_start(study=study, backend=backend, enqueue=False, **request)
        assert expected in " ".join(error.value.messages), request
    assert not ProxyRun.objects.exists()


def _human_labels(study, label_for_variant):
    """One human rater judging every output's `usable` criterion."""
    rater = Rater.objects.create(kind=Rater.Kind.SLP, external_id="slp-1")
    seat = Assignment.objects.create(study=study, rater=rater, source=Assignment.Source.IMPORTED,
                                     state=Assignment.State.DONE)
    usable = study.criteria.get(key="usable")
    now = timezone.now()
    for position, output in enumerate(Output.objects.filter(item__study=study).order_by("pk")):
        slot = AssignmentSlot.objects.create(assignment=seat, position=position, output=output,
                                             kind=AssignmentSlot.Kind.TARGET, completed_at=now)
        Judgment.objects.create(slot=slot, criterion=usable, rater=rater, submitted_at=now,
                                value=label_for_variant[_variant(output.text)])


def test_threshold_chosen_on_dev_for_precision_and_applied(fake_latte):
    study = make_study(n_items=12, n_systems=3)
    _human_labels(study, {"0": "yes", "1": "no", "2": "no"})
    run = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                   backend=backend_for(fake_latte), enqueue=False))
    # At the default 0.5, variant 1 (P = 0.6) is called preserved though humans say no.
    assert Judgment.objects.filter(rater=run.rater, value="yes").count() == 24
    hits = fake_latte.hits
    report = proxy_threshold_choose(run, criterion_key="usable", target_precision=0.9,
                                    enqueue=False, source="command")
    assert 0.6 < report["threshold"] <= 0.9
    # The choice and the run it starts are audited together.
    chosen = AuditEvent.objects.get(action="update", target_type="proxies.proxyrun")
    assert (chosen.source, chosen.target_id) == ("command", str(run.pk))
    assert chosen.changes["threshold"] == [None, report["threshold"]]
    assert chosen.changes["decided_run"] == report["run"]
    assert AuditEvent.objects.filter(action="start", target_id=str(report["run"]),
                                     source="command").exists()
    assert report["dev"]["precision"] == 1.0 and report["test"]["precision"] == 1.0
    assert report["dev_references"] + report["test_references"] == 12
    decided = run_here(ProxyRun.objects.get(pk=report["run"]))
    # The decision is part of the proxy: a new rater at the chosen threshold, answered from
    # the judge cache, while the first run's answers stay as they were.
    assert decided.rater_id != run.rater_id and decided.params["threshold"] == report["threshold"]
    assert fake_latte.hits == hits
    assert Judgment.objects.filter(rater=decided.rater, value="yes").count() == 12
    assert Judgment.objects.filter(rater=run.rater, value="yes").count() == 24
    assert sorted(set(Judgment.objects.filter(rater=decided.rater)
                      .values_list("numeric_value", flat=True))) == pytest.approx([0.2, 0.6, 0.9])


def test_threshold_choice_refuses_what_it_cannot_do(fake_latte):
    study = make_study(n_items=12, n_systems=3)
    _human_labels(study, {"0": "no", "1": "yes", "2": "no"})  # never monotone in P(yes)
    run = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                   backend=backend_for(fake_latte), enqueue=False))
    with pytest.raises(ValidationError, match=r"no threshold reaches precision 0.99"):
        proxy_threshold_choose(run, criterion_key="usable", target_precision=0.99)
    with pytest.raises(ValidationError, match="not one of this run's criteria"):
        proxy_threshold_choose(run, criterion_key="severity")
    assert ProxyRun.objects.count() == 1


def test_latte_score_per_system_and_metadata_field(study, fake_latte):
    for index, item in enumerate(study.items.order_by("pk")):
        item.metadata = {"speaker": "s1" if index < 3 else "s2"}
        item.save()
    run = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                   backend=backend_for(fake_latte), enqueue=False))
    by_system = {row["group"]: row["latte_score"]
                 for row in latte_scores(run, criterion_key="usable", by="system")}
    assert by_system == {"sys-0": 100.0, "sys-1": 100.0, "sys-2": 0.0}
    by_speaker = latte_scores(run, criterion_key="usable", by="speaker")
    assert [(row["group"], row["n"]) for row in by_speaker] == [("s1", 9), ("s2", 9)]
    assert by_speaker[0]["latte_score"] == pytest.approx(200 / 3, abs=0.01)


def test_rubric_run_scores_severity_with_probability_weights(study):
    def rubric(request):
        # Puts most mass on 0 for variant 0, on 2 for variant 2.
        weights = {"0": [0.7, 0.2, 0.1], "1": [0.2, 0.6, 0.2], "2": [0.1, 0.2, 0.7]}
        w = weights[_variant(request.prompt.split("Output:")[-1])]
        top = {str(point): math.log(p) for point, p in enumerate(w)}
        return answer(request, max(top, key=top.get), top=[top])

    with FakeOpenAI(rubric) as server:
        run = run_here(proxy_run_start(study=study, method="rubric", criteria=["severity"],
                                       backend=backend_for(server), enqueue=False))
        assert "Meaning lost or changed" in server.requests[0].prompt
    answers = {_variant(text): (value, score) for text, value, score in
               Judgment.objects.filter(rater=run.rater).values_list(
                   "slot__output__text", "value", "numeric_value")}
    # The stored score is P(meaning preserved) = P(0) + P(1), as the analysis reads proxies.
    assert answers["0"] == ("0", pytest.approx(0.9))
    assert answers["1"] == ("1", pytest.approx(0.8))
    assert answers["2"] == ("2", pytest.approx(0.3))


def drpe_responder(request):
    """Dynamic roles on request; votes prefer the shorter summary from every role."""
    prompt = request.prompt
    if "different kinds of people" in prompt:
        return answer(request, "1. Student: reads the article for a quick overview.\n"
                               "2. Student: reads the article to get a quick overview.")
    shown_a = re.search(r"Summary A: (.*)", prompt).group(1)
    shown_b = re.search(r"Summary B: (.*)", prompt).group(1)
    choice = "A" if len(shown_a) <= len(shown_b) else "B"
    n = int(re.search(r"exactly (\d+) lines", prompt).group(1))
    return answer(request, "\n".join(f"{i}. Summary {choice} - it is shorter"
                                     for i in range(1, n + 1)))


def test_drpe_run_judges_the_pairs_humans_see_in_both_orders():
    study = make_study(n_items=3, n_systems=2, design="pairwise")
    for output in Output.objects.filter(item__study=study, system__name="sys-1"):
        output.text += " and a much longer ending"
        output.save()
    with FakeOpenAI(drpe_responder) as server:
        run = run_here(proxy_run_start(study=study, method="drpe", backend=backend_for(server),
                                       params={"dynamic_roles": 2}, enqueue=False))
        vote_prompts = [r.prompt for r in server.requests if "Summary A:" in r.prompt]
    assert run.status == ProxyRun.Status.DONE and run.done == 3
    assert len(vote_prompts) == 6  # both orders for each of the three pairs
    # The two near-identical dynamic roles are merged by DBSCAN: 3 static + 1 dynamic.
    assert all("exactly 4 lines" in prompt for prompt in vote_prompts)
    for judgment in Judgment.objects.filter(rater=run.rater).select_related(
            "slot__output__system", "slot__output_b__system"):
        shorter_is_a = judgment.slot.output.system.name == "sys-0"
        assert judgment.value == ("A" if shorter_is_a else "B")
        assert judgment.numeric_value == pytest.approx(1.0 if shorter_is_a else 0.0)


def test_run_proxy_command_reports_progress_and_latte_scores(study, fake_latte, capsys):
    call_command("run_proxy", "--study", study.slug, "--method", "latte", "--criteria", "usable",
                 "--backend", json.dumps({"base_url": fake_latte.base_url, "model": "judge-test"}),
                 "--sync", "--latte-by", "system")
    out = capsys.readouterr().out
    assert "done, 18/18 answers, 0 unreadable" in out
    assert "system=sys-2: LATTEScore 0.0 (n=6)" in out


def test_local_hugging_face_judge_runs_on_the_gpu_queue_from_logits(study, request,
                                                                  allow_tmp_model_dirs):
    model_dir = request.getfixturevalue("causal_dir")  # a tiny random Llama, saved
    run = proxy_run_start(study=study, method="latte", criteria=["usable"],
                          backend={"backend": "hf", "model_path": model_dir, "device": "cpu"},
                          enqueue=False)
    assert run.queue == "gpu"
    assert run.rater.metadata["backend"]["backend"] == "hf"
    run = run_here(run)
    assert run.status == ProxyRun.Status.DONE and run.done == 18
    assert run.usage["answers_logits"] == 18
    scores = Judgment.objects.filter(rater=run.rater).values_list("numeric_value", flat=True)
    assert all(0 < p < 1 for p in scores)


def test_the_configured_key_goes_to_the_configured_endpoint_only(settings, monkeypatch, fake_latte):
    """An editor's base_url never receives the organisation's judge key."""
    from proxies.runs import backend_clean

    monkeypatch.setenv("EVALSTUDY_JUDGE_API_KEY", "sk-organisation")
    settings.EVALSTUDY_JUDGE_BASE_URL = "http://judge.internal:8000/v1"
    settings.EVALSTUDY_JUDGE_MODEL = "m"
    assert backend_clean(None)["api_key_env"] == "EVALSTUDY_JUDGE_API_KEY"
    assert "api_key_env" not in backend_clean({"base_url": fake_latte.base_url})
    settings.EVALSTUDY_JUDGE_ALLOWED_HOSTS = ["judge.internal"]
    with pytest.raises(ValidationError, match="not in EVALSTUDY_JUDGE_ALLOWED_HOSTS"):
        backend_clean({"base_url": fake_latte.base_url})


def test_a_running_run_is_not_resumed_twice(study, fake_latte):
    from proxies.runs import proxy_run_resume

    run = proxy_run_start(study=study, method="latte", criteria=["usable"],
                          backend=backend_for(fake_latte), enqueue=False)
    ProxyRun.objects.filter(pk=run.pk).update(status=ProxyRun.Status.RUNNING)
    run.refresh_from_db()
    with pytest.raises(ValidationError, match="still running"):
        proxy_run_resume(run)


def test_a_unit_answered_after_a_failure_counts_once(study, fake_latte):
    """A batch redelivered after a failure stores the answer: the run counts it as done, not
    also as failed, and so does not finish early."""
    from proxies.runs import proxy_run_refresh

    run = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                   backend=backend_for(fake_latte), enqueue=False))
    slot = Judgment.objects.filter(rater=run.rater).first().slot_id
    ProxyRun.objects.filter(pk=run.pk).update(unreadable={f"{slot}:usable": "timeout"})
    run = proxy_run_refresh(run)
    assert (run.done, run.failed) == (18, 0)


def drpe_coarse_responder(request):
    """Roles only from the coarse (occupations) prompt; votes as `drpe_responder`."""
    if "most common occupations" in request.prompt:
        return answer(request, "1. Teacher: reads to prepare a lesson.")
    return drpe_responder(request)


def test_drpe_run_takes_the_papers_role_prompt_and_its_eq4_sum():
    """role_prompts and aggregation reach the judge: the coarse prompt is the one sent, and
    eq. 4's sums decide the answer (the stored number stays the share of votes for A)."""
    study = make_study(n_items=2, n_systems=2, design="pairwise")
    for output in Output.objects.filter(item__study=study, system__name="sys-1"):
        output.text += " and a much longer ending"
        output.save()
    with FakeOpenAI(drpe_coarse_responder) as server:
        run = run_here(proxy_run_start(
            study=study, method="drpe", backend=backend_for(server),
            params={"dynamic_roles": 1, "role_prompts": "coarse", "aggregation": "sum"},
            enqueue=False))
        prompts = [r.prompt for r in server.requests]
    assert run.status == ProxyRun.Status.DONE, run.error
    assert any("most common occupations" in p for p in prompts)
    assert not any("different kinds of people" in p for p in prompts)
    assert run.params["aggregation"] == "sum"
    for judgment in Judgment.objects.filter(rater=run.rater).select_related(
            "slot__output__system"):
        shorter_is_a = judgment.slot.output.system.name == "sys-0"
        assert judgment.value == ("A" if shorter_is_a else "B")
        assert 0.0 <= judgment.numeric_value <= 1.0
