"""The tidy table of error spans: one row per span with the text it marks, for the study's
owner and viewers only."""

from __future__ import annotations

import csv
import io
import json

import pytest

from evalstudy.models import AuditEvent, StudyCollaborator
from tests.analysis.demo_data import load_demo, simulate_esa_raters
from tests.factories import UserFactory, token_client


@pytest.mark.django_db
def test_every_span_is_exported_with_the_text_it_marks_and_only_to_the_study():
    study = load_demo("translation_esa.yaml")
    simulate_esa_raters(study)
    owner, stranger = UserFactory(), UserFactory()
    study.owner = owner
    study.save()
    response = token_client(owner).get(f"/api/v1/studies/{study.slug}/spans.csv")
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert rows and {"rater", "item", "system", "side", "start", "end", "text", "category",
                     "severity", "weight", "criterion"} <= set(rows[0])
    for row in rows:
        assert row["text"].strip() and int(row["start"]) < int(row["end"])
        assert float(row["weight"]) == {"minor": 1.0, "major": 5.0, "critical": 25.0}[
            row["severity"]]
    # The compact system leaves the negation out of "Do not mix": critical, on that sentence.
    assert any(r["severity"] == "critical" and r["item"] == "s03" for r in rows)
    jsonl = token_client(owner).get(f"/api/v1/studies/{study.slug}/spans.jsonl")
    assert len(jsonl.content.decode().splitlines()) == len(rows)
    assert json.loads(jsonl.content.decode().splitlines()[0])["criterion"] == "errors"
    assert token_client(stranger).get(
        f"/api/v1/studies/{study.slug}/spans.csv").status_code == 404
    StudyCollaborator.objects.create(study=study, user=stranger, role="viewer")
    assert token_client(stranger).get(
        f"/api/v1/studies/{study.slug}/spans.parquet").status_code == 200
    assert AuditEvent.objects.filter(action="export", changes__what="spans").count() == 3
