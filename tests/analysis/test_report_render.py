"""The report a reviewer reads, rendered for real: the demo ASR study (humans, automatic
metrics and an LLM judge on the LATTE prompt) and the demo pairwise study, analysed end to end,
written to var/test-artifacts/reports/ as HTML, JSON, PDF and one PNG per PDF page (pdftoppm),
so that a person can look at them; and checked for what must never be printed.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import zlib
from pathlib import Path

import jiwer
import pytest
from django.core.management import call_command

from analysis.models import AnalysisRun
from analysis.services import analysis_run_execute, analysis_run_start
from proxies.runs import proxy_batch_judge, proxy_run_dispatch, proxy_run_start
from tests.analysis.demo_data import (
    load_demo,
    simulate_asr_raters,
    simulate_esa_raters,
    simulate_pairwise_raters,
    simulate_tuple_raters,
)
from tests.proxies.judges.fake_openai import FakeOpenAI, yes_no_reply

ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts" / "reports"
LATTE = re.compile(r"Ground truth: \{(.*)\}\. Transcription: \{(.*)\}\.", re.S)
# What a report must never show a reader.
NEVER = ("nan", "NaN", "NaT", "None", "Traceback", "Error:", "inf%", "-inf")


def _judge_reply(request):
    """An LLM judge whose P(yes) falls with the word error rate of the LATTE prompt's pair,
    with its own (deterministic) noise: a judge is not a copy of WER."""
    found = LATTE.search(request.prompt)
    error = jiwer.wer(found.group(1), found.group(2)) if found and found.group(1) else 0.0
    noise = random.Random(zlib.crc32(request.prompt.encode())).gauss(0.0, 0.15)
    return yes_no_reply(request, max(0.02, min(0.98, 1.0 - 1.6 * error + noise)))


def _judge(study, server) -> None:
    run = proxy_run_start(study=study, method="latte", criteria=["usable", "severity"],
                          backend={"base_url": server.base_url, "model": "demo-judge"},
                          params={"threshold": 0.6}, enqueue=False)
    batches = []
    proxy_run_dispatch(run, send=lambda queue, ids: batches.append(ids))
    for ids in batches:
        proxy_batch_judge(run_id=run.pk, slot_ids=ids)


def _render(study, name: str, options: dict) -> AnalysisRun:
    run = analysis_run_execute(analysis_run_start(study=study, options=options, enqueue=False))
    assert run.status == AnalysisRun.Status.DONE, run.error
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob(f"{name}*"):
        old.unlink()
    (ARTIFACTS / f"{name}.html").write_text(run.report_html, encoding="utf-8")
    (ARTIFACTS / f"{name}.json").write_text(json.dumps(run.result, indent=1), encoding="utf-8")
    pdf = ARTIFACTS / f"{name}.pdf"
    pdf.write_bytes(bytes(run.report_pdf))
    if shutil.which("pdftoppm"):
        subprocess.run(["pdftoppm", "-png", "-r", "60", str(pdf), str(ARTIFACTS / name)],
                       check=True)
    return run


def _visible_text(html: str) -> str:
    html = re.sub(r"<style.*?</style>", " ", html, flags=re.S)
    html = re.sub(r"<img[^>]*>", " ", html)
    return re.sub(r"<[^>]+>", " ", html)


@pytest.mark.slow
@pytest.mark.django_db
def test_the_demo_asr_report_renders_and_prints_nothing_misleading(settings):
    settings.EVALSTUDY_JUDGE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    study = load_demo("asr_meaning.yaml")
    assert simulate_asr_raters(study) > 0
    call_command("compute_metrics", "--study", study.slug, "--metrics", "wer", "cer", "bleu",
                 "chrf", "--sync")
    with FakeOpenAI(_judge_reply) as server:
        _judge(study, server)
    run = _render(study, "asr-demo", {"pdf": True})
    text = _visible_text(run.report_html)
    for word in NEVER:
        assert not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text), word
    assert "Deployment decisions" in text and "Agreement among human raters" in text
    assert bytes(run.report_pdf).startswith(b"%PDF")


@pytest.mark.slow
@pytest.mark.django_db
def test_the_demo_pairwise_report_renders_and_prints_nothing_misleading():
    study = load_demo("summary_preference.yaml")
    assert simulate_pairwise_raters(study) > 0
    run = _render(study, "pairwise-demo", {"pdf": True})
    text = _visible_text(run.report_html)
    for word in NEVER:
        assert not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text), word
    assert "Preference" in text


@pytest.mark.slow
@pytest.mark.django_db
def test_the_demo_esa_report_shows_mqm_direct_assessment_and_span_agreement():
    study = load_demo("translation_esa.yaml")
    assert simulate_esa_raters(study) >= 3
    run = _render(study, "esa-demo", {"pdf": True})
    text = _visible_text(run.report_html)
    for word in NEVER:
        assert not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text), word
    for heading in ("MQM scores per system", "Errors per judgment by category",
                    "Agreement on where the errors are", "Scores per system (direct assessment)",
                    "Linear mixed model", "lmerTest::lmer", "z mean"):
        assert heading in text, heading
    by_key = {c["key"]: c for c in run.result["criteria"]}
    mqm = {r["system"]: r for r in by_key["errors"]["mqm"]["systems"]}
    # The compact system's translations depart from the large one's: more and worse errors.
    assert mqm["mt-compact"]["mqm"] > mqm["mt-large"]["mqm"] + 5
    assert mqm["mt-large"]["error_free"] > mqm["mt-compact"]["error_free"]
    scores = {r["system"]: r for r in by_key["quality"]["slider"]["systems"]}
    assert scores["mt-large"]["mean"] > scores["mt-compact"]["mean"]
    assert scores["mt-large"]["z_mean"] > 0 > scores["mt-compact"]["z_mean"]
    lmm = by_key["quality"]["lmm"]
    assert lmm["family"] == "gaussian" and set(lmm["random_effects"]) == {"rater", "item"}
    agreement = by_key["errors"]["span_agreement"]
    assert 0 < agreement["char_f1"] <= 1 and agreement["alpha_marked"]["value"] > 0.3
    assert by_key["quality"]["agreement"]["level"] == "interval"


@pytest.mark.slow
@pytest.mark.parametrize("design", ["ranking", "best_worst"])
def test_ranking_and_best_worst_reports_recover_the_systems_order(db, design):
    from evalstudy.models import CalibrationItem, Criterion
    from evalstudy.services import study_open
    from tests.factories import make_study

    study = make_study(n_items=8, n_systems=4 if design == "ranking" else 5, design=design,
                       ratings_per_output=2)
    study.criteria.all().delete()
    CalibrationItem.objects.filter(study=study).delete()
    Criterion.objects.create(study=study, key="best", kind=design, prompt="Which is best?")
    study_open(study=study)
    worths = {"sys-0": 0.0, "sys-1": 1.5, "sys-2": -1.0, "sys-3": 0.6, "sys-4": -2.0}
    assert simulate_tuple_raters(study, worths=worths) > 0
    run = _render(study, f"{design}-demo", {"pdf": True})
    text = _visible_text(run.report_html)
    for word in NEVER:
        assert not re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text), word
    criterion = run.result["criteria"][0]
    if design == "ranking":
        assert "Plackett-Luce model" in text and "Ranks per system" in text
        order = [r["system"] for r in criterion["plackett_luce"]["systems"]]
        assert order[0] == "sys-1" and order[-1] == "sys-2"
    else:
        assert "Best-worst scores per system" in text
        scores = {r["system"]: r["score"] for r in criterion["best_worst"]["systems"]}
        assert scores["sys-1"] > scores["sys-0"] > scores["sys-4"]
