"""Tenancy: a rater belongs to the studies that admitted them, across owners as well as roles.

Two labs share one installation: owner A runs study A, owner B runs study B. Each study has an
invited rater (personal link), a crowd participant (the study's crowd URL) and an account
holder (signs in). Every rater route, in the browser and through the API, is tried with every
identity against both studies: the own study works, the other one does not exist (404) and
nothing is written. Then each attack that worked before raters were scoped to studies.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest
from django.contrib.auth import SESSION_KEY as AUTH_SESSION_KEY
from django.test import Client
from django.urls import reverse

from annotation.models import Judgment
from evalstudy.models import Assignment, AssignmentSlot, Enrollment, Rater, Study
from evalstudy.services import assignment_next
from tests.factories import UserFactory, invite, make_study, token_client

# Throttle counters start empty (tests/conftest.py): these tests call the API.
pytestmark = pytest.mark.usefixtures("fresh_throttles")

ANSWERS = {"severity": "0", "usable": "yes"}
SHARED_PID = "5f1e2d3c4b5a69788796a5b4"  # the same Prolific participant in both labs


def _make(slug: str, owner) -> Study:
    return make_study(slug=slug, owner=owner, n_items=4, n_systems=2, ratings_per_output=3,
                      status=Study.Status.OPEN, consent_text="You agree.",
                      instructions="Rate carefully.", completion_code="CODE-" + slug.upper())


def _crowd(client: Client, study: Study, pid: str, session: str = "sess-1"):
    return client.get(reverse("annotation:crowd_entry", args=[study.slug]),
                      {"PROLIFIC_PID": pid, "STUDY_ID": "st", "SESSION_ID": session})


def _through_entry(client: Client, study: Study) -> None:
    client.post(reverse("annotation:consent", args=[study.slug]), {"consent": "yes"})
    client.post(reverse("annotation:instructions", args=[study.slug]))
    assert client.get(reverse("annotation:rate", args=[study.slug])).status_code == 200


@dataclass
class Identity:
    label: str
    study: Study
    rater: Rater
    browser: Client
    api: Client  # how scripts act for this rater (a Rater token, or the account's API token)
    slot: int = 0  # their current slot in their own study
    extra: dict = field(default_factory=dict)


@pytest.fixture
def labs(db):
    owner_a = UserFactory(username="owner-a", is_staff=True)
    owner_b = UserFactory(username="owner-b", is_staff=True)
    studies = {"A": _make("lab-a", owner_a), "B": _make("lab-b", owner_b)}
    identities: dict[str, Identity] = {}
    for lab, study in studies.items():
        invited = invite(study, kind="slp", display_name=f"invited {lab}")
        browser = Client()
        browser.get(reverse("annotation:enter", args=[invited.access_token]))
        identities[f"invited-{lab}"] = Identity(
            f"invited-{lab}", study, invited, browser,
            Client(HTTP_AUTHORIZATION=f"Rater {invited.access_token}"))

        browser = Client()
        _crowd(browser, study, SHARED_PID)
        crowd = Enrollment.objects.get(study=study, rater__kind="crowd").rater
        identities[f"crowd-{lab}"] = Identity(
            f"crowd-{lab}", study, crowd, browser,
            Client(HTTP_AUTHORIZATION=f"Rater {crowd.access_token}"))

        user = UserFactory(username=f"slp-{lab.lower()}")
        account = invite(study, kind="slp", user=user)
        browser = Client()
        browser.force_login(user)
        identities[f"account-{lab}"] = Identity(f"account-{lab}", study, account, browser,
                                                token_client(user))
    for identity in identities.values():
        _through_entry(identity.browser, identity.study)
        identity.slot = assignment_next(study=identity.study, rater=identity.rater).pk
    return studies, identities, {"A": owner_a, "B": owner_b}


def _rater_routes(study: Study, slot: int) -> list[tuple[str, str, str, dict]]:
    """(name, method, url, data) of every rater route, browser and API, for one study."""
    slug = study.slug
    return [
        ("rate page", "get", reverse("annotation:rate", args=[slug]), {}),
        ("consent page", "get", reverse("annotation:consent", args=[slug]), {}),
        ("consent post", "post", reverse("annotation:consent", args=[slug]), {"consent": "no"}),
        ("instructions page", "get", reverse("annotation:instructions", args=[slug]), {}),
        ("instructions post", "post", reverse("annotation:instructions", args=[slug]), {}),
        ("submit", "post", reverse("annotation:submit", args=[slug, slot]), ANSWERS),
        ("revise page", "get", reverse("annotation:slot", args=[slug, slot]), {}),
        ("feedback page", "get", reverse("annotation:feedback", args=[slug, slot]), {}),
        ("api slots", "get", reverse("api-rater-slots", args=[slug]), {}),
        ("api next", "post", reverse("api-rater-next", args=[slug]), {}),
    ]


def _state() -> tuple:
    """Everything a rater route could write."""
    return (
        sorted(Judgment.objects.values_list("slot_id", "criterion_id", "value", "rater_id")),
        sorted(Enrollment.objects.values_list("study_id", "rater_id", "consented_at",
                                              "instructions_seen_at", "stopped_at")),
        sorted(Assignment.objects.exclude(rater=None).values_list("study_id", "rater_id",
                                                                  "state")),
        sorted(AssignmentSlot.objects.exclude(served_at=None).values_list("pk", "served_at")),
        Rater.objects.count(),
    )


def test_every_rater_route_with_every_identity_against_both_studies(labs):
    studies, identities, _ = labs
    failures = []
    for identity in identities.values():
        for lab, study in studies.items():
            own = study == identity.study
            # The other lab's slot of the same kind of rater: a real slot id, someone else's.
            other = next(i for i in identities.values()
                         if i.study == study and i.label.split("-")[0]
                         == identity.label.split("-")[0])
            slot = identity.slot if own else other.slot
            for name, method, url, data in _rater_routes(study, slot):
                for channel, client in (("browser", identity.browser), ("api", identity.api)):
                    if channel == "api" and not url.startswith("/api/"):
                        continue
                    before = _state()
                    response = getattr(client, method)(url, data) if method == "get" else (
                        client.post(url, data=json.dumps(data), content_type="application/json")
                        if url.startswith("/api/") else client.post(url, data))
                    code = response.status_code
                    if own:
                        if code >= 400 and name not in ("submit", "revise page",
                                                        "feedback page"):
                            failures.append(f"{identity.label} {channel} {name} own: {code}")
                    else:
                        if code != 404:
                            failures.append(f"{identity.label} {channel} {name} on study {lab}:"
                                            f" {code}, expected 404")
                        if _state() != before:
                            failures.append(f"{identity.label} {channel} {name} on study {lab}"
                                            ": wrote something")
            # API submit to the slot: own works (or 409 once answered), other's is a 404.
            submit = reverse("api-rater-submit", args=[slot])
            before = _state()
            code = identity.api.post(submit, data=json.dumps({"answers": ANSWERS}),
                                     content_type="application/json").status_code
            if not own and (code != 404 or _state() != before):
                failures.append(f"{identity.label} api submit on study {lab}: {code}")
            if own and code not in (200, 201, 409):
                failures.append(f"{identity.label} api submit own: {code}")
    assert not failures, "\n".join(failures)


def test_the_dashboard_lists_only_studies_that_admitted_the_rater(labs):
    studies, identities, _ = labs
    stranger_study = make_study(slug="lab-c", n_items=2, n_systems=1, status=Study.Status.OPEN)
    for identity in identities.values():
        page = identity.browser.get(reverse("annotation:dashboard")).content.decode()
        assert identity.study.title in page, identity.label
        for study in (*studies.values(), stranger_study):
            if study != identity.study:
                assert study.title not in page, (identity.label, study.slug)
                assert f"/s/{study.slug}/" not in page, (identity.label, study.slug)


def test_an_open_study_cannot_be_joined_by_its_slug(labs):
    """Before: any rater could claim a seat in any open study by slug (browser and API)."""
    _studies, identities, _ = labs
    uninvited = make_study(slug="lab-c", n_items=2, n_systems=1, status=Study.Status.OPEN)
    for identity in identities.values():
        assert identity.browser.get(f"/s/{uninvited.slug}/").status_code == 404
        assert identity.api.post(f"/api/v1/rater/studies/{uninvited.slug}/next/"
                                 ).status_code == 404
    assert not Assignment.objects.filter(study=uninvited).exclude(rater=None).exists()
    assert not Enrollment.objects.filter(study=uninvited).exists()


def test_owner_b_cannot_act_as_a_participant_of_study_a(labs):
    """Before: raters were one row per (kind, Prolific id) for the whole installation, so the
    owner of B could enrol A's participant through B's crowd URL, read the entry link from
    B's rater list, and use it in A: new answers, revised answers."""
    _studies, identities, owners = labs
    victim = identities["crowd-A"]
    answered = victim.slot
    victim.browser.post(reverse("annotation:submit", args=["lab-a", answered]), ANSWERS)
    assert Judgment.objects.filter(slot_id=answered).count() == 2
    # Owner B reads the links of B's raters; the shared PID is B's own, separate rater.
    owner_b = token_client(owners["B"])
    listed = owner_b.get(reverse("api-study-raters", args=["lab-b"])).json()["results"]
    row = next(r for r in listed if r["external_id"] == SHARED_PID)
    assert row["id"] != victim.rater.pk
    token = row["entry_url"].rstrip("/").rsplit("/", 1)[-1]
    attacker = Client()
    attacker.get(reverse("annotation:enter", args=[token]))
    before = _state()
    assert attacker.get("/s/lab-a/").status_code == 404
    assert attacker.post(reverse("annotation:submit", args=["lab-a", answered]),
                         {"severity": "2", "usable": "no"}).status_code == 404
    scripted = Client(HTTP_AUTHORIZATION=f"Rater {token}")
    assert scripted.post("/api/v1/rater/studies/lab-a/next/").status_code == 404
    response = scripted.post(reverse("api-rater-submit", args=[answered]),
                             data=json.dumps({"answers": {"severity": "2", "usable": "no"}}),
                             content_type="application/json")
    assert response.status_code == 404
    assert _state() == before
    assert dict(Judgment.objects.filter(slot_id=answered).values_list(
        "criterion__key", "value")) == ANSWERS


def test_owner_b_exports_and_erases_only_what_is_in_study_b(labs):
    """Before: B's owner could export the participant's data from A (enrollments, seats,
    judgment counts of study A) and erase it there."""
    _studies, identities, owners = labs
    victim_a, theirs_b = identities["crowd-A"].rater, identities["crowd-B"].rater
    owner_b = token_client(owners["B"])
    exported = owner_b.get(reverse("api-study-rater-personal-data",
                                   args=["lab-b", theirs_b.pk])).json()
    assert {e["study"] for e in exported["enrollments"]} == {"lab-b"}
    assert "lab-a" not in json.dumps(exported)
    # A's participant is not reachable through B at all.
    assert owner_b.get(reverse("api-study-rater-personal-data",
                               args=["lab-b", victim_a.pk])).status_code == 404
    assert owner_b.post(reverse("api-study-rater-erase",
                                args=["lab-b", victim_a.pk])).status_code == 404
    assert owner_b.post(reverse("api-study-rater-erase", args=["lab-b", theirs_b.pk])
                        ).status_code == 200
    victim_a.refresh_from_db()
    theirs_b.refresh_from_db()
    assert victim_a.external_id == SHARED_PID and theirs_b.external_id.startswith("erased-")
    assert Enrollment.objects.get(rater=victim_a).platform_session_id == "sess-1"


def test_an_owner_never_erases_an_account_holder_an_admin_does(labs):
    _studies, identities, owners = labs
    account = identities["account-A"].rater
    owner_a = token_client(owners["A"])
    exported = owner_a.get(reverse("api-study-rater-personal-data",
                                   args=["lab-a", account.pk])).json()
    assert exported["account"] is True and exported["user"] is None  # no email, no logins
    response = owner_a.post(reverse("api-study-rater-erase", args=["lab-a", account.pk]))
    assert response.status_code == 403 and "administrator" in response.json()["message"]
    account.refresh_from_db()
    assert account.user.is_active and account.user.username == "slp-a"
    admin = token_client(UserFactory(username="root", is_staff=True, is_superuser=True))
    full = admin.get(reverse("api-study-rater-personal-data",
                             args=["lab-a", account.pk])).json()
    assert full["user"]["username"] == "slp-a"
    assert admin.post(reverse("api-study-rater-erase", args=["lab-a", account.pk])
                      ).status_code == 200


def test_an_entry_link_never_signs_anyone_in(db):
    """Before: `/enter/<token>/` of a rater linked to an account logged that account in, so
    whoever saw the link (a study owner) became that user (a superuser too)."""
    study = make_study(slug="lab-a", n_items=2, n_systems=1, status=Study.Status.OPEN)
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    rater = invite(study, kind="expert", user=root)
    client = Client()
    response = client.get(reverse("annotation:enter", args=[rater.access_token]))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert AUTH_SESSION_KEY not in client.session
    assert client.get("/admin/").status_code == 302  # to the admin's login page
    assert client.get("/s/lab-a/").status_code == 404
    # A rater token of an account holder does not authenticate the API either.
    scripted = Client(HTTP_AUTHORIZATION=f"Rater {rater.access_token}")
    assert scripted.post("/api/v1/rater/studies/lab-a/next/").status_code == 401
    assert not Assignment.objects.filter(rater=rater).exists()


def test_an_old_session_bound_to_an_account_holder_is_ignored(db):
    """Sessions bound to an account's rater (made by entry links before this change) no longer
    act as that rater."""
    from annotation.rater import SESSION_KEY

    study = make_study(slug="lab-a", n_items=2, n_systems=1, status=Study.Status.OPEN)
    rater = invite(study, kind="slp", user=UserFactory(username="slp-a"))
    client = Client()
    session = client.session
    session[SESSION_KEY] = rater.pk
    session.save()
    assert client.get("/s/lab-a/").status_code == 404


def test_imported_judgments_never_attach_to_an_account_holder(db, tmp_path):
    """Before: importing `rater=<id>, rater_kind=slp` attached the judgments to the existing
    account-linked rater with that external id, and that rater's entry link then logged the
    importer in as the account (a superuser included)."""
    from django.core.management import call_command

    study = make_study(slug="lab-a", n_items=2, n_systems=1, status=Study.Status.OPEN)
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    other = make_study(slug="lab-z", n_items=2, n_systems=1, status=Study.Status.OPEN)
    account = invite(other, kind="slp", user=root)
    Rater.objects.filter(pk=account.pk).update(external_id="dr-root")
    path = tmp_path / "j.csv"
    path.write_text("rater,item,system,criterion,value,rater_kind\n"
                    "dr-root,item-000,sys-0,usable,yes,slp\n", encoding="utf-8")
    call_command("import_judgments", "--study", study.slug, str(path))
    imported = Judgment.objects.get()
    assert imported.rater_id != account.pk
    assert imported.rater.study == study and imported.rater.user is None
    assert not Judgment.objects.filter(rater=account).exists()
    client = Client()
    client.get(reverse("annotation:enter", args=[imported.rater.access_token]))
    assert AUTH_SESSION_KEY not in client.session


def test_proxy_raters_have_no_entry_link_and_cannot_be_entered(labs):
    """Before: an owner saw a proxy judge's entry link in the rater list; opening it bound the
    browser to the proxy, whose seat then took answers as if the judge had given them."""
    from proxies.models import ProxyRun

    studies, _, owners = labs
    judge = Rater.objects.create(kind="llm", external_id="latte:m:1", study=studies["A"])
    seat = Assignment.objects.create(study=studies["A"], rater=judge, source="proxy",
                                     state="active")
    target = AssignmentSlot.objects.filter(assignment__study=studies["A"],
                                           kind="target").first()
    AssignmentSlot.objects.create(assignment=seat, position=0, kind="target",
                                  output=target.output)
    ProxyRun.objects.create(study=studies["A"], rater=judge, method="latte",
                            criteria=["usable"], status="done")
    listed = token_client(owners["A"]).get(reverse("api-study-raters", args=["lab-a"])).json()
    row = next(r for r in listed["results"] if r["id"] == judge.pk)
    assert row["entry_url"] is None
    client = Client()
    assert client.get(reverse("annotation:enter", args=[judge.access_token])
                      ).status_code == 404
    assert client.get("/s/lab-a/").status_code == 404
    assert not Judgment.objects.filter(rater=judge).exists()


def test_the_same_judge_in_two_labs_is_two_proxy_raters(labs, settings):
    """Before: one proxy rater per signature for the whole installation, so the owner of B
    could rename (admin) the rater whose answers A's analyses show."""
    from proxies.runs import proxy_rater_for

    studies, _, _ = labs
    signature = {"backend": {"model": "m"}, "method": "latte"}
    in_a = proxy_rater_for(study=studies["A"], method="latte", signature=signature)
    in_b = proxy_rater_for(study=studies["B"], method="latte", signature=signature)
    assert in_a.pk != in_b.pk and (in_a.study, in_b.study) == (studies["A"], studies["B"])
    assert proxy_rater_for(study=studies["A"], method="latte", signature=signature) == in_a


def test_the_rater_api_does_not_announce_attention_checks_or_practice_items(db):
    """Before: every slot came with its `kind`, so a script saw which slots were attention
    checks (and how many) before answering them."""
    study = make_study(slug="lab-a", n_items=6, n_systems=1, status=Study.Status.OPEN,
                       attention_check_every=2)
    rater = invite(study)
    api = Client(HTTP_AUTHORIZATION=f"Rater {rater.access_token}")
    kinds_seen = set()
    while True:
        step = api.post("/api/v1/rater/studies/lab-a/next/").json()
        if step["step"] != "rate":
            break
        kinds_seen.add(step["slot"]["kind"])
        listed = api.get("/api/v1/rater/studies/lab-a/slots/").json()
        pending = [s for s in listed["slots"] if not s["completed"]]
        assert {s["kind"] for s in pending} <= {"item"}
        # nothing but the texts may say it (the item texts are random words: "attention" can be
        # one of them)
        shown = json.dumps([{k: v for k, v in s.items()
                             if k not in ("text", "text_b", "context", "reference")}
                            for s in pending])
        assert "attention" not in shown and "calibration" not in shown
        expected = AssignmentSlot.objects.get(pk=step["slot"]["id"])
        answers = dict(ANSWERS)
        if expected.kind == "attention":
            answers = {"severity": "2", "usable": "no"}
        api.post(reverse("api-rater-submit", args=[step["slot"]["id"]]),
                 data=json.dumps({"answers": answers}), content_type="application/json")
    assert kinds_seen == {"item"}
    answered = api.get("/api/v1/rater/studies/lab-a/slots/").json()["slots"]
    assert {s["kind"] for s in answered} == {"calibration", "target", "attention"}


def test_a_participant_id_alone_does_not_resume_someone_elses_participation(db):
    """The PID is not a secret (it travels in URLs, exports and support emails); resuming a
    participation that recorded the platform's session id needs that session id."""
    study = make_study(slug="lab-a", n_items=4, n_systems=1, status=Study.Status.OPEN)
    participant = Client()
    _crowd(participant, study, SHARED_PID, session="real-session")
    _through_entry(participant, study)
    intruder = Client()
    response = _crowd(intruder, study, SHARED_PID, session="guessed")
    assert response.status_code == 400
    assert "another session" in response.content.decode()
    assert intruder.get("/s/lab-a/").status_code == 404  # nothing bound to the intruder
    # The participant coming back from the platform (same session id) resumes.
    again = Client()
    assert _crowd(again, study, SHARED_PID, session="real-session").status_code == 302
    assert again.get("/s/lab-a/").status_code == 200
    assert Rater.objects.filter(external_id=SHARED_PID).count() == 1


def test_a_draft_study_admits_no_crowd_participant_and_a_closed_one_no_new_one(db):
    draft = make_study(slug="lab-d", n_items=2, n_systems=1)
    assert _crowd(Client(), draft, SHARED_PID).status_code == 404
    closed = make_study(slug="lab-c", n_items=2, n_systems=1, status=Study.Status.CLOSED)
    response = _crowd(Client(), closed, SHARED_PID)
    assert response.status_code == 400 and not Rater.objects.exists()


def test_screening_recognises_a_participant_of_an_excluded_study_across_studies(labs):
    studies, identities, _ = labs
    third = _make("lab-c", identities["crowd-A"].study.owner)
    third.excluded_studies.add(studies["A"])
    client = Client()
    _crowd(client, third, SHARED_PID)
    enrollment = Enrollment.objects.get(study=third)
    assert enrollment.stop_reason == "screening"
    assert enrollment.rater.study == third and enrollment.rater != identities["crowd-A"].rater


def test_every_page_link_a_rater_gets_stays_in_their_study(labs):
    """The rate page and the dashboard never link to another study."""
    _, identities, _ = labs
    for identity in identities.values():
        html = identity.browser.get(f"/s/{identity.study.slug}/").content.decode()
        html += identity.browser.get("/").content.decode()
        for slug in set(re.findall(r'/s/([a-z0-9-]+)/', html)):
            assert slug == identity.study.slug, (identity.label, slug)


def test_the_crowd_url_does_not_open_an_invited_raters_participation(db):
    """An invited rater's id is no way in: before, the crowd URL resumed any crowd rater of
    the study with that id, so whoever knew an invited participant's id became them."""
    study = make_study(slug="lab-a", n_items=2, n_systems=1, status=Study.Status.OPEN)
    victim = invite(study, kind="crowd", external_id="5f1e2d3c4b5a69788796bad1")
    intruder = Client()
    response = _crowd(intruder, study, "5f1e2d3c4b5a69788796bad1", "attacker-session")
    assert response.status_code == 400 and "personal link" in response.content.decode()
    assert intruder.get("/s/lab-a/").status_code == 404
    assert Enrollment.objects.get(rater=victim).platform_session_id == ""


def test_a_squatter_who_entered_first_is_replaced_by_the_real_session(db):
    """Someone who knows a participant id and enters before them, with a made-up session id,
    neither locks them out nor keeps acting for them once they arrive."""
    study = make_study(slug="lab-a", n_items=2, n_systems=1, status=Study.Status.OPEN)
    squatter = Client()
    _crowd(squatter, study, SHARED_PID, "junk")
    real = Client()
    assert _crowd(real, study, SHARED_PID, "the-real-session").status_code == 302
    assert real.get("/s/lab-a/").status_code == 200
    assert squatter.get("/s/lab-a/").status_code == 404
    # Coming back with the stale session id does not win it back once the real one started.
    assert _crowd(squatter, study, SHARED_PID, "junk").status_code == 400


def test_viewers_do_not_see_the_crowd_session_ids_that_resume_participations(db):
    from django.contrib.auth.models import Permission

    owner = UserFactory(username="owner-a", is_staff=True)
    viewer = UserFactory(username="viewer", is_staff=True)
    for user in (owner, viewer):
        user.user_permissions.set(Permission.objects.filter(codename="view_enrollment"))
    study = make_study(slug="lab-a", owner=owner, n_items=2, n_systems=1,
                       status=Study.Status.OPEN)
    study.collaborators.add(viewer, through_defaults={"role": "viewer"})
    _crowd(Client(), study, SHARED_PID, "secret-session-77")
    enrollment = Enrollment.objects.get(study=study)
    admin = Client()
    admin.force_login(viewer)
    for url in ("/admin/evalstudy/enrollment/",
                f"/admin/evalstudy/enrollment/{enrollment.pk}/change/"):
        page = admin.get(url)
        assert page.status_code == 200 and "secret-session-77" not in page.content.decode()
    # Nor can they find a participation by searching for a guessed session id.
    found = admin.get("/admin/evalstudy/enrollment/?q=secret-session-77").content.decode()
    assert "0 results" in found
    admin.force_login(owner)
    page = admin.get(f"/admin/evalstudy/enrollment/{enrollment.pk}/change/").content.decode()
    assert "secret-session-77" in page


def test_a_deleted_accounts_old_token_opens_nothing(db):
    study = make_study(slug="lab-a", n_items=2, n_systems=1, status=Study.Status.OPEN)
    holder = UserFactory(username="holder")
    rater = invite(study, kind="slp", user=holder)
    token = rater.access_token
    holder.delete()
    browser = Client()
    assert browser.get(reverse("annotation:enter", args=[token])).status_code == 404
    assert browser.get("/s/lab-a/").status_code == 404
    scripted = Client(HTTP_AUTHORIZATION=f"Rater {token}")
    assert scripted.post("/api/v1/rater/studies/lab-a/next/").status_code == 401


def test_an_account_holder_accepts_an_invitation_before_the_study_is_theirs(db):
    owner = UserFactory(username="owner-a", is_staff=True)
    study = make_study(slug="lab-a", owner=owner, n_items=2, n_systems=1,
                       status=Study.Status.OPEN)
    holder = UserFactory(username="holder")
    invite(study, kind="slp", user=holder, accept=False)
    browser = Client()
    browser.force_login(holder)
    page = browser.get("/").content.decode()
    assert "Invitation: " + study.title in page and "/s/lab-a/" not in page
    assert browser.get("/s/lab-a/").status_code == 404
    listed = token_client(owner).get(reverse("api-study-raters", args=["lab-a"])).json()
    assert listed["count"] == 0
    # Someone else cannot answer for them.
    stranger = Client()
    stranger.force_login(UserFactory(username="stranger"))
    assert stranger.post(reverse("annotation:invitation", args=["lab-a"]),
                         {"answer": "accept"}).status_code == 404
    browser.post(reverse("annotation:invitation", args=["lab-a"]), {"answer": "accept"})
    assert browser.get("/s/lab-a/").status_code == 200
    other = make_study(slug="lab-b", owner=owner, n_items=2, n_systems=1,
                       status=Study.Status.OPEN)
    invite(other, kind="slp", user=holder, accept=False)
    browser.post(reverse("annotation:invitation", args=["lab-b"]), {"answer": "decline"})
    assert not Enrollment.objects.filter(study=other).exists()
    assert browser.get("/s/lab-b/").status_code == 404


def test_excluded_studies_of_another_owner_are_no_screening_oracle(db):
    """Before: an owner could exclude a study they only viewed (or used to) and learn from
    their own study's screening who took part in the other owner's study."""
    from django.contrib.admin.sites import site
    from django.test import RequestFactory

    owner_a = UserFactory(username="owner-a", is_staff=True)
    owner_b = UserFactory(username="owner-b", is_staff=True)
    a = _make("lab-a", owner_a)
    b = _make("lab-b", owner_b)
    a.collaborators.add(owner_b, through_defaults={"role": "viewer"})
    request = RequestFactory().get("/")
    request.user = owner_b
    field = site._registry[Study].formfield_for_manytomany(
        Study._meta.get_field("excluded_studies"), request)
    assert a not in field.queryset and b in field.queryset
    b.excluded_studies.add(a)  # set by other means: still no oracle
    _crowd(Client(), a, SHARED_PID, "s")
    _crowd(Client(), b, SHARED_PID, "probe")
    assert Enrollment.objects.get(study=b).stop_reason == ""


def test_the_admin_saves_a_seat_held_by_an_account_holder(db):
    from django.contrib.admin.sites import site
    from django.forms.models import model_to_dict
    from django.test import RequestFactory

    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    study = make_study(slug="lab-a", owner=root, n_items=2, n_systems=1,
                       status=Study.Status.OPEN)
    holder = invite(study, kind="slp", user=UserFactory(username="holder"))
    seat = assignment_next(study=study, rater=holder).assignment
    request = RequestFactory().post("/")
    request.user = root
    form_class = site._registry[Assignment].get_form(request, seat, change=True)
    form = form_class(data={k: v for k, v in model_to_dict(seat).items() if v is not None},
                      instance=seat)
    assert form.is_valid(), form.errors


def test_metric_configurations_are_shown_to_the_researchers_whose_runs_used_them(db):
    from django.contrib.auth.models import Permission

    from metrics.models import MetricConfig, MetricRun

    owner_a = UserFactory(username="owner-a", is_staff=True)
    owner_b = UserFactory(username="owner-b", is_staff=True)
    for user in (owner_a, owner_b):
        user.user_permissions.set(Permission.objects.filter(codename="view_metricconfig"))
    a = make_study(slug="lab-a", owner=owner_a, n_items=2, n_systems=1)
    config = MetricConfig.objects.create(metric="bertscore", version="1", config_hash="h" * 64,
                                         signature={"model": "/models/lab-a-secret-encoder"})
    MetricRun.objects.create(study=a, metrics=["bertscore"]).configs.add(config)
    admin = Client()
    admin.force_login(owner_b)
    page = admin.get("/admin/metrics/metricconfig/").content.decode()
    assert "h" * 12 not in page  # the config's short hash is listed for its owner only
    assert admin.get(f"/admin/metrics/metricconfig/{config.pk}/change/").status_code == 302
    admin.force_login(owner_a)
    assert admin.get(f"/admin/metrics/metricconfig/{config.pk}/change/").status_code == 200
