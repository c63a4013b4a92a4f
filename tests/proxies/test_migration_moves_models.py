"""Moving ProxyRun, LearnedProxy and JudgeResponse from `metrics` to `proxies` loses nothing:
rows written under the old schema (metrics 0003, no proxies app) are all there afterwards,
read through the new models with every foreign key intact, and the content types (so the
permissions granted on these models) moved to the new app label.

Migrates the test database back and forth, so the test is transactional (nothing to roll
back) and always leaves the database at the latest migrations."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from evalstudy.models import Rater
from tests.factories import UserFactory, make_study

BEFORE = [("metrics", "0003_judge_response_per_study"), ("proxies", None)]
MOVED = ("proxyrun", "learnedproxy", "judgeresponse")


def _migrate(targets):
    """Migrate to `targets`; the historical apps of the nodes among them (those that name one)."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()  # the last run changed what is applied
    executor.migrate(targets)
    ContentType.objects.clear_cache()
    return executor.loader.project_state([node for node in targets if node[1]]).apps


def _latest():
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


@pytest.mark.django_db(transaction=True)
def test_rows_foreign_keys_and_permissions_survive_the_move():
    try:
        old = _migrate(BEFORE)
        with pytest.raises(LookupError):
            old.get_app_config("proxies")
        study = make_study(slug="moved")
        other = make_study(slug="other")
        judge = Rater.objects.create(study=study, kind=Rater.Kind.LLM, external_id="latte:m:1",
                                     origin=Rater.Origin.PROXY)
        user = UserFactory()
        OldLearned = old.get_model("metrics", "LearnedProxy")
        OldRun = old.get_model("metrics", "ProxyRun")
        OldResponse = old.get_model("metrics", "JudgeResponse")
        learned = OldLearned.objects.create(
            name="moved-meaning-embedding-lr", kind="embedding_lr", study_id=other.pk,
            criterion_key="meaning", params={"epochs": 3, "seed": 1},
            artifact_path="/var/proxies/moved-meaning-embedding-lr/v1", version=1,
            report={"threshold": 0.71, "metrics": {"test_auc": 0.83}}, status="done",
            total=40, done=40, created_by_id=user.pk)
        run = OldRun.objects.create(
            study_id=study.pk, rater_id=judge.pk, method="learned", criteria=["meaning"],
            backend={}, template="", params={"threshold": 0.71}, learned_proxy_id=learned.pk,
            signature={"method": "learned", "judge_version": "1"}, queue="cpu", failed=1,
            unreadable={"17:meaning": "no answer read (unparsed)"},
            usage={"requests": 3, "answers_model": 3}, status="done", total=4, done=3,
            error="1 answers could not be read", created_by_id=user.pk)
        cached = OldResponse.objects.create(study_id=study.pk, key="a" * 64,
                                            value={"text": "Yes", "p_yes": 0.93})
        old_types = {ct.model: ct.pk for ct in ContentType.objects.filter(app_label="metrics",
                                                                          model__in=MOVED)}
        assert set(old_types) == set(MOVED)
        user.user_permissions.add(Permission.objects.get(
            content_type_id=old_types["proxyrun"], codename="view_proxyrun"))

        _migrate(_latest())

        from proxies.models import JudgeResponse, LearnedProxy, ProxyRun

        moved = ProxyRun.objects.select_related("study", "rater", "learned_proxy__study",
                                                "created_by").get(pk=run.pk)
        assert (moved.study, moved.rater, moved.created_by_id) == (study, judge, user.pk)
        assert moved.learned_proxy.pk == learned.pk and moved.learned_proxy.study == other
        assert (moved.method, moved.criteria, moved.params, moved.queue) == (
            "learned", ["meaning"], {"threshold": 0.71}, "cpu")
        assert moved.unreadable == {"17:meaning": "no answer read (unparsed)"}
        assert (moved.usage, moved.status, moved.total, moved.done, moved.failed) == (
            {"requests": 3, "answers_model": 3}, "done", 4, 3, 1)
        assert list(study.proxy_runs.all()) == [moved]
        proxy = LearnedProxy.objects.get(pk=learned.pk)
        assert (proxy.name, proxy.kind, proxy.version, proxy.report["threshold"]) == (
            "moved-meaning-embedding-lr", "embedding_lr", 1, 0.71)
        assert list(proxy.runs.all()) == [moved]
        response = JudgeResponse.objects.get(pk=cached.pk)
        assert (response.study, response.key, response.value) == (
            study, "a" * 64, {"text": "Yes", "p_yes": 0.93})
        assert ContentType.objects.filter(app_label="metrics", model__in=MOVED).count() == 0
        for model in (ProxyRun, LearnedProxy, JudgeResponse):
            content_type = ContentType.objects.get_for_model(model)
            assert content_type.app_label == "proxies"
            assert content_type.pk == old_types[model._meta.model_name]
        user = type(user).objects.get(pk=user.pk)  # no cached permissions
        assert user.has_perm("proxies.view_proxyrun")
    finally:
        _migrate(_latest())
