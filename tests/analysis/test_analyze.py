"""The analysis end to end on a study with judgments from five raters and metric results."""

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from analysis.models import AnalysisRun
from annotation.services import judgments_import
from evalstudy.importers import study_import_spec
from evalstudy.spec.files import JudgmentRow
from evalstudy.spec.study import parse_study_spec
from metrics.services import metric_batch_score, metric_run_dispatch, metric_run_start

DEMO = Path(__file__).resolve().parents[2] / "demo"


@pytest.fixture
def rated_study(db):
    return _rated_study()


def _rated_study():
    """The ASR demo with 5 expert raters who judged every output (severity and usable),
    raters agreeing more on the large system, and WER computed."""
    path = DEMO / "asr_meaning.yaml"
    spec = parse_study_spec(path.read_text(), str(path))
    study, _ = study_import_spec(spec=spec, file_name=str(path))
    rng = random.Random(7)
    rows, line = [], 1
    quality = {"asr-small": 0.55, "asr-medium": 0.7, "asr-large": 0.85}
    for item in spec.items:
        for system in item.outputs:
            truth = rng.random() < quality[system]
            for rater in range(5):
                preserved = truth if rng.random() < 0.85 else not truth
                severity = rng.choice("01") if preserved else "2"
                for criterion, value in (("severity", severity),
                                         ("usable", "yes" if preserved else "no")):
                    line += 1
                    rows.append(JudgmentRow(line, f"expert{rater}", item.external_id, system,
                                            criterion, value))
    judgments_import(study=study, rows=rows, file_name="simulated")
    run = metric_run_start(study=study, metrics=["wer", "cer"], enqueue=False)
    batches = []
    metric_run_dispatch(run, send=lambda kind, ids, names: batches.append((ids, names)))
    for ids, names in batches:
        metric_batch_score(run_id=run.pk, output_ids=ids, metrics=names)
    return study


def test_analyze_command_writes_json_html_and_pdf(rated_study, tmp_path):
    out = tmp_path / "r"
    call_command("analyze", "--study", rated_study.slug, "--json", f"{out}.json",
                 "--html", f"{out}.html", "--pdf", f"{out}.pdf", "--judgments-csv",
                 f"{out}.csv", "--stats-csv", f"{out}.stats.csv")
    result = json.loads(Path(f"{out}.json").read_text())
    usable = next(c for c in result["criteria"] if c["key"] == "usable")
    assert usable["n_judgments"] == 36 * 3 * 5
    proportions = {row["group"]: row["proportion"] for row in usable["proportions"]}
    assert proportions["asr-large"] > proportions["asr-small"]
    glmm = usable["glmm"]
    assert "glmer" in glmm["engine"]
    assert {c["term"] for c in glmm["coefficients"]} >= {"(Intercept)"}
    assert set(glmm["random_effects"]) == {"rater", "item"}
    assert usable["contrasts"]["contrasts"], "3 systems: Holm-adjusted contrasts"
    assert 0 < usable["agreement"]["krippendorff_alpha"]["value"] < 1
    validity = next(v for v in result["validity"] if v["criterion"] == "usable")
    wer = next(p for p in validity["proxies"] if p["proxy"] == "wer")
    assert wer["higher_is_positive"] is False and 0 <= wer["auc"]["auc"]["value"] <= 1
    assert validity["deployment"]["rows"], "deployment table per speaker"
    html = Path(f"{out}.html").read_text()
    assert "Binomial GLMM" in html and "data:image/png;base64," in html
    assert "Deployment decisions" in html
    assert Path(f"{out}.pdf").read_bytes().startswith(b"%PDF")
    header = Path(f"{out}.csv").read_text().splitlines()[0]
    assert header.startswith("judgment,rater,rater_kind")
    assert AnalysisRun.objects.get().status == "done"
    stats = Path(f"{out}.stats.csv").read_text().splitlines()
    assert stats[0] == "path,statistic,value,ci_low,ci_high,se,p_value,n,method"
    assert any(line.startswith("criteria/usable/glmm/coefficients/(Intercept),estimate")
               for line in stats)
    assert any(line.startswith("criteria/usable/agreement/krippendorff_alpha,value")
               for line in stats)
    cohen = usable["agreement"]["cohen_pairs"]
    assert cohen["n_pairs"] == 10 and 0 < cohen["mean"]["unweighted"] < 1
    assert wer["auc_per_rating"]["auc"]["n"] == 36 * 3 * 5
    (williams,) = validity["williams"]
    assert {williams["proxy_a"], williams["proxy_b"]} == {"wer", "cer"}
    assert 0 <= williams["test"]["p_value"] <= 1


def test_formula_option_and_statsmodels_engine(rated_study, tmp_path):
    call_command("analyze", "--study", rated_study.slug, "--json", str(tmp_path / "a.json"),
                 "--engine", "statsmodels", "--formula", "y ~ system + (1|rater)")
    result = json.loads((tmp_path / "a.json").read_text())
    usable = next(c for c in result["criteria"] if c["key"] == "usable")
    assert usable["glmm"]["formula"] == "y ~ system + (1|rater)"
    assert "NOT glmer" in usable["glmm"]["engine"]


def test_bad_options_are_refused(rated_study):
    with pytest.raises(CommandError, match="formula must look like"):
        call_command("analyze", "--study", rated_study.slug, "--formula", "nonsense")
    assert not AnalysisRun.objects.exists()


def test_analysis_pages_api_and_reports(rated_study):
    from django.test import Client
    from django.urls import reverse

    from analysis.services import analysis_run_execute
    from tests.factories import UserFactory

    user = UserFactory(username="analyst", is_staff=True)
    rated_study.owner = user
    rated_study.save(update_fields=["owner"])
    client = Client()
    client.force_login(user)
    response = client.post(reverse("api-study-analysis-runs", args=[rated_study.slug]),
                           {"options": {"engine": "statsmodels", "pdf": True}},
                           content_type="application/json")
    assert response.status_code == 202
    run = AnalysisRun.objects.get()
    analysis_run_execute(run)  # what the worker does
    status = client.get(reverse("api-analysis-run", args=[run.pk])).json()
    assert status["status"] == "done" and status["report_urls"]["pdf"].endswith("report.pdf")
    assert b"Binomial GLMM" in client.get(reverse("analysis:report", args=[run.pk])).content
    pdf = client.get(reverse("analysis:report_pdf", args=[run.pk]))
    assert pdf["Content-Type"] == "application/pdf" and pdf.content.startswith(b"%PDF")
    page = client.get(reverse("analysis:page", args=[rated_study.slug])).content.decode()
    assert 'hx-trigger="every 2s"' in page and f"/analysis/{run.pk}/report/" in page
    bad = client.post(reverse("api-study-analysis-runs", args=[rated_study.slug]),
                      {"options": {"colour": 1}}, content_type="application/json")
    assert bad.status_code == 400 and "unknown analysis options" in bad.json()["message"]
    stranger = Client()
    stranger.force_login(UserFactory(username="nosy", is_staff=True))
    assert stranger.get(reverse("analysis:report", args=[run.pk])).status_code == 404
    assert stranger.get(reverse("api-analysis-run", args=[run.pk])).status_code == 404


def test_plan_power_from_a_pilot(rated_study, capsys):
    call_command("plan_power", "--raters", "10", "--items", "20", "--effect", "1.0",
                 "--pilot", rated_study.slug, "--criterion", "usable", "--n-sim", "8",
                 "--n-sim-per-step", "4", "--target", "0.8", "--no-progress")
    out = capsys.readouterr().out
    assert "pilot asr-meaning-demo:" in out and "item_sd" in out
    assert re.search(r"power 0\.\d{3} \(95% CI 0\.\d{3}-[01]\.\d{3}\)", out)
    assert "smallest items reaching power 0.8:" in out
    with pytest.raises(CommandError, match="--pilot needs --criterion"):
        call_command("plan_power", "--raters", "4", "--items", "10", "--effect", "1",
                     "--pilot", rated_study.slug)


@pytest.fixture
def committed_rated_study(transactional_db):
    """rated_study, committed: another process (the command run as a user runs it) sees it."""
    return _rated_study()


def test_analyze_prints_its_summary_and_nothing_else(committed_rated_study, tmp_path):
    """WeasyPrint narrated every layout step at INFO ("Step 5 - Creating layout - Page 1"),
    fontTools every subset, R's console and Python's warnings ("Mean of empty slice" for the
    median time of imported judgments) wrote into the terminal: the command's own lines
    drowned. Run as a user runs it, in its own process, against the test database."""
    from django.db import connection

    db = connection.settings_dict
    url = (f"postgres://{db['USER']}{':' + db['PASSWORD'] if db['PASSWORD'] else ''}@"
           f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}")
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings.local",
           "PYTHONWARNINGS": "default"}
    done = subprocess.run(
        [sys.executable, "manage.py", "analyze", "--study", committed_rated_study.slug,
         "--pdf", str(tmp_path / "r.pdf"), "--deployment-group", "speaker",
         "--separation", "off"],
        cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    run = AnalysisRun.objects.get()
    assert lines[0].startswith(f"analysis {run.pk} of {committed_rated_study.slug}: done in ")
    assert all(line.startswith("  warning: ") for line in lines[1:]), lines
    assert run.options["separation"] == "off" and run.options["deployment_group"] == "speaker"
    assert (tmp_path / "r.pdf").read_bytes().startswith(b"%PDF")


def test_an_unknown_deployment_group_is_refused_before_a_run_exists(rated_study):
    with pytest.raises(CommandError, match="deployment_group 'accent' is not a field of the "
                                           "items or systems"):
        call_command("analyze", "--study", rated_study.slug, "--deployment-group", "accent")
    assert not AnalysisRun.objects.exists()
