"""The soft-label downloads: per unit and criterion, Dawid-Skene's and MACE's distributions over
every option of the criterion (pairs read one way round), as CSV (formula-safe) and JSONL, for
viewers of the study only, audited, and linked from the judgment browser and the analysis page.
"""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from django.test import Client
from django.urls import reverse

from analysis.soft_labels import soft_label_rows
from evalstudy.models import AuditEvent, StudyCollaborator
from tests.analysis.adjudication_data import disagreement_study, output_of
from tests.factories import UserFactory


@pytest.fixture
def setting(db):
    owner = UserFactory(username="soft-owner", is_staff=True)
    study = disagreement_study(owner=owner)
    viewer = UserFactory(username="soft-viewer", is_staff=True)
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    client = Client()
    client.force_login(viewer)
    return study, client


def test_rows_hold_every_option_and_sum_to_one(setting):
    study, _client = setting
    rows = soft_label_rows(study)
    keys = {(r["criterion"], r["item"], r["output_b"] is not None) for r in rows}
    # Humans only: the judge's i3 answer adds no unit; every rated unit of every criterion.
    assert keys == {("usable", f"i{n}", False) for n in range(1, 5)} | {
        ("quality", "i1", False), ("quality", "i2", False),
        ("preference", "i1", True), ("preference", "i2", True)}
    for row in rows:
        for name in ("votes", "dawid_skene", "mace"):
            assert list(row[name]) == row["options"]
            assert math.fsum(row[name].values()) == pytest.approx(1.0, abs=1e-9)
    quality = next(r for r in rows if r["criterion"] == "quality" and r["item"] == "i1")
    assert quality["options"] == ["1", "2", "3", "4", "5"]
    assert quality["votes"] == {"1": 0.5, "2": 0.0, "3": 0.0, "4": 0.0, "5": 0.5}
    # i2's pair: both raters chose sys-a once read the same way round.
    pair = next(r for r in rows if r["criterion"] == "preference" and r["item"] == "i2")
    a = output_of(study, "i2", "sys-a")
    first_is_a = pair["output"] == a.pk
    assert pair["votes"]["A" if first_is_a else "B"] == 1.0
    assert pair["system"] == ("sys-a" if first_is_a else "sys-b")
    usable = next(r for r in rows if r["criterion"] == "usable" and r["item"] == "i3")
    assert usable["dawid_skene"]["yes"] > 0.9 and usable["mace"]["yes"] > 0.5
    assert usable["n_judgments"] == 2


def test_csv_download_is_long_formula_safe_and_audited(setting):
    study, client = setting
    study.items.filter(external_id="i1").update(external_id="=HYPERLINK(\"x\")")
    response = client.get(reverse("analysis:soft_labels", args=[study.slug, "csv"]))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="disagree-soft-labels.csv"' in response["Content-Disposition"]
    table = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert list(table[0]) == ["criterion", "criterion_kind", "item", "output", "system",
                              "output_b", "system_b", "n_judgments", "option", "votes",
                              "dawid_skene", "mace"]
    assert len(table) == 4 * 2 + 2 * 5 + 2 * 2  # units x options
    assert {row["item"] for row in table} >= {"'=HYPERLINK(\"x\")"}
    for group in _groups(table).values():
        assert math.fsum(float(r["dawid_skene"]) for r in group) == pytest.approx(1, abs=1e-5)
        assert math.fsum(float(r["mace"]) for r in group) == pytest.approx(1, abs=1e-5)
    event = AuditEvent.objects.get(action="export", study=study)
    assert event.changes["what"] == "soft labels" and event.changes["rows"] == 8


def _groups(table):
    groups: dict = {}
    for row in table:
        groups.setdefault((row["criterion"], row["output"], row["output_b"]), []).append(row)
    return groups


def test_jsonl_download_one_object_per_unit(setting):
    study, client = setting
    response = client.get(reverse("analysis:soft_labels", args=[study.slug, "jsonl"]))
    lines = [json.loads(line) for line in response.content.decode().splitlines()]
    assert len(lines) == 8
    assert {"dawid_skene", "mace", "votes", "options", "criterion", "output"} <= set(lines[0])


def test_only_viewers_of_the_study_and_known_formats(setting):
    study, client = setting
    assert client.get(reverse("analysis:soft_labels", args=[study.slug, "xlsx"])
                      ).status_code == 404
    stranger = Client()
    stranger.force_login(UserFactory(username="soft-stranger", is_staff=True))
    assert stranger.get(reverse("analysis:soft_labels", args=[study.slug, "csv"])
                        ).status_code == 404
    assert not AuditEvent.objects.filter(action="export").exists()


def test_linked_from_the_judgment_browser_and_the_analysis_page(setting):
    study, client = setting
    link = reverse("analysis:soft_labels", args=[study.slug, "csv"])
    assert link in client.get(reverse("analysis:judgments", args=[study.slug])).content.decode()
    assert link in client.get(reverse("analysis:page", args=[study.slug])).content.decode()
