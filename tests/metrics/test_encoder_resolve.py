"""One rule names a run's encoder (`metrics.scorers.encoder.encoder_resolve`): the web host
that writes the run's signature and the worker that loads the model resolve the same directory,
the operator's EVALSTUDY_ENCODER_PATH included (the worker's scorers and learned proxies once
fell back to the embedded model where the web host had used the configured one)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from metrics.models import MetricRun
from metrics.scorers.encoder import (
    embedded_encoder,
    encoder_resolve,
    model_fingerprint,
)
from metrics.services import metric_batch_score, metric_run_dispatch, metric_run_start


class Loaded(Exception):
    """Raised by the fake get_encoder: the worker got as far as loading this directory."""


def _model(path: Path, name: str) -> str:
    """A directory every check before loading takes for a model, with its own fingerprint."""
    path.mkdir(parents=True)
    config = json.loads((Path(embedded_encoder()) / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "_name_or_path": name}))
    return str(path)


@pytest.fixture
def encoders(settings, tmp_path):
    settings.EVALSTUDY_MODEL_DIRS = [str(tmp_path)]
    configured = _model(tmp_path / "configured", "configured")
    settings.EVALSTUDY_ENCODER_PATH = configured
    return {"configured": configured, "study": _model(tmp_path / "study", "study")}


def test_the_order_model_path_study_setting_embedded(settings, encoders):
    study = SimpleNamespace(encoder_path=encoders["study"])
    assert encoder_resolve(study, "/chosen") == "/chosen"
    assert encoder_resolve(study) == encoders["study"]
    assert encoder_resolve(SimpleNamespace(encoder_path="")) == encoders["configured"]
    assert encoder_resolve() == encoders["configured"]
    settings.EVALSTUDY_ENCODER_PATH = ""
    assert encoder_resolve() == embedded_encoder()


def _loaded_on_the_worker(run: MetricRun, monkeypatch) -> str:
    """The directory the worker's batch asks the encoder cache for."""
    def fake_get_encoder(model_path=None, device=None):
        raise Loaded(str(model_path))

    monkeypatch.setattr("metrics.scorers.encoder.get_encoder", fake_get_encoder)
    batches = []
    metric_run_dispatch(run, send=lambda kind, ids, names: batches.append((ids, names)))
    ids, names = next((ids, names) for ids, names in batches if "semantic_distance" in names)
    with pytest.raises(Loaded) as loaded:
        metric_batch_score(run_id=run.pk, output_ids=ids, metrics=names)
    return str(loaded.value)


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["configured", "study"])
def test_the_signature_names_the_encoder_the_worker_loads(where, encoders, study, monkeypatch):
    if where == "study":
        study.encoder_path = encoders["study"]
        study.save(update_fields=["encoder_path"])
    run = metric_run_start(study=study, metrics=["semantic_distance"], enqueue=False)
    signature = run.configs.get().signature["encoder"]
    loaded = _loaded_on_the_worker(run, monkeypatch)
    assert Path(loaded).resolve() == Path(encoders[where]).resolve()
    assert signature["model_sha"] == model_fingerprint(loaded)
    assert signature["model_sha"] != model_fingerprint(embedded_encoder())


def test_a_learned_proxy_without_model_path_reads_the_configured_encoder(encoders):
    from proxies.learned.regression import EmbeddingProxy

    assert EmbeddingProxy().encoder_path() == str(Path(encoders["configured"]).resolve())
