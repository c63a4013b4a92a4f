"""The adaptive plan in study files: the `plan:` block read with located errors, written on
export, an unchanged re-import unchanged, and a registered plan never changed by an import."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from evalstudy.importers import spec_to_document, study_import_spec, study_to_spec
from evalstudy.models import AuditEvent, Study, StudyPlan
from evalstudy.services import study_open
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.plan import PlanSpec
from evalstudy.spec.study import parse_study_spec

SPEC = textwrap.dedent("""\
    study:
      slug: adapt
      title: Adaptive study
      design: adaptive
      items_per_rater: 2
    systems:
      - name: ours
      - name: base
      - name: other
    criteria:
      - key: pref
        kind: pairwise
        prompt: Which is better?
        allow_tie: true
      - key: usable
        kind: binary
        prompt: Is it usable?
    items:
      - id: i1
        outputs: {ours: a1, base: b1, other: c1}
      - id: i2
        outputs: {ours: a2, base: b2, other: c2}
      - id: i3
        outputs: {ours: a3, base: b3, other: c3}
    plan:
      criterion: pref
      contrasts:
        - [ours, base]
        - [ours, other]
      target_ci_width: 1.5
      alpha: 0.05
      spending: pocock
      check_every: 10
      max_looks: 4
      max_judgments: 40
""")


def _errors(text: str) -> list[tuple[int | None, str, str]]:
    with pytest.raises(SpecInvalid) as caught:
        parse_study_spec(text, "adapt.yaml")
    return [(e.line, e.path, e.message) for e in caught.value.errors]


def _line(text: str, marker: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if marker in line)


def test_the_plan_block_is_read():
    spec = parse_study_spec(SPEC, "adapt.yaml")
    assert spec.plan == PlanSpec(criterion="pref", contrasts=[["ours", "base"], ["ours", "other"]],
                                 target_ci_width=1.5, alpha=0.05, spending="pocock",
                                 check_every=10, max_looks=4, max_judgments=40)
    # Left out, the fields take the model's defaults.
    short = SPEC.split("plan:")[0] + "plan:\n  stop_on_decision: true\n"
    assert parse_study_spec(short, "adapt.yaml").plan == PlanSpec(stop_on_decision=True)
    assert parse_study_spec(SPEC.split("plan:")[0], "adapt.yaml").plan is None


@pytest.mark.parametrize(("old", "new", "marker", "path", "message"), [
    pytest.param("  alpha: 0.05\n", "  alpha: 0.9\n", "alpha: 0.9", "plan.alpha",
                 "must be at least 0.001 and at most 0.5, got 0.9", id="alpha"),
    pytest.param("  spending: pocock\n", "  spending: linear\n", "spending: linear",
                 "plan.spending", "'linear' is not one of obrien_fleming, pocock", id="spending"),
    pytest.param("  check_every: 10\n", "  check_every: 0\n", "check_every: 0",
                 "plan.check_every", "must be at least 1", id="check-every"),
    pytest.param("  max_looks: 4\n", "  max_looks: 99999999999\n", "max_looks: 9",
                 "plan.max_looks", "at most 2,147,483,647", id="too-large-for-the-database"),
    pytest.param("  target_ci_width: 1.5\n", "  target_ci_width: 0\n", "target_ci_width: 0",
                 "plan.target_ci_width", "must be more than 0.0", id="width-zero"),
    pytest.param("  target_ci_width: 1.5\n", "", "plan:", "plan",
                 "needs a target_ci_width or stop_on_decision: true", id="no-target"),
    pytest.param("    - [ours, other]\n", "    - [ours, ghost]\n", "[ours, ghost]",
                 "plan.contrasts[1]", "'ghost' is not a system of the study", id="unknown-system"),
    pytest.param("    - [ours, other]\n", "    - [ours, ours]\n", "[ours, ours]",
                 "plan.contrasts[1]", "compares 'ours' with itself", id="self-contrast"),
    pytest.param("    - [ours, other]\n", "    - ours\n", "    - ours",
                 "plan.contrasts[1]", "a pair of system names", id="not-a-pair"),
    pytest.param("  criterion: pref\n", "  criterion: usable\n", "criterion: usable",
                 "plan.criterion", "'usable' is a binary criterion; the plan reads a pairwise",
                 id="not-pairwise"),
    pytest.param("  criterion: pref\n", "  criterion: nope\n", "criterion: nope",
                 "plan.criterion", "names 'nope', which is not a criterion", id="no-criterion"),
    pytest.param("  max_judgments: 40\n", "  max_judgments: 40\n  colour: red\n", "colour",
                 "plan.colour", "unknown field; expected one of criterion, contrasts",
                 id="unknown-field"),
    pytest.param("  design: adaptive\n", "  design: pairwise\n", "plan:", "plan",
                 "read only by the adaptive design (study.design is 'pairwise')",
                 id="not-adaptive"),
])
def test_a_bad_plan_names_its_line_and_field(old, new, marker, path, message):
    text = SPEC.replace(old, new)
    assert text != SPEC
    errors = _errors(text)
    assert any(line == _line(text, marker) and p == path and message in m
               for line, p, m in errors), errors


def test_every_problem_of_the_plan_is_reported_at_once():
    text = SPEC.replace("  alpha: 0.05\n", "  alpha: 2\n").replace("[ours, other]", "[x, y]")
    paths = {path for _, path, _ in _errors(text)}
    assert {"plan.alpha", "plan.contrasts[1]"} <= paths


def test_an_adaptive_file_is_a_pairwise_one_for_its_control_items():
    text = SPEC + "calibration:\n  - id: c1\n    output: o\n    expected: {pref: A}\n"
    assert any("needs output_a and output_b" in m for _, _, m in _errors(text))


@pytest.mark.django_db
def test_export_writes_the_plan_and_reimport_is_unchanged():
    spec = parse_study_spec(SPEC, "adapt.yaml")
    study, outcome = study_import_spec(spec=spec, file_name="adapt.yaml")
    assert outcome == "created"
    plan = StudyPlan.objects.get(study=study)
    assert (plan.criterion.key, plan.contrasts, plan.spending, plan.max_judgments) == (
        "pref", [["ours", "base"], ["ours", "other"]], "pocock", 40)
    assert AuditEvent.objects.filter(target_type="evalstudy.studyplan",
                                     action=AuditEvent.Action.CREATE).count() == 1

    document = spec_to_document(study_to_spec(study))
    assert document["plan"] == {
        "criterion": "pref", "contrasts": [["ours", "base"], ["ours", "other"]],
        "target_ci_width": 1.5, "stop_on_decision": False, "alpha": 0.05, "spending": "pocock",
        "check_every": 10, "max_looks": 4, "max_judgments": 40}
    # Through YAML text and back: the same spec, and importing it changes nothing.
    again = parse_study_spec(yaml.safe_dump(document, sort_keys=False), "export.yaml")
    assert again == spec
    _, outcome = study_import_spec(spec=again, file_name="export.yaml")
    assert outcome == "unchanged"
    assert AuditEvent.objects.filter(target_type="evalstudy.studyplan").count() == 1


@pytest.mark.django_db
def test_a_changed_plan_updates_a_draft_and_a_removed_one_goes():
    study, _ = study_import_spec(spec=parse_study_spec(SPEC, "adapt.yaml"),
                                 file_name="adapt.yaml")
    changed = SPEC.replace("max_judgments: 40", "max_judgments: 60").replace(
        "  criterion: pref\n", "")
    _, outcome = study_import_spec(spec=parse_study_spec(changed, "adapt.yaml"),
                                   file_name="adapt.yaml")
    assert outcome == "updated"
    plan = StudyPlan.objects.get(study=study)
    assert (plan.max_judgments, plan.criterion) == (60, None)
    assert AuditEvent.objects.filter(target_type="evalstudy.studyplan",
                                     action=AuditEvent.Action.UPDATE).exists()
    # A file without a plan block describes a study without a plan.
    _, outcome = study_import_spec(spec=parse_study_spec(SPEC.split("plan:")[0], "a.yaml"),
                                   file_name="a.yaml")
    assert outcome == "updated"
    assert not StudyPlan.objects.filter(study=study).exists()


@pytest.mark.django_db
def test_removing_the_plans_criterion_with_the_plan_is_allowed():
    study, _ = study_import_spec(spec=parse_study_spec(SPEC, "adapt.yaml"),
                                 file_name="adapt.yaml")
    # The plan protects its criterion: the plan is changed before the criterion goes.
    changed = SPEC.replace("  criterion: pref\n", "  criterion: best\n").replace(
        "  - key: pref\n", "  - key: best\n")
    _, outcome = study_import_spec(spec=parse_study_spec(changed, "adapt.yaml"),
                                   file_name="adapt.yaml")
    assert outcome == "updated"
    assert StudyPlan.objects.get(study=study).criterion.key == "best"


@pytest.mark.django_db
def test_a_registered_plan_cannot_be_changed_by_an_import():
    study, _ = study_import_spec(spec=parse_study_spec(SPEC, "adapt.yaml"),
                                 file_name="adapt.yaml")
    study_open(study=study)
    plan = StudyPlan.objects.get(study=study)
    assert plan.registered_at is not None
    events = AuditEvent.objects.count()

    # The same file again: unchanged, the plan as registered.
    _, outcome = study_import_spec(spec=parse_study_spec(SPEC, "adapt.yaml"),
                                   file_name="adapt.yaml")
    assert outcome == "unchanged"

    changed = SPEC.replace("target_ci_width: 1.5", "target_ci_width: 3")
    with pytest.raises(SpecInvalid) as caught:
        study_import_spec(spec=parse_study_spec(changed, "adapt.yaml"), file_name="adapt.yaml")
    [error] = caught.value.errors
    assert (error.line, error.path) == (_line(changed, "plan:"), "plan")
    assert "was registered at" in error.message and "cannot change" in error.message
    plan.refresh_from_db()
    assert plan.target_ci_width == 1.5
    # Only the unchanged import was recorded; the refused one wrote nothing.
    assert AuditEvent.objects.count() == events + 1
    assert Study.objects.get(pk=study.pk).status == Study.Status.OPEN


@pytest.mark.django_db
def test_a_registered_plan_stays_even_in_a_draft_study():
    # Whatever the study's status, a registered plan is never rewritten nor removed by a file.
    study, _ = study_import_spec(spec=parse_study_spec(SPEC, "adapt.yaml"),
                                 file_name="adapt.yaml")
    study_open(study=study)
    Study.objects.filter(pk=study.pk).update(status=Study.Status.DRAFT)
    with pytest.raises(SpecInvalid, match="registered"):
        study_import_spec(spec=parse_study_spec(SPEC.split("plan:")[0], "a.yaml"),
                          file_name="a.yaml")
    assert StudyPlan.objects.filter(study=study).exists()


# --- the API: /api/v1/studies/<slug>/plan/ and /plan/checks/ -------------------------------------
def _adaptive(plan_owner, slug="adapt-api"):
    from tests.factories import make_study

    study = make_study(design="pairwise", n_items=4, n_systems=3, items_per_rater=2,
                       owner=plan_owner, slug=slug)
    Study.objects.filter(pk=study.pk).update(design=Study.Design.ADAPTIVE)
    study.refresh_from_db()
    return study


def _put(client, study, body):
    import json

    from django.urls import reverse

    return client.put(reverse("api-study-plan", args=[study.slug]), data=json.dumps(body),
                      content_type="application/json")


@pytest.fixture
def plan_owner(db):
    from tests.factories import UserFactory

    return UserFactory(username="plan-owner", is_staff=True)


@pytest.fixture
def plan_api(plan_owner, fresh_throttles):
    from tests.factories import token_client

    return token_client(plan_owner)


PUT_BODY = {"criterion": "preference", "contrasts": [["sys-0", "sys-1"]],
            "target_ci_width": 1.2, "spending": "pocock", "check_every": 20,
            "max_looks": 5, "max_judgments": 200}


def test_put_sets_the_plan_audited_and_get_reads_it(plan_api, plan_owner):
    from django.urls import reverse

    study = _adaptive(plan_owner)
    assert plan_api.get(reverse("api-study-plan", args=[study.slug])).status_code == 404
    response = _put(plan_api, study, PUT_BODY)
    assert response.status_code == 200, response.content
    plan = StudyPlan.objects.get(study=study)
    assert (plan.criterion.key, plan.contrasts, plan.max_looks) == (
        "preference", [["sys-0", "sys-1"]], 5)
    event = AuditEvent.objects.get(target_type="evalstudy.studyplan")
    assert (event.actor_id, event.source, event.action) == (plan_owner.pk, "api", "create")
    body = plan_api.get(reverse("api-study-plan", args=[study.slug])).json()
    assert body == {**PUT_BODY, "stop_on_decision": False, "alpha": 0.05,
                    "registered_at": None}
    # PUT sets every field: those left out go back to their defaults.
    assert _put(plan_api, study, {"stop_on_decision": True}).status_code == 200
    plan.refresh_from_db()
    assert (plan.criterion, plan.contrasts, plan.target_ci_width, plan.max_looks) == (
        None, [], None, 20)


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"contrasts": [["sys-0", "ghost"]]}, "contrasts", "does not name two different systems"),
    ({"contrasts": [["sys-0"]]}, "contrasts", "at least 2 elements"),
    ({"criterion": "nope"}, "criterion", "no criterion 'nope' in this study"),
    ({"alpha": 0.7}, "alpha", "less than or equal to 0.5"),
    ({"target_ci_width": 0}, "target_ci_width", "must be positive"),
    ({"max_judgments": 2**31}, "max_judgments", "less than or equal to"),
    ({"spending": "linear"}, "spending", "not a valid choice"),
])
def test_a_bad_plan_is_refused_naming_the_field_and_nothing_is_stored(plan_api, plan_owner, change,
                                                                       field, message):
    study = _adaptive(plan_owner)
    response = _put(plan_api, study, {**PUT_BODY, **change})
    assert response.status_code == 400
    assert message in json.dumps(response.json()["field_errors"].get(field)), response.json()
    assert not StudyPlan.objects.filter(study=study).exists()
    assert not AuditEvent.objects.filter(target_type="evalstudy.studyplan").exists()


def test_a_rule_that_cannot_stop_or_another_studys_criterion_is_refused(plan_api, plan_owner):
    study = _adaptive(plan_owner)
    other = _adaptive(plan_owner, slug="other-adaptive")
    other.criteria.filter(key="preference").update(key="theirs")
    response = _put(plan_api, study, {"target_ci_width": None, "stop_on_decision": False})
    assert response.status_code == 400
    assert "target CI width or stop_on_decision" in response.json()["message"]
    assert _put(plan_api, study, {**PUT_BODY, "criterion": "theirs"}).status_code == 400
    assert not StudyPlan.objects.filter(study=study).exists()


def test_a_plan_is_for_the_adaptive_design_only(plan_api, plan_owner):
    from tests.factories import make_study

    study = make_study(design="pairwise", owner=plan_owner, slug="plain-pairwise")
    response = _put(plan_api, study, {"stop_on_decision": True})
    assert response.status_code == 400
    assert "read only by the adaptive design" in response.json()["message"]
    assert not StudyPlan.objects.filter(study=study).exists()


def test_after_registration_put_is_409_and_the_plan_unchanged(plan_api, plan_owner):
    study = _adaptive(plan_owner)
    assert _put(plan_api, study, PUT_BODY).status_code == 200
    study_open(study=study)
    response = _put(plan_api, study, {**PUT_BODY, "max_looks": 9})
    assert response.status_code == 409
    assert "registered" in response.json()["message"] or "open" in response.json()["message"]
    # Even a draft again (by hand): the registered plan answers 409 with its time.
    Study.objects.filter(pk=study.pk).update(status=Study.Status.DRAFT)
    response = _put(plan_api, study, {**PUT_BODY, "max_looks": 9})
    assert response.status_code == 409
    assert "was registered at" in response.json()["message"]
    assert StudyPlan.objects.get(study=study).max_looks == 5


def test_checks_lists_the_looks_in_order(plan_api, plan_owner):
    from django.urls import reverse

    from evalstudy.models import StoppingCheck

    study = _adaptive(plan_owner)
    _put(plan_api, study, PUT_BODY)
    plan = StudyPlan.objects.get(study=study)
    for look, met in ((2, True), (1, False)):
        StoppingCheck.objects.create(
            plan=plan, look=look, judgments=20 * look, information_fraction=0.1 * look,
            alpha_spent=0.001 * look, boundary=3.0 - look / 2, nominal_alpha=0.001,
            estimates=[{"contrast": ["sys-0", "sys-1"], "estimate": 0.4}], met=met,
            reason="every contrast decided" if met else "")
    rows = plan_api.get(reverse("api-study-plan-checks", args=[study.slug])).json()
    assert [(r["look"], r["judgments"], r["met"]) for r in rows] == [(1, 20, False),
                                                                     (2, 40, True)]
    assert rows[1]["boundary"] == 2.0 and rows[1]["reason"] == "every contrast decided"
