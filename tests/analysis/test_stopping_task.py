"""The stopping rule of an adaptive study: the periodic check records its looks, closes the
study when the rule is met (audited, source system), the plan is fixed once registered, and
the report shows the plan, the looks and the corrected figures."""

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from analysis.extras import stopping as extra
from analysis.stopping import stopping_check_run, stopping_checks_due
from analysis.tasks import stopping_checks_task
from annotation.services import judgment_submit
from evalstudy.models import AuditEvent, StoppingCheck, Study
from evalstudy.services import StudyNotOpen, assignment_next, study_open, study_plan_save
from tests.factories import invite, make_study

STRENGTH = {"sys-0": 0.0, "sys-1": 0.5, "sys-2": 1.0}


def adaptive_study(owner=None, **plan):
    study = make_study(design="pairwise", n_items=12, n_systems=3, items_per_rater=12,
                       owner=owner)
    study.design = Study.Design.ADAPTIVE
    study.save()
    study_plan_save(study=study, fields={"target_ci_width": 100.0, "check_every": 30,
                                         "max_judgments": 600, "spending": "pocock", **plan})
    study_open(study=study)
    study.refresh_from_db()
    return study


def rate(study, n_raters, rng):
    """Raters who answer with the known strengths (A wins with logit^-1(beta_A - beta_B))."""
    judged = 0
    for _ in range(n_raters):
        rater = invite(study)
        while True:
            try:
                slot = assignment_next(study=study, rater=rater)
            except StudyNotOpen:
                return judged
            if slot is None:
                break
            if slot.kind != "target":
                judgment_submit(rater=rater, slot_id=slot.pk, answers={"preference": "A"})
                continue
            a, b = slot.output.system.name, slot.output_b.system.name
            p = 1 / (1 + np.exp(-(STRENGTH[a] - STRENGTH[b])))
            judgment_submit(rater=rater, slot_id=slot.pk,
                            answers={"preference": "A" if rng.random() < p else "B"})
            judged += 1
    return judged


@pytest.mark.django_db
def test_the_periodic_task_closes_the_study_when_the_rule_is_met():
    study = adaptive_study(target_ci_width=100.0)  # met at the first estimable look
    rate(study, 4, np.random.default_rng(1))
    assert stopping_checks_task() == 1
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED
    check = StoppingCheck.objects.get(plan__study=study)
    assert check.met and check.look == 1 and "at most 100" in check.reason
    assert check.boundary > 1.96  # the first of several looks pays for the ones to come
    assert {tuple(e["contrast"]) for e in check.estimates} == {
        ("sys-0", "sys-1"), ("sys-0", "sys-2"), ("sys-1", "sys-2")}
    close = AuditEvent.objects.get(study=study, action=AuditEvent.Action.CLOSE)
    assert close.source == AuditEvent.Source.SYSTEM
    # Raters are no longer served once it closed.
    with pytest.raises(StudyNotOpen):
        assignment_next(study=study, rater=invite(study))


@pytest.mark.django_db
def test_looks_are_recorded_until_the_last_one_which_spends_all_alpha_and_closes():
    study = adaptive_study(target_ci_width=0.01, check_every=30, max_looks=3,
                           max_judgments=600)
    rng = np.random.default_rng(2)
    rate(study, 3, rng)  # 36 judgments: one look due
    first = stopping_check_run(study=study)
    assert first is not None and not first.met
    assert stopping_check_run(study=study) is None  # nothing new: no look, no alpha spent
    plan = study.plan
    plan.refresh_from_db()
    assert set(plan.allocation["strengths"]) == set(STRENGTH)  # the next seats' strengths
    rate(study, 3, rng)
    assert not stopping_check_run(study=study).met
    rate(study, 3, rng)
    last = stopping_check_run(study=study)
    assert last.met and "last look" in last.reason
    assert last.information_fraction == 1.0
    looks = list(StoppingCheck.objects.filter(plan__study=study).order_by("look"))
    assert [c.look for c in looks] == [1, 2, 3]
    assert looks[0].boundary > looks[2].boundary > 0
    assert looks[2].alpha_spent == pytest.approx(0.05 / 3)
    study.refresh_from_db()
    assert study.status == Study.Status.CLOSED
    assert stopping_checks_due() == 0  # a closed study is not looked at again


@pytest.mark.django_db
def test_report_section_shows_the_plan_every_look_and_the_corrected_figures():
    study = adaptive_study(target_ci_width=0.01, max_looks=2)
    rng = np.random.default_rng(3)
    rate(study, 3, rng)
    stopping_check_run(study=study)
    rate(study, 3, rng)
    stopping_check_run(study=study)
    data = extra.compute(study, None, {}, {})
    assert data["plan"]["registered_at"] and len(data["checks"]) == 2
    for entry in data["final"]:
        # The repeated CI is wider than the uncorrected one, and its p-value larger.
        assert entry["rci"][1] - entry["rci"][0] > entry["naive_ci"][1] - entry["naive_ci"][0]
        assert entry["repeated_p"] >= entry["naive_p"]
    section = extra.section(data, {})
    text = " ".join(section["blocks"][0]["paragraphs"])
    assert "registered " + data["plan"]["registered_at"] in text
    assert "Correction for optional stopping" in text and "Pocock" in text
    looks, final = section["blocks"][0]["tables"]
    assert len(looks["body"]) == 2 and len(final["body"]) == 3
    # A study without a plan has no section.
    assert extra.compute(make_study(), None, {}, {}) is None


@pytest.mark.django_db
def test_the_main_report_says_its_figures_are_not_corrected_for_optional_stopping():
    """The preference tables of an adaptive study were fixed-sample figures with no word that
    the data had been looked at repeatedly: the model table and the report's warnings now say
    so and point at the repeated CIs."""
    study = adaptive_study(target_ci_width=0.01, max_looks=2)
    rate(study, 3, np.random.default_rng(3))
    stopping_check_run(study=study)
    criterion = study.plan.criterion.key if study.plan.criterion else "better"
    result = {"criteria": [{"key": criterion, "preference": {"ties_excluded": {}}}]}
    extra.compute(study, None, result, {})
    assert extra.OPTIONAL_STOPPING in result["warnings"]
    assert result["criteria"][0]["preference"]["ties_excluded"]["warnings"] == [
        extra.OPTIONAL_STOPPING]
    # not for a study of another design
    other = {"criteria": []}
    assert extra.compute(make_study(), None, other, {}) is None and "warnings" not in other


@pytest.mark.django_db
def test_admin_shows_the_plan_read_only_after_registration_and_to_its_study_only():
    users = get_user_model()
    owner = users.objects.create_user("owner", password="x", is_staff=True)
    other = users.objects.create_user("other", password="x", is_staff=True)
    from django.contrib.auth.models import Permission

    for user in (owner, other):
        user.user_permissions.set(Permission.objects.filter(content_type__app_label="evalstudy"))
    draft = make_study(design="pairwise", owner=owner)
    draft.design = Study.Design.ADAPTIVE
    draft.save()
    study_plan_save(study=draft, fields={"target_ci_width": 1.0})
    client = Client()
    client.force_login(owner)
    page = client.get(reverse("admin:evalstudy_study_change", args=[draft.pk])).content.decode()
    assert 'name="plan-0-alpha"' in page  # editable while a draft
    study_open(study=draft)
    page = client.get(reverse("admin:evalstudy_study_change", args=[draft.pk])).content.decode()
    assert 'name="plan-0-alpha"' not in page and "registered" in page.lower()
    intruder = Client()
    intruder.force_login(other)
    response = intruder.get(reverse("admin:evalstudy_study_change", args=[draft.pk]))
    assert response.status_code == 302  # not one of theirs: the admin says it does not exist
