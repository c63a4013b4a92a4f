"""The judgment browser (analysis.browser): each filter narrows in the database, a page costs a
bounded number of queries, downloads carry the filtered set in three formats (CSV safe from
formulas), each judgment's item is shown as its rater saw it, the exports block lists every
export, and only the study's researchers (viewers up) get in."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import pandas as pd
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotation.models import Judgment
from annotation.services import judgment_submit
from evalstudy.models import AuditEvent, Rater, Study, StudyCollaborator
from evalstudy.services import assignment_next
from tests.factories import UserFactory, invite, make_study

pytestmark = pytest.mark.django_db
# A page: session and user, the study, the filter's choices (raters, systems, criteria), the
# count, the page's rows (joined), their revisions, the latest report; one to spare.
MAX_QUERIES = 11


def _walk(study: Study, rater: Rater, answers_for, stop_after: int | None = None) -> None:
    done = 0
    while (slot := assignment_next(study=study, rater=rater)) is not None:
        judgment_submit(rater=rater, slot_id=slot.pk, answers=answers_for(slot))
        done += 1
        if stop_after is not None and done >= stop_after:
            return


@pytest.fixture
def two_rater_study():
    """2 systems x 4 items, two seats per list, an attention check every 2 items; one rater
    done (one answer revised), one half-way with a formula-like name."""
    owner = UserFactory(username="owner", is_staff=True)
    study = make_study(n_items=4, n_systems=2, ratings_per_output=2, status=Study.Status.OPEN,
                       attention_check_every=2, owner=owner)
    ann = invite(study, external_id="R-ann", display_name="Ann")
    bob = invite(study, external_id="R-bob", display_name='=HYPERLINK("http://x","y")')
    _walk(study, ann, lambda slot: {"severity": "2", "note": "meaning lost", "usable": "no"}
          if slot.kind == "attention" else {"severity": "0", "usable": "yes"})
    _walk(study, bob, lambda slot: {"severity": "1", "usable": "no"}, stop_after=3)
    # Ann changes her mind on her first target item: a revision.
    first = (Judgment.objects.filter(rater=ann, slot__kind="target", criterion__key="usable")
             .order_by("slot__position").first())
    judgment_submit(rater=ann, slot_id=first.slot_id, answers={"severity": "0", "usable": "no"})
    # Bob's judgments happened two days ago (the time filter).
    Judgment.objects.filter(rater=bob).update(
        submitted_at=timezone.now() - dt.timedelta(days=2))
    return study, owner, ann, bob


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _page(client: Client, study: Study, **params):
    return client.get(reverse("analysis:judgments", args=[study.slug]), params)


def _expected(study: Study, keep) -> set[int]:
    return {j.pk for j in Judgment.objects.filter(slot__assignment__study=study).select_related(
        "slot__output__item", "slot__output__system", "slot__output_b__system", "criterion",
        "slot__calibration_item", "slot__attention_check") if keep(j)}


def _shown(response) -> set[int]:
    assert response.status_code == 200, response.content[:500]
    page = response.context["page"]
    assert page.paginator.count <= 50  # the fixture fits one page
    return {row.judgment.pk for row in response.context["rows"]}


def test_without_a_filter_every_judgment_is_listed_newest_first(two_rater_study):
    study, owner, _, _ = two_rater_study
    response = _page(_client(owner), study)
    assert _shown(response) == _expected(study, lambda j: True)
    times = [row.judgment.submitted_at for row in response.context["rows"]]
    assert times == sorted(times, reverse=True)


def test_each_filter_narrows_to_exactly_what_it_names(two_rater_study):
    study, owner, ann, bob = two_rater_study
    client = _client(owner)
    system = study.systems.get(name="sys-1")
    cases = [
        ({"rater": ann.pk}, lambda j: j.rater_id == ann.pk),
        ({"system": system.pk}, lambda j: j.slot.output is not None
         and j.slot.output.system_id == system.pk),
        ({"item": "item-002"}, lambda j: j.slot.output is not None
         and j.slot.output.item.external_id == "item-002"),
        ({"item": "attn-1"}, lambda j: j.slot.attention_check is not None),
        ({"criterion": "note"}, lambda j: j.criterion.key == "note"),
        ({"value": "no"}, lambda j: j.value == "no"),
        ({"kind": "attention"}, lambda j: j.slot.kind == "attention"),
        ({"kind": "practice"}, lambda j: j.slot.kind == "calibration"),
        ({"kind": "target"}, lambda j: j.slot.kind == "target"),
        ({"revised": "yes"}, lambda j: j.revision > 0),
        ({"revised": "no"}, lambda j: j.revision == 0),
        ({"to": (timezone.localdate() - dt.timedelta(days=1)).isoformat()},
         lambda j: j.rater_id == bob.pk),
        ({"from": timezone.localdate().isoformat()}, lambda j: j.rater_id == ann.pk),
        ({"rater": ann.pk, "criterion": "usable", "value": "no", "kind": "target"},
         lambda j: j.rater_id == ann.pk and j.criterion.key == "usable" and j.value == "no"
         and j.slot.kind == "target"),
    ]
    everything = _expected(study, lambda j: True)
    for params, keep in cases:
        expected = _expected(study, keep)
        assert expected and expected != everything, params  # the case says something
        assert _shown(_page(client, study, **params)) == expected, params


def test_a_bad_filter_is_a_400_with_the_reason(two_rater_study):
    study, owner, _, _ = two_rater_study
    client = _client(owner)
    response = _page(client, study, **{"from": "yesterday"})
    assert response.status_code == 400
    assert "YYYY-MM-DD" in response.content.decode()
    assert _page(client, study, kind="bogus").status_code == 400
    assert _page(client, study, rater="999999").status_code == 400  # not a rater of the study


def test_a_page_costs_a_bounded_number_of_queries(two_rater_study, django_assert_max_num_queries,
                                                 monkeypatch):
    study, owner, _, _ = two_rater_study
    monkeypatch.setattr("analysis.browser.PAGE_SIZE", 10)
    client = _client(owner)
    _page(client, study)  # warm the session and the content types
    with django_assert_max_num_queries(MAX_QUERIES):
        response = _page(client, study)
    assert len(response.context["rows"]) == 10
    with django_assert_max_num_queries(MAX_QUERIES):
        _page(client, study, rater=two_rater_study[2].pk, revised="no", criterion="usable")
    # Still a page of ten, whatever the study holds.
    more = invite(study, external_id="R-more")
    _walk(study, more, lambda slot: {"severity": "0", "usable": "yes"})
    with django_assert_max_num_queries(MAX_QUERIES):
        response = _page(client, study, page=2)
    assert response.context["page"].number == 2 and len(response.context["rows"]) == 10


def test_downloads_carry_the_filtered_set_in_three_formats(two_rater_study):
    study, owner, _ann, _bob = two_rater_study
    client = _client(owner)
    params = {"criterion": "usable", "kind": "target"}
    expected = _expected(study, lambda j: j.criterion.key == "usable" and j.slot.kind == "target")
    url = lambda fmt: reverse("analysis:judgments_download", args=[study.slug, fmt])  # noqa: E731
    response = client.get(url("csv"), params)
    assert response.status_code == 200
    assert "-judgments-filtered.csv" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {int(r["judgment"]) for r in rows} == expected
    assert {r["criterion"] for r in rows} == {"usable"}
    # Bob's formula-like name is neutralised in the CSV.
    names = {r["rater"] for r in rows}
    assert "Ann" in names and "'=HYPERLINK(\"http://x\",\"y\")" in names
    revised = [r for r in rows if r["revision"] == "1"]
    assert len(revised) == 1 and json.loads(revised[0]["earlier_values"]) == ["yes"]

    jsonl = client.get(url("jsonl"), params)
    records = [json.loads(line) for line in jsonl.content.decode().splitlines()]
    assert {r["judgment"] for r in records} == expected
    assert any(r["rater"].startswith("=HYPERLINK") for r in records)  # JSON: data as it is

    parquet = client.get(url("parquet"), params)
    assert parquet["Content-Type"] == "application/vnd.apache.parquet"
    frame = pd.read_parquet(io.BytesIO(parquet.content))
    assert set(frame["judgment"]) == expected
    assert str(frame["submitted_at"].dtype).startswith("datetime64")

    # Attention checks (left out of the analysis tables) come out when the filter asks.
    checks = client.get(url("csv"), {"kind": "attention"})
    rows = list(csv.DictReader(io.StringIO(checks.content.decode())))
    assert rows and {r["item"] for r in rows} == {"attn-1"}
    # Every download is in the audit trail, with its filter.
    events = AuditEvent.objects.filter(action="export", study=study, changes__what="judgments")
    assert events.count() == 4
    assert events.filter(changes__filters={"criterion": "usable", "kind": "target"},
                         changes__format="parquet").exists()
    assert client.get(url("xlsx")).status_code == 404
    assert client.get(url("csv"), {"to": "never"}).status_code == 400


def test_the_item_is_shown_as_the_rater_saw_it_with_revisions(two_rater_study):
    study, owner, ann, _ = two_rater_study
    client = _client(owner)
    revised = Judgment.objects.get(rater=ann, revision=1)
    response = client.get(reverse("analysis:judgment_item", args=[study.slug, revised.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    output = revised.slot.output
    assert output.text in html and output.item.reference in html
    assert f"(system: {output.system.name})" in html  # for the researcher, beside the label
    assert "Output" in html  # the blinded label the rater saw
    assert "(submitted" in html and "yes" in html  # the earlier value
    # A study that hides the reference from raters hides it here too.
    Study.objects.filter(pk=study.pk).update(reference_shown=False)
    html = client.get(reverse("analysis:judgment_item", args=[study.slug, revised.pk])
                      ).content.decode()
    assert f'<p dir="auto">{output.item.reference}</p>' not in html
    assert "hides the reference" in html
    # A practice item shows its own texts.
    practice = Judgment.objects.filter(rater=ann, slot__kind="calibration").first()
    html = client.get(reverse("analysis:judgment_item", args=[study.slug, practice.pk])
                      ).content.decode()
    assert "calib-good" in html and "turn on the light" in html


def test_the_exports_block_lists_every_export_on_both_pages(two_rater_study):
    study, owner, _, _ = two_rater_study
    client = _client(owner)
    wanted = [
        reverse("api-study-judgments-csv", args=[study.slug]),
        reverse("api-study-judgments-jsonl", args=[study.slug]),
        reverse("api-study-judgments-parquet", args=[study.slug]),
        reverse("api-study-spans-csv", args=[study.slug]),
        reverse("annotation:monitor_csv", args=[study.slug]),
        reverse("admin:evalstudy_study_spec", args=[study.pk, "yaml"]),
        reverse("admin:evalstudy_study_design_csv", args=[study.pk]),
        reverse("metrics:csv", args=[study.slug]),
        reverse("analysis:page", args=[study.slug]),
        reverse("annotation:preview", args=[study.slug]),
    ]
    for url in (reverse("analysis:judgments", args=[study.slug]),
                reverse("annotation:monitor", args=[study.slug])):
        html = client.get(url).content.decode()
        assert 'id="exports-title"' in html, url
        for link in wanted:
            assert f'href="{link}"' in html, (url, link)
    # Each of them answers the owner (a download, not an error page); the admin's downloads
    # need the admin's model permissions, as a researcher account has them.
    from django.contrib.auth.models import Permission

    owner.user_permissions.set(Permission.objects.filter(content_type__app_label="evalstudy"))
    for link in wanted:
        assert client.get(link).status_code == 200, link


def test_who_may_browse(two_rater_study):
    study, _owner, ann, _ = two_rater_study
    judgment = Judgment.objects.filter(slot__assignment__study=study).first()
    urls = [reverse("analysis:judgments", args=[study.slug]),
            reverse("analysis:judgments_download", args=[study.slug, "csv"]),
            reverse("analysis:judgment_item", args=[study.slug, judgment.pk])]
    # A viewer (a collaborator who may only read) browses and downloads.
    viewer = UserFactory(username="viewer", is_staff=True)
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    for url in urls:
        assert _client(viewer).get(url).status_code == 200, url
    # Another study's owner: the study does not exist for them.
    other_owner = UserFactory(username="other", is_staff=True)
    other = make_study(n_items=2, n_systems=2, owner=other_owner, status=Study.Status.OPEN)
    for url in urls:
        assert _client(other_owner).get(url).status_code == 404, url
    # ... nor does this study's judgment under their own study's slug.
    assert _client(other_owner).get(reverse("analysis:judgment_item", args=[
        other.slug, judgment.pk])).status_code == 404
    # Nobody signed in, a rater's account, a rater's entry-link session: the sign-in page.
    rater_user = UserFactory(username="rater-account")
    for client in (Client(), _client(rater_user)):
        for url in urls:
            response = client.get(url)
            assert response.status_code == 302 and "login" in response["Location"], url
    entered = Client()
    entered.get(reverse("annotation:enter", args=[ann.access_token]))
    assert entered.get(urls[0]).status_code == 302
