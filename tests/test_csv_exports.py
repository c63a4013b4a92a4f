"""Every CSV export neutralises spreadsheet formulas: item ids, system names, rater names, free
text answers and metric errors that start with = + - @ are written with a leading quote, so
Excel, LibreOffice and Google Sheets show them as text. Numbers (also negative) stay numbers."""

import csv
import io

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from annotation.services import judgments_import
from evalstudy.models import Item, Study, System
from evalstudy.services import assignment_next, study_open
from evalstudy.spec.files import parse_judgments_csv
from metrics.models import MetricConfig, MetricResult, MetricRun
from tests.factories import UserFactory, invite, make_study

FORMULAS = {
    "item": '=HYPERLINK("http://evil.example","click")',
    "system": "+cmd|' /C calc'!A0",
    "other_system": "@SUM(1+1)",
    "rater": "-2+3+cmd|' /C calc'!A0",
    "text": "=1+1",
    "error": "=WEBSERVICE(\"http://evil.example\")",
}
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


@pytest.fixture
def hostile_study(db):
    """A study whose stored strings are formulas, with judgments, metric results and seats."""
    study = make_study(n_items=2, n_systems=2)
    item = Item.objects.filter(study=study).order_by("id").first()
    item.external_id = FORMULAS["item"]
    item.save()
    System.objects.filter(study=study, name="sys-0").update(name=FORMULAS["system"])
    System.objects.filter(study=study, name="sys-1").update(name=FORMULAS["other_system"])
    study_open(study=study)
    assignment_next(study=study, rater=invite(study, external_id="p1",
                                                    display_name=FORMULAS["rater"]))
    rows = [["rater", "item", "system", "criterion", "value"],
            [FORMULAS["rater"], FORMULAS["item"], FORMULAS["system"], "severity", "2"],
            [FORMULAS["rater"], FORMULAS["item"], FORMULAS["system"], "note", FORMULAS["text"]],
            [FORMULAS["rater"], "item-001", FORMULAS["other_system"], "severity", "0"]]
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    judgments_import(study=study, rows=parse_judgments_csv(buffer.getvalue(), "j.csv"),
                     file_name="j.csv", default_rater_kind="expert")
    config = MetricConfig.objects.create(metric="wer", version="1", config_hash="c" * 64,
                                         signature={"note": "=not a formula here"})
    run = MetricRun.objects.create(study=study, status="done", metrics=["wer"])
    run.configs.add(config)
    outputs = list(study.items.order_by("id").first().outputs.order_by("id"))
    MetricResult.objects.create(output=outputs[0], config=config, values={"wer": -0.5},
                                headline=-0.5)
    MetricResult.objects.create(output=outputs[1], config=config, error=FORMULAS["error"])
    return Study.objects.get(pk=study.pk)


def _assert_safe(text: str, where: str, expect: tuple[str, ...]) -> None:
    rows = list(csv.reader(io.StringIO(text)))
    assert len(rows) > 1, f"{where}: no rows"
    cells = [cell for row in rows for cell in row]
    for cell in cells:
        if cell.startswith(TRIGGERS):
            float(cell)  # only a number may start like a formula; anything else fails here
    for name in expect:
        assert "'" + FORMULAS[name] in cells, f"{where}: {name} not written (neutralised)"


@pytest.fixture
def staff(db):
    client = Client()
    client.force_login(UserFactory(username="boss", is_staff=True, is_superuser=True))
    return client


def test_design_csv_admin_and_command(hostile_study, staff, tmp_path):
    response = staff.get(reverse("admin:evalstudy_study_design_csv", args=[hostile_study.pk]))
    _assert_safe(response.content.decode(), "admin design.csv", ("item", "system"))
    out = tmp_path / "design.csv"
    call_command("export_design", hostile_study.slug, "--csv", str(out))
    _assert_safe(out.read_text(), "export_design", ("item", "system"))


def test_metric_results_csv_view_and_command(hostile_study, staff, tmp_path):
    response = staff.get(reverse("metrics:csv", args=[hostile_study.slug]))
    text = response.content.decode()
    _assert_safe(text, "metrics.csv", ("item", "system", "other_system", "error"))
    assert "-0.5" in text  # a negative number is still a number
    out = tmp_path / "metrics.csv"
    call_command("export_metrics", hostile_study.slug, "--csv", str(out))
    _assert_safe(out.read_text(), "export_metrics", ("item", "system", "error"))


def test_monitor_progress_csv(hostile_study, staff):
    response = staff.get(reverse("annotation:monitor_csv", args=[hostile_study.slug]))
    _assert_safe(response.content.decode(), "progress.csv", ("rater",))


@pytest.mark.slow
def test_analyze_judgment_and_statistics_csv(hostile_study, tmp_path):
    judgments, stats = tmp_path / "judgments.csv", tmp_path / "stats.csv"
    call_command("analyze", "--study", hostile_study.slug, "--engine", "statsmodels",
                 "--judgments-csv", str(judgments), "--stats-csv", str(stats))
    _assert_safe(judgments.read_text(), "analyze --judgments-csv",
                 ("item", "system", "rater", "text"))
    _assert_safe(stats.read_text(), "analyze --stats-csv", ())


def test_exports_never_write_nan_or_nat(db, tmp_path):
    """Imported judgments have no serving time: pandas made NaT/NaN of it, and the analyze
    command's CSV wrote the strings "NaT" and "nan" into the cells."""
    study = make_study(n_items=2, n_systems=2, slug="nat", status=Study.Status.OPEN)
    rows = parse_judgments_csv("rater,item,system,criterion,value\n"
                               "r1,item-000,sys-0,usable,yes\n"
                               "r1,item-001,sys-1,usable,no\n", "j.csv")
    judgments_import(study=study, rows=rows, file_name="j.csv")
    target = tmp_path / "judgments.csv"
    call_command("analyze", "--study", study.slug, "--engine", "statsmodels",
                 "--judgments-csv", str(target), "--stats-csv", str(tmp_path / "stats.csv"))
    for path in (target, tmp_path / "stats.csv"):
        text = path.read_text(encoding="utf-8")
        cells = {cell for line in text.splitlines() for cell in line.split(",")}
        assert not cells & {"NaT", "nan", "NaN", "None"}, path.name
    header = target.read_text(encoding="utf-8").splitlines()[0].split(",")
    row = target.read_text(encoding="utf-8").splitlines()[1].split(",")
    assert row[header.index("served_at")] == "" and row[header.index("seconds")] == ""
