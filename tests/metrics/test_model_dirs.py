"""Model directories a user names (a local judge's model_path, a study's encoder_path, a metric
run's model_path, a learned proxy's params.model_path) must lie inside EVALSTUDY_MODEL_DIRS:
refused before a file is read when a run starts, and again on the worker before loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from metrics.models import MetricRun
from metrics.scorers.encoder import encoder_resolve
from metrics.services import metric_run_start
from proxies.models import LearnedProxy, ProxyRun
from proxies.runs import proxy_run_prepare, proxy_run_start
from proxies.training import learned_proxy_start, learned_proxy_train
from tests.factories import UserFactory, make_study, token_client
from tests.proxies.test_learned_proxy_runs import synthetic_study
from tests.proxies.test_proxy_runs import run_here

pytestmark = pytest.mark.django_db

REFUSED = "is not inside a directory allowed by EVALSTUDY_MODEL_DIRS"


def _model(path: Path) -> str:
    """A directory that looks like a model to every check before loading (a config.json)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text((Path(encoder_resolve()) / "config.json").read_text())
    return str(path)


@pytest.fixture
def roots(settings, tmp_path):
    """An operator's model directory (tmp/models) and a directory outside it (tmp/outside)."""
    settings.EVALSTUDY_MODEL_DIRS = [str(tmp_path / "models")]
    settings.EVALSTUDY_PROXY_DIR = str(tmp_path / "models" / "proxies")
    return {"allowed": _model(tmp_path / "models" / "tiny"),
            "outside": _model(tmp_path / "outside" / "tiny")}


def _forbid_reading(monkeypatch) -> None:
    """Fail the test when a model directory is walked (fingerprinted) or loaded."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a model directory was read: {args}")

    monkeypatch.setattr("metrics.scorers.encoder.model_fingerprint", refuse)
    monkeypatch.setattr("metrics.scorers.encoder.get_encoder", refuse)
    monkeypatch.setattr("proxies.judges.backends.local_hf.load_hf_model", refuse)


@pytest.fixture
def no_reading(monkeypatch):
    _forbid_reading(monkeypatch)


def hf(path: str) -> dict:
    return {"backend": "hf", "model_path": path, "device": "cpu"}


@pytest.mark.parametrize("where", ["/", "/etc", "outside"])
def test_a_local_judge_outside_the_model_dirs_is_refused_before_a_file_is_read(
        study, roots, no_reading, where):
    path = roots["outside"] if where == "outside" else where
    with pytest.raises(ValidationError) as refused:
        proxy_run_prepare(study=study, method="latte", criteria=["usable"], backend=hf(path))
    message = " ".join(refused.value.messages)
    assert f"backend: model_path: model directory {path!r} {REFUSED}" in message


def test_escapes_from_an_allowed_directory_are_refused(study, roots, tmp_path):
    models = tmp_path / "models"
    (models / "link-out").symlink_to(tmp_path / "outside" / "tiny", target_is_directory=True)
    (models / "link-in").symlink_to(models / "tiny", target_is_directory=True)
    for path in (str(models / ".." / "outside" / "tiny"), str(models / "link-out")):
        with pytest.raises(ValidationError, match=REFUSED):
            proxy_run_prepare(study=study, method="latte", criteria=["usable"],
                              backend=hf(path))
    with pytest.raises(ValidationError, match="must be an absolute path"):
        proxy_run_prepare(study=study, method="latte", criteria=["usable"],
                          backend=hf("models/tiny"))
    for path in (roots["allowed"], str(models / "link-in")):
        fields = proxy_run_prepare(study=study, method="latte", criteria=["usable"],
                                   backend=hf(path))
        assert fields["backend"]["model_path"] == path and fields["queue"] == "gpu"


def test_another_studys_learned_proxy_is_never_a_model_directory(study, settings, tmp_path):
    """Even when the operator allows the whole var directory, the proxies in it stay out."""
    settings.EVALSTUDY_MODEL_DIRS = [str(tmp_path / "var")]
    settings.EVALSTUDY_PROXY_DIR = str(tmp_path / "var" / "proxies")
    fine_tuned = _model(tmp_path / "var" / "proxies" / "other-study-usable" / "v1" / "model")
    with pytest.raises(ValidationError, match="lies in EVALSTUDY_PROXY_DIR"):
        proxy_run_prepare(study=study, method="latte", criteria=["usable"],
                          backend=hf(fine_tuned))
    with pytest.raises(ValidationError, match="lies in EVALSTUDY_PROXY_DIR"):
        metric_run_start(study=study, metrics=["semantic_distance"], model_path=fine_tuned,
                         enqueue=False)


def test_the_api_refuses_a_model_directory_outside_with_the_setting(roots, no_reading):
    owner = UserFactory(username="owner", is_staff=True)
    make_study(owner=owner, slug="asr")
    client = token_client(owner)
    proxy = client.post(reverse("api-study-proxy-runs", args=["asr"]),
                        content_type="application/json",
                        data=json.dumps({"method": "latte", "criteria": ["usable"],
                                         "backend": hf("/")}))
    metric = client.post(reverse("api-study-metric-runs", args=["asr"]),
                         content_type="application/json",
                         data=json.dumps({"metrics": ["wer"], "model_path": "/etc"}))
    for response in (proxy, metric):
        assert response.status_code == 400
        assert "EVALSTUDY_MODEL_DIRS" in json.dumps(response.json())
    assert not ProxyRun.objects.exists() and not MetricRun.objects.exists()


def test_metric_runs_take_only_allowed_encoders(study, roots, no_reading):
    """A study's encoder_path and a run's model_path, whatever metrics the run computes."""
    study.encoder_path = roots["outside"]
    study.save(update_fields=["encoder_path"])
    for metrics in (["semantic_distance"], ["wer"]):
        with pytest.raises(ValidationError) as refused:
            metric_run_start(study=study, metrics=metrics, enqueue=False)
        assert "encoder_path (the study's)" in refused.value.messages[0]
        assert REFUSED in refused.value.messages[0]
    study.encoder_path = ""
    study.save(update_fields=["encoder_path"])
    with pytest.raises(ValidationError, match=f"model_path: model directory .* {REFUSED}"):
        metric_run_start(study=study, metrics=["bertscore"], model_path=roots["outside"],
                         enqueue=False)
    assert not MetricRun.objects.exists()


def test_the_default_encoder_and_the_configured_one_are_always_allowed(study, settings,
                                                                       tmp_path):
    from metrics.services import model_dir_check

    settings.EVALSTUDY_MODEL_DIRS = []
    study.encoder_path = encoder_resolve()
    study.save(update_fields=["encoder_path"])
    run = metric_run_start(study=study, metrics=["semantic_distance"], enqueue=False)
    assert run.model_path == study.encoder_path
    configured = _model(tmp_path / "encoder")
    with pytest.raises(ValidationError, match=REFUSED):
        model_dir_check(configured)
    settings.EVALSTUDY_ENCODER_PATH = configured
    assert model_dir_check(configured) == configured


def test_a_metric_run_stored_with_a_model_outside_fails_on_the_worker(study, roots,
                                                                      monkeypatch):
    from metrics.services import metric_batch_score, metric_run_dispatch

    run = metric_run_start(study=study, metrics=["wer", "semantic_distance"], enqueue=False)
    MetricRun.objects.filter(pk=run.pk).update(model_path=roots["outside"])
    run.refresh_from_db()
    batches = []
    metric_run_dispatch(run, send=lambda kind, ids, names: batches.append((ids, names)))
    _forbid_reading(monkeypatch)
    for ids, names in batches:
        metric_batch_score(run_id=run.pk, output_ids=ids, metrics=names)
    run.refresh_from_db()
    assert run.status == MetricRun.Status.FAILED
    assert REFUSED in run.error and "semantic_distance" not in run.error


def test_a_local_judge_stored_with_a_model_outside_fails_on_the_worker(study, roots,
                                                                     monkeypatch):
    """A run recorded before the check (or before an operator narrowed the setting)."""
    run = proxy_run_start(study=study, method="latte", criteria=["usable"],
                          backend=hf(roots["allowed"]), enqueue=False)
    ProxyRun.objects.filter(pk=run.pk).update(backend=hf(roots["outside"]))
    _forbid_reading(monkeypatch)
    run = run_here(run)
    assert run.status == ProxyRun.Status.FAILED
    assert f"backend: model_path: model directory {roots['outside']!r} {REFUSED}" in run.error


def test_learned_proxies_train_only_from_allowed_encoders(roots, no_reading):
    study, _ = synthetic_study("learn-dirs", seed=1, n_references=10)
    with pytest.raises(ValidationError, match=f"params: model_path: .* {REFUSED}"):
        learned_proxy_start(study=study, criterion_key="usable", kind="embedding_lr",
                            params={"model_path": roots["outside"]}, enqueue=False)
    study.encoder_path = "/"
    study.save(update_fields=["encoder_path"])
    with pytest.raises(ValidationError, match=f"encoder_path \\(the study's\\).* {REFUSED}"):
        learned_proxy_start(study=study, criterion_key="usable", kind="cross_encoder",
                            enqueue=False)
    assert not LearnedProxy.objects.exists()
    # Recorded before the check existed: refused on the worker, before training reads it.
    study.encoder_path = ""
    study.save(update_fields=["encoder_path"])
    proxy = learned_proxy_start(study=study, criterion_key="usable", kind="embedding_lr",
                                enqueue=False)
    LearnedProxy.objects.filter(pk=proxy.pk).update(params={"model_path": roots["outside"]})
    with pytest.raises(ValidationError, match=REFUSED):
        learned_proxy_train(proxy.pk)
    proxy.refresh_from_db()
    assert proxy.status != LearnedProxy.Status.DONE and not proxy.artifact_path


def test_a_learned_proxy_reading_an_encoder_outside_fails_on_the_worker(study, roots,
                                                                      monkeypatch):
    """A regression proxy reads the encoder recorded at training where it exists: one outside
    the model directories (trained before the check, or the setting narrowed since) is refused
    before the artefact is loaded."""
    proxy = LearnedProxy.objects.create(
        name="old-proxy", kind="embedding_lr", study=study, criterion_key="usable",
        status=LearnedProxy.Status.DONE, version=1, artifact_path="/nowhere/old-proxy/v1",
        report={"params": {"model_path": roots["outside"]}, "threshold": 0.5})
    run = proxy_run_start(study=study, method="learned", learned_proxy=proxy,
                          criteria=["usable"], enqueue=False)

    def refuse(*args, **kwargs):
        raise AssertionError("the artefact was loaded")

    monkeypatch.setattr("proxies.learned.load_artifact", refuse)
    run = run_here(run)
    assert run.status == ProxyRun.Status.FAILED
    assert f"the learned proxy's model_path: model directory {roots['outside']!r}" in run.error


def test_the_admin_form_shows_the_refusal(roots, client):
    owner = UserFactory(username="admin-owner", is_staff=True, is_superuser=True)
    study, _ = synthetic_study("admin-dirs", seed=2, n_references=10)
    study.owner = owner
    study.save(update_fields=["owner"])
    client.force_login(owner)
    response = client.post(reverse("admin:proxies_learnedproxy_add"), {
        "study": study.pk, "criterion_key": "usable", "kind": "embedding_lr", "name": "admin-dirs",
        "params_config": json.dumps({"model_path": "/"})})
    assert response.status_code == 200
    assert "EVALSTUDY_MODEL_DIRS" in response.content.decode()
    assert not LearnedProxy.objects.exists()
