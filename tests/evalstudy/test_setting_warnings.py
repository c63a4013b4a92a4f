"""A setting that cannot take effect is pointed out, at save and at open, by one list of rules
(evalstudy.spec.setting_warnings): an attention check that is never shown, a calibration pass
mark without calibration items, crowd codes without a crowd platform... Before, only the
preview's "0 attention checks" said so."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from evalstudy.models import AttentionCheck, CalibrationItem, Study
from evalstudy.services import study_warnings
from evalstudy.spec.setting_warnings import StudySettings, setting_warnings
from tests.evalstudy.test_authoring import change_form_data
from tests.factories import UserFactory, make_study

QUIET = StudySettings(items=4)


def test_a_study_whose_settings_all_take_effect_gets_no_warning():
    assert setting_warnings(QUIET) == []
    assert setting_warnings(StudySettings(
        items=4, attention_check_every=3, attention_checks=2, attention_fail_limit=1,
        calibration_pass_mark=0.8, calibration_items=2, crowd_platform="prolific",
        completion_code="C0DE", excluded_studies=1, items_with_media=4, media_autoplay=True,
        agreement_alert_threshold=0.6, agreement_window=30)) == []


@pytest.mark.parametrize(("settings", "names"), [
    (StudySettings(attention_checks=2), ["2 attention checks", "attention_check_every is 0"]),
    (StudySettings(attention_fail_limit=2, attention_checks=1),
     ["attention_fail_limit (2) cannot stop anyone", "attention_check_every is 0"]),
    (StudySettings(attention_fail_limit=2, attention_check_every=3),
     ["attention_fail_limit (2)", "no attention checks"]),
    (StudySettings(calibration_pass_mark=0.8), ["calibration_pass_mark (0.8)",
                                               "no calibration"]),
    (StudySettings(completion_code="C0DE"), ["completion_code is only used for crowd",
                                             "crowd_platform is none"]),
    (StudySettings(completion_url="https://x.test/done", screen_out_code="S", crowd_no_codes=True,
                   excluded_studies=1),
     ["completion_url, screen_out_code, crowd_no_codes, excluded_studies are only used"]),
    (StudySettings(items=3, media_must_finish=True, media_max_plays=2),
     ["media_must_finish, media_max_plays have no effect", "no item"]),
    (StudySettings(agreement_window=40), ["agreement_window (40)", "agreement_alert_threshold"]),
])
def test_each_setting_that_cannot_take_effect_is_named_with_its_fix(settings, names):
    warnings = setting_warnings(settings)
    assert len(warnings) == 1 + (settings.attention_checks > 0 and
                                 settings.attention_fail_limit is not None), warnings
    for name in names:
        assert name in " ".join(warnings)


def test_media_settings_of_a_study_without_items_yet_wait_for_its_media():
    assert setting_warnings(StudySettings(media_autoplay=True)) == []


def test_a_crowd_code_is_no_warning_once_a_crowd_platform_is_chosen():
    assert setting_warnings(StudySettings(crowd_platform="mturk", completion_code="X")) == []


@pytest.mark.django_db
def test_the_open_check_warns_and_still_opens(boss_client):
    study = make_study(n_items=4, n_systems=2, crowd_platform="none", crowd_no_codes=False,
                       completion_code="C0DE")
    AttentionCheck.objects.create(study=study, key="attn", text="banana", reference="x",
                                  expected={"severity": "2"})
    CalibrationItem.objects.all().delete()
    Study.objects.filter(pk=study.pk).update(calibration_pass_mark=0.8)
    study.refresh_from_db()
    warnings = " ".join(study_warnings(study=study))
    for part in ("attention_check_every is 0", "calibration_pass_mark (0.8)",
                 "completion_code is only used for crowd"):
        assert part in warnings
    response = boss_client.post(reverse("admin:evalstudy_study_changelist"),
                                {"action": "open_studies", "_selected_action": [study.pk]},
                                follow=True)
    study.refresh_from_db()
    assert study.status == Study.Status.OPEN
    shown = [str(m) for m in get_messages(response.wsgi_request)] or [
        m.message for m in response.context["messages"]]
    assert any("attention_check_every is 0" in m for m in shown), shown


@pytest.mark.django_db
def test_saving_the_study_form_warns_after_the_save():
    user = UserFactory(username="researcher", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    study = make_study(n_items=2, n_systems=2)
    CalibrationItem.objects.filter(study=study).delete()
    url = reverse("admin:evalstudy_study_change", args=[study.pk])
    data = change_form_data(client.get(url))
    data["calibration_pass_mark"] = "0.9"
    response = client.post(url, data, follow=True)
    assert response.redirect_chain, response.context["errors"] if response.context else ""
    study.refresh_from_db()
    assert study.calibration_pass_mark == 0.9  # saved: a warning, not a refusal
    shown = [m.message for m in response.context["messages"]]
    assert any("calibration_pass_mark (0.9) has no effect" in m for m in shown), shown
