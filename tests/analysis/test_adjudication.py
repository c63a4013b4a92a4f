"""The adjudication queue: which units each rule queues (and which it leaves out), recording an
expert's label beside the judgments (never changing them), refusing a bad label with a clear
error, the pages' and the API's tenancy across studies and roles."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from analysis.adjudication import adjudication_queue, adjudication_record, adjudication_unit
from analysis.models import Adjudication, AdjudicationRevision
from analysis.stats.disagreement import Answer, Thresholds, unit_flags
from annotation.models import Judgment, JudgmentRevision
from evalstudy.audit import API, WEB
from evalstudy.criteria import pair_oriented
from evalstudy.models import AuditEvent, StudyCollaborator
from tests.analysis.adjudication_data import disagreement_study, output_of
from tests.factories import UserFactory, token_client


def _queued(study, **kwargs) -> dict[tuple[str, str, bool], list[str]]:
    """(criterion, item, is a pair) -> reasons."""
    return {(e.criterion.key, e.item, e.output_b is not None): e.reasons
            for e in adjudication_queue(study, **kwargs)}


@pytest.fixture
def adjudication_people(db):
    owner = UserFactory(username="adj-owner", is_staff=True)
    users = {"owner": owner,
             "editor": UserFactory(username="adj-editor", is_staff=True),
             "viewer": UserFactory(username="adj-viewer", is_staff=True),
             "other": UserFactory(username="adj-other", is_staff=True)}
    study = disagreement_study(owner=owner)
    StudyCollaborator.objects.create(study=study, user=users["editor"], role="editor")
    StudyCollaborator.objects.create(study=study, user=users["viewer"], role="viewer")
    other_study = disagreement_study(slug="elsewhere", owner=users["other"])
    return study, other_study, users


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- the rules, on plain data ------------------------------------------------------------------
def test_nominal_rule_queues_a_majority_below_the_threshold_and_needs_two_judgments():
    def flags(values, **kw):
        answers = [Answer((1, None), f"r{n}", v, True) for n, v in enumerate(values)]
        return unit_flags(answers, kind="categorical", thresholds=Thresholds(**kw))

    assert flags(["x", "y"])  # 50%
    assert not flags(["x", "x", "y"])  # 67%
    assert flags(["x", "x", "y"], majority=0.7)
    assert not flags(["x", "x", "x", "y", "y"])  # 60% is not below 60%
    assert not flags(["x"])  # one judgment cannot disagree
    assert not flags(["x", "y"], min_judgments=3)
    with pytest.raises(ValueError, match="min_judgments"):
        Thresholds(min_judgments=1)


def test_ordinal_rule_reads_the_spread_against_the_scale():
    def flags(values, scale, **kw):
        answers = [Answer((1, None), f"r{n}", v, True) for n, v in enumerate(values)]
        return unit_flags(answers, kind="likert", scale=scale, thresholds=Thresholds(**kw))

    assert not flags(["2", "4"], (1, 5))  # range 2 of 4 points: 50%, not above
    assert flags(["1", "4"], (1, 5))  # 75%
    assert flags(["2", "4"], (1, 3))  # the same answers on a shorter scale: 100%
    assert not flags(["2", "2", "2", "4"], (1, 5))
    assert flags(["2", "2", "2", "4"], (1, 5), sd=0.2)  # SD 1.0 / 4 = 25% above 20%
    severity = unit_flags([Answer((1, None), "a", "0", True), Answer((1, None), "b", "2", True)],
                          kind="severity", scale=(0, 2))
    assert "0 to 2" in severity[(1, None)].why[0]


def test_proxy_rule_compares_decisions_not_raw_answers():
    def flags(kind, humans, proxy):
        answers = [Answer((1, None), f"r{n}", v, True) for n, v in enumerate(humans)]
        answers.append(Answer((1, None), "judge", proxy, False))
        return unit_flags(answers, kind=kind)

    # Severity 0 and 1 both preserve the meaning (LATTE): a proxy's 1 agrees with raters' 0.
    assert not flags("severity", ["0", "0"], "1")
    assert flags("severity", ["0", "0"], "2")[(1, None)].reasons == ["proxy"]
    # An even split has no majority for a proxy to contradict (the raters rule takes it).
    assert flags("binary", ["yes", "no"], "no")[(1, None)].reasons == ["raters"]
    # Likert answers decide nothing.
    assert not flags("likert", ["3", "3"], "1")


def test_pairs_are_read_one_way_round():
    assert pair_oriented(7, 3, "A") == ((3, 7), "B")
    assert pair_oriented(3, 7, "A") == ((3, 7), "A")
    assert pair_oriented(7, 3, "tie") == ((3, 7), "tie")


# --- the queue of a study ----------------------------------------------------------------------
def test_queue_holds_the_disagreements_of_each_rule_and_nothing_else(adjudication_people):
    study, _other, _users = adjudication_people
    assert _queued(study) == {
        ("usable", "i1", False): ["raters"],
        ("usable", "i2", False): ["proxy"],
        ("quality", "i1", False): ["raters"],
        ("preference", "i1", True): ["raters"],
    }
    assert ("usable", "i4", False) in _queued(study, thresholds=Thresholds(majority=0.7))
    assert _queued(study, reason="proxy") == {("usable", "i2", False): ["proxy"]}
    assert set(_queued(study, criterion="quality")) == {("quality", "i1", False)}
    why = {e.item: e.why for e in adjudication_queue(study, criterion="usable")}
    assert "judge decided otherwise than the raters' majority (yes, 3 raters)" in why["i2"][0]
    assert "given by 1 of 2 raters (50%), below 60%" in why["i1"][0]


def test_researcher_excluded_raters_do_not_make_a_disagreement(adjudication_people):
    from django.utils import timezone

    from evalstudy.models import Enrollment, Rater

    study, _other, _users = adjudication_people
    r2 = Rater.objects.get(study=study, external_id="r2")
    Enrollment.objects.update_or_create(study=study, rater=r2,
                                        defaults={"excluded_at": timezone.now()})
    queued = _queued(study)
    assert ("usable", "i1", False) not in queued  # only r1 is left on i1
    assert ("preference", "i1", True) not in queued


def test_recording_a_label_leaves_every_judgment_as_it_was(adjudication_people):
    study, _other, users = adjudication_people
    before = sorted(Judgment.objects.values_list("id", "value", "numeric_value", "revision",
                                                 "submitted_at", "rater_id"))
    revisions = JudgmentRevision.objects.count()
    unit = adjudication_unit(study, "usable", output_of(study, "i1", "sys-a").pk, None)
    label = adjudication_record(study=study, criterion=unit.criterion, output=unit.output,
                                value="No", note="reads as unusable", reason="test",
                                actor=users["editor"], source=WEB)
    assert (label.value, label.note, label.adjudicated_by) == ("no", "reads as unusable",
                                                               users["editor"])
    assert sorted(Judgment.objects.values_list("id", "value", "numeric_value", "revision",
                                               "submitted_at", "rater_id")) == before
    assert JudgmentRevision.objects.count() == revisions
    assert ("usable", "i1", False) not in _queued(study)
    assert ("usable", "i1", False) in _queued(study, state="done")
    event = AuditEvent.objects.get(target_type="analysis.adjudication", target_id=str(label.pk))
    assert (event.action, event.actor, event.source) == ("create", users["editor"], WEB)
    assert event.changes["value"] == [None, "no"]


def test_a_changed_label_keeps_the_one_it_replaced(adjudication_people):
    study, _other, users = adjudication_people
    unit = adjudication_unit(study, "quality", output_of(study, "i1", "sys-a").pk, None)
    kwargs = {"study": study, "criterion": unit.criterion, "output": unit.output,
              "actor": users["owner"], "source": WEB}
    first = adjudication_record(value="2", **kwargs)
    assert first.numeric_value == 2.0
    same = adjudication_record(value=2, **kwargs)  # the same label again: nothing new
    assert same.revision == 0 and not AdjudicationRevision.objects.exists()
    second = adjudication_record(value="3", note="on reflection", **kwargs)
    assert (second.pk, second.value, second.revision) == (first.pk, "3", 1)
    old = AdjudicationRevision.objects.get(adjudication=second)
    assert (old.value, old.adjudicated_by) == ("2", users["owner"])
    assert AuditEvent.objects.filter(target_type="analysis.adjudication",
                                     action="update").count() == 1


def test_a_pair_given_the_other_way_round_is_stored_in_id_order(adjudication_people):
    study, _other, users = adjudication_people
    a, b = output_of(study, "i1", "sys-a"), output_of(study, "i1", "sys-b")
    low, high = sorted((a, b), key=lambda o: o.pk)
    label = adjudication_record(study=study, criterion=study.criteria.get(key="preference"),
                                output=high, output_b=low, value="a", actor=users["owner"],
                                source=WEB)
    assert (label.output_id, label.output_b_id, label.value) == (low.pk, high.pk, "B")


@pytest.mark.parametrize(("criterion", "value", "field", "message"), [
    ("usable", "maybe", "value", "'maybe' is not one of 'yes', 'no'"),
    ("quality", "6", "value", "'6' is not one of '1', '2', '3', '4', '5'"),
    ("quality", None, "value", "a value is required"),
])
def test_an_invalid_label_is_refused_naming_the_field_and_nothing_is_stored(
        adjudication_people, criterion, value, field, message):
    study, _other, users = adjudication_people
    with pytest.raises(ValidationError) as raised:
        adjudication_record(study=study, criterion=study.criteria.get(key=criterion),
                            output=output_of(study, "i1", "sys-a"), value=value,
                            actor=users["owner"], source=WEB)
    assert message in raised.value.message_dict[field][0]
    assert not Adjudication.objects.exists()
    assert not AuditEvent.objects.filter(target_type="analysis.adjudication").exists()


def test_a_unit_of_another_study_or_the_wrong_shape_is_refused(adjudication_people):
    study, other, users = adjudication_people
    kwargs = {"study": study, "criterion": study.criteria.get(key="usable"), "value": "yes",
              "actor": users["owner"], "source": WEB}
    with pytest.raises(ValidationError) as raised:
        adjudication_record(output=output_of(other, "i1", "sys-a"), **kwargs)
    assert "output" in raised.value.message_dict
    with pytest.raises(ValidationError) as raised:
        adjudication_record(output=output_of(study, "i1", "sys-a"),
                            output_b=output_of(study, "i1", "sys-b"), **kwargs)
    assert "only pairwise" in raised.value.message_dict["output_b"][0]
    with pytest.raises(ValidationError) as raised:
        adjudication_record(**{**kwargs, "criterion": other.criteria.get(key="usable")},
                            output=output_of(study, "i1", "sys-a"))
    assert "criterion" in raised.value.message_dict
    assert not Adjudication.objects.exists()


# --- the pages ---------------------------------------------------------------------------------
def test_queue_page_lists_units_with_why_and_filters(adjudication_people):
    study, _other, users = adjudication_people
    page = _client(users["viewer"]).get(reverse("analysis:adjudication", args=[study.slug]))
    assert page.status_code == 200
    body = page.content.decode()
    assert "4 units to adjudicate" in body
    assert "judge decided otherwise" in body
    assert "sys-a" not in body  # blind: no system names
    filtered = _client(users["viewer"]).get(
        reverse("analysis:adjudication", args=[study.slug]), {"reason": "proxy"})
    assert "1 unit to adjudicate" in filtered.content.decode()
    bad = _client(users["viewer"]).get(
        reverse("analysis:adjudication", args=[study.slug]), {"majority": "2"})
    assert bad.status_code == 400
    assert "less than or equal to 1" in bad.content.decode()


def test_unit_page_shows_the_item_outputs_and_every_answer(adjudication_people):
    study, _other, users = adjudication_people
    a, b = output_of(study, "i1", "sys-a"), output_of(study, "i1", "sys-b")
    low, high = sorted((a, b), key=lambda o: o.pk)
    url = reverse("analysis:adjudication_pair", args=[study.slug, "preference", low.pk, high.pk])
    body = _client(users["editor"]).get(url).content.decode()
    assert "reference 1" in body and "context 1" in body
    assert a.text in body and b.text in body
    assert "sys-a</" not in body and "(system" not in body
    # Both raters' answers, read with the lower id as A: they differ.
    assert body.count("<td>A</td>") == 1 and body.count("<td>B</td>") == 1
    assert 'id="adjudicate-form"' in body
    proxy_url = reverse("analysis:adjudication_unit",
                        args=[study.slug, "usable", output_of(study, "i2", "sys-a").pk])
    proxy_page = _client(users["viewer"]).get(proxy_url).content.decode()
    assert "<td>judge</td><td>LLM judge</td><td>no</td>" in proxy_page


def test_editor_records_a_label_on_the_page_and_a_bad_one_is_shown_as_an_error(adjudication_people):
    study, _other, users = adjudication_people
    output = output_of(study, "i1", "sys-a")
    url = reverse("analysis:adjudication_unit", args=[study.slug, "usable", output.pk])
    client = _client(users["editor"])
    refused = client.post(url, {"value": "perhaps", "note": "x"})
    assert refused.status_code == 400
    assert "value: &#x27;perhaps&#x27; is not one of" in refused.content.decode()
    assert not Adjudication.objects.exists()
    done = client.post(url, {"value": "yes", "note": "fine"})
    assert done.status_code == 302
    label = Adjudication.objects.get()
    assert (label.value, label.note, label.reason) == (
        "yes", "fine", "the most common answer ('yes') was given by 1 of 2 raters (50%), "
        "below 60%")
    assert "3 units to adjudicate" in client.get(done["Location"]).content.decode()


def test_roles_and_studies(adjudication_people):
    study, other, users = adjudication_people
    output = output_of(study, "i1", "sys-a")
    queue = reverse("analysis:adjudication", args=[study.slug])
    unit = reverse("analysis:adjudication_unit", args=[study.slug, "usable", output.pk])
    viewer = _client(users["viewer"])
    page = viewer.get(unit)
    assert page.status_code == 200 and 'id="adjudicate-form"' not in page.content.decode()
    assert "read-only" in viewer.get(queue).content.decode()
    assert viewer.post(unit, {"value": "yes"}).status_code == 403
    stranger = _client(users["other"])
    assert stranger.get(queue).status_code == 404
    assert stranger.get(unit).status_code == 404
    assert stranger.post(unit, {"value": "yes"}).status_code == 404
    # Another study's output under this study's address: not found, nothing stored.
    foreign = reverse("analysis:adjudication_unit",
                      args=[study.slug, "usable", output_of(other, "i1", "sys-a").pk])
    assert _client(users["owner"]).post(foreign, {"value": "yes"}).status_code == 404
    # A pair given in the wrong order, a non-pairwise criterion with a pair: not units.
    a, b = output_of(study, "i1", "sys-a"), output_of(study, "i1", "sys-b")
    low, high = sorted((a.pk, b.pk))
    for args in (["preference", high, low], ["usable", low, high]):
        assert _client(users["owner"]).get(reverse(
            "analysis:adjudication_pair", args=[study.slug, *args])).status_code == 404
    assert not Adjudication.objects.exists()
    assert Client().get(queue).status_code == 302  # to the sign-in page


# --- the API -----------------------------------------------------------------------------------
def test_api_lists_the_queue_and_records_a_label(adjudication_people):
    study, other, users = adjudication_people
    url = reverse("api-study-adjudication", args=[study.slug])
    listing = token_client(users["viewer"]).get(url, {"criterion": "usable"})
    assert listing.status_code == 200
    results = listing.json()["results"]
    assert {(r["item"], tuple(r["reasons"])) for r in results} == {
        ("i1", ("raters",)), ("i2", ("proxy",))}
    output = output_of(study, "i2", "sys-a")
    editor = token_client(users["editor"])
    created = editor.post(url, {"criterion": "usable", "output": output.pk, "value": True,
                                "note": "the judge is wrong"}, content_type="application/json")
    assert created.status_code == 201, created.json()
    assert created.json()["value"] == "yes"
    event = AuditEvent.objects.get(target_type="analysis.adjudication")
    assert event.source == API
    assert {r["item"] for r in editor.get(url, {"criterion": "usable"}).json()["results"]} == {
        "i1"}
    bad = editor.post(url, {"criterion": "usable", "output": output.pk, "value": "maybe"},
                      content_type="application/json")
    assert bad.status_code == 400
    assert "is not one of" in bad.json()["field_errors"]["value"][0]
    foreign = editor.post(url, {"criterion": "usable",
                                "output": output_of(other, "i1", "sys-a").pk, "value": "yes"},
                          content_type="application/json")
    assert foreign.status_code == 400 and "output" in foreign.json()["field_errors"]
    assert token_client(users["viewer"]).post(
        url, {"criterion": "usable", "output": output.pk, "value": "no"},
        content_type="application/json").status_code == 403
    assert token_client(users["other"]).get(url).status_code == 404
    assert Adjudication.objects.get().value == "yes"
    bad_query = token_client(users["viewer"]).get(url, {"state": "someday"})
    assert bad_query.status_code == 400 and "state" in bad_query.json()["field_errors"]
