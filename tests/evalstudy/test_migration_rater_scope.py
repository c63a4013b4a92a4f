"""The migration that scopes raters to studies keeps every judgment where it was.

Built on the schema before it (evalstudy 0005) with data in it: a crowd participant who took
part in two studies, an account holder in both (signed in by its entry link), a proxy judge
used in both with a proxy run in each, and a rater that never took part anywhere. After it:
one rater per study for everyone without an account, with that study's enrollments, seats,
judgments and proxy runs; nothing deleted; every link another study's owner could have read
replaced; the link-only account's session ended.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("evalstudy", "0005_api_token"), ("annotation", "0003_api_idempotency_key"),
          ("metrics", "0002_proxy_judges"), ("sessions", "0001_initial")]
AFTER = [("evalstudy", "0006_rater_study_scope"), ("metrics", "0002_proxy_judges"),
         ("sessions", "0001_initial")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_raters_are_split_per_study_with_their_rows_and_nothing_is_lost():
    apps = _migrate(BEFORE)
    User = apps.get_model("auth", "User")
    Study = apps.get_model("evalstudy", "Study")
    System = apps.get_model("evalstudy", "System")
    Item = apps.get_model("evalstudy", "Item")
    Output = apps.get_model("evalstudy", "Output")
    Criterion = apps.get_model("evalstudy", "Criterion")
    Rater = apps.get_model("evalstudy", "Rater")
    Enrollment = apps.get_model("evalstudy", "Enrollment")
    Assignment = apps.get_model("evalstudy", "Assignment")
    Slot = apps.get_model("evalstudy", "AssignmentSlot")
    Judgment = apps.get_model("annotation", "Judgment")
    ProxyRun = apps.get_model("metrics", "ProxyRun")

    now = timezone.now()
    studies, criteria, outputs = [], [], []
    for slug in ("first", "second"):
        study = Study.objects.create(slug=slug, title=slug, seed=1)
        system = System.objects.create(study=study, name="s")
        item = Item.objects.create(study=study, external_id="i")
        outputs.append(Output.objects.create(item=item, system=system, text="t"))
        criteria.append(Criterion.objects.create(study=study, key="ok", prompt="?",
                                                 kind="binary"))
        studies.append(study)
    crowd = Rater.objects.create(kind="crowd", external_id="PID1", display_name="PID1",
                                 access_token="crowd-token")
    link_only = User.objects.create(username="slp", password="!unusable")
    account = Rater.objects.create(kind="slp", user=link_only, access_token="account-token")
    judge = Rater.objects.create(kind="llm", external_id="latte:m:1", access_token="judge-tok")
    Rater.objects.create(kind="expert", external_id="idle", access_token="idle-token")
    for rater in (crowd, account, judge):
        for study, output, criterion in zip(studies, outputs, criteria, strict=True):
            if rater.kind != "llm":
                Enrollment.objects.create(study=study, rater=rater)
            seat = Assignment.objects.create(study=study, rater=rater, state="done",
                                             source="design" if rater.kind != "llm"
                                             else "proxy")
            slot = Slot.objects.create(assignment=seat, position=0, kind="target",
                                       output=output, completed_at=now)
            Judgment.objects.create(slot=slot, criterion=criterion, rater=rater, value="yes",
                                    submitted_at=now)
            if rater.kind == "llm":
                ProxyRun.objects.create(study=study, rater=rater, method="latte",
                                        criteria=["ok"], status="done")
    # The account's browser session, made by its entry link before links stopped signing in.
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session["_auth_user_id"] = str(link_only.pk)
    session.create()
    judgments_before = sorted(Judgment.objects.values_list("pk", "slot_id", "value"))

    apps = _migrate(AFTER)
    Rater = apps.get_model("evalstudy", "Rater")
    Judgment = apps.get_model("annotation", "Judgment")
    Enrollment = apps.get_model("evalstudy", "Enrollment")
    Assignment = apps.get_model("evalstudy", "Assignment")
    assert sorted(Judgment.objects.values_list("pk", "slot_id", "value")) == judgments_before
    ProxyRun = apps.get_model("metrics", "ProxyRun")
    for external_id, origin in (("PID1", "crowd"), ("latte:m:1", "proxy")):
        split = list(Rater.objects.filter(external_id=external_id).order_by("pk"))
        assert [r.study.slug for r in split] == ["first", "second"]
        assert {r.origin for r in split} == {origin}
        # Both studies' owners could read the one link: neither copy keeps it.
        assert not {r.access_token for r in split} & {"crowd-token", "judge-tok"}
        for rater in split:
            assert {j.slot.assignment.study_id for j in Judgment.objects.filter(rater=rater)
                    } == {rater.study_id}
            assert set(Assignment.objects.filter(rater=rater).values_list("study_id", flat=True)
                       ) == {rater.study_id}
            assert set(Enrollment.objects.filter(rater=rater).values_list("study_id", flat=True)
                       ) <= {rater.study_id}
        assert set(ProxyRun.objects.filter(rater=split[0]).values_list("study__slug", flat=True)
                   ) <= {"first"}
    assert set(ProxyRun.objects.filter(rater__external_id="latte:m:1")
               .values_list("study__slug", "rater__study__slug")) == {("first", "first"),
                                                                       ("second", "second")}
    account = Rater.objects.get(user__username="slp")
    assert account.study_id is None and account.judgments.count() == 2
    assert account.origin == "account" and account.access_token != "account-token"
    idle = Rater.objects.get(external_id="idle")
    assert idle.study_id is None and idle.access_token == "idle-token"
    from django.contrib.sessions.models import Session

    assert not Session.objects.filter(pk=session.session_key).exists()
    assert Rater.objects.count() == 6

    _migrate(executor_leaves())


def executor_leaves():
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()
