"""Versioned proxy artefacts: round trips, manifests, and clear errors for broken ones."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from metrics.scorers.encoder import encoder_resolve, model_fingerprint
from proxies.learned import ArtifactError, load_artifact, save_artifact
from proxies.learned.artifacts import MANIFEST, versions


def _manifest(directory: Path) -> dict:
    return json.loads((directory / MANIFEST).read_text())


def _rewrite_manifest(directory: Path, **changes) -> None:
    manifest = _manifest(directory)
    manifest.update(changes)
    (directory / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("name", ["wer_bertscore", "wer_bertscore+extra", "embedding_lr"])
def test_regression_round_trip_gives_identical_probabilities(
    trained_regressions, synthetic_study, tmp_path, name
):
    trained = trained_regressions[name]
    directory = save_artifact(trained, tmp_path, "meaning-proxy")
    assert directory == tmp_path / "meaning-proxy" / "v1"
    loaded = load_artifact(directory)
    before = trained.predict_proba(synthetic_study)
    after = loaded.predict_proba(synthetic_study)
    assert np.array_equal(before, after)  # bit for bit, not approximately
    assert loaded.threshold == trained.threshold
    assert loaded.kind == trained.kind and loaded.version == 1
    assert loaded.feature_names() == trained.feature_names()
    assert loaded.metrics == json.loads(json.dumps(trained.metrics))
    assert loaded.signature()["artifact"]["name"] == "meaning-proxy"


def test_manifest_contents_and_versions(trained_regressions, tmp_path):
    trained = trained_regressions["wer_bertscore+extra"]
    first = save_artifact(trained, tmp_path, "asr.meaning_v")
    second = save_artifact(trained, tmp_path, "asr.meaning_v")
    assert (first.name, second.name) == ("v1", "v2")
    assert versions(tmp_path, "asr.meaning_v") == [1, 2]
    assert trained.version == 2 and trained.path == second
    manifest = _manifest(second)
    assert manifest["kind"] == "wer_bertscore" and manifest["version"] == 2
    assert manifest["name"] == "asr.meaning_v"
    assert manifest["params"]["extra"] == ["sd", "heval"]
    assert manifest["params"]["normaliser"]["lowercase"] is True
    assert manifest["encoder"]["model_sha"] == model_fingerprint(encoder_resolve())
    assert manifest["encoder"]["external"] is True
    assert set(manifest["libraries"]) >= {"numpy", "scikit-learn", "torch", "transformers",
                                          "jiwer"}
    assert manifest["feature_names"] == ["del_rate", "ins_rate", "sub_rate", "bertscore_f",
                                         "sd", "heval"]
    assert manifest["threshold"] == trained.threshold
    assert manifest["metrics"]["auc"]["test"]["value"] > 0.9
    assert manifest["split_sizes"]["test"]["examples"] > 0
    assert manifest["training_seconds"] > 0
    assert manifest["created"].endswith("+00:00")
    assert list(manifest["files"]) == ["model.json"]
    # The artefact's directory loads its highest version.
    assert load_artifact(tmp_path / "asr.meaning_v").version == 2


def test_cross_encoder_round_trip_and_use_on_another_study(
    trained_cross_encoder, small_study, other_study, tmp_path
):
    trained = trained_cross_encoder
    directory = save_artifact(trained, tmp_path, "pertinence")
    manifest = _manifest(directory)
    assert manifest["encoder"]["external"] is False
    assert manifest["encoder"]["checkpoint_sha"] == model_fingerprint(directory / "model")
    assert "cross_encoder.json" in manifest["files"]
    assert any(f.startswith("model/") and f.endswith(".safetensors") for f in manifest["files"])
    loaded = load_artifact(directory)
    assert np.array_equal(trained.predict_proba(small_study), loaded.predict_proba(small_study))
    # Used as a proxy on a study it was not trained on (references it never saw).
    seen = {e.reference for e in small_study}
    fresh = [e for e in other_study if e.reference not in seen]
    assert len(fresh) > 150
    from sklearn.metrics import roc_auc_score

    auc = roc_auc_score([e.label for e in fresh], loaded.predict_proba(fresh))
    assert auc > 0.9


def test_regression_used_on_another_study(trained_regressions, other_study, tmp_path):
    directory = save_artifact(trained_regressions["wer_bertscore"], tmp_path, "baseline")
    loaded = load_artifact(directory)
    from sklearn.metrics import roc_auc_score

    auc = roc_auc_score([e.label for e in other_study], loaded.predict_proba(other_study))
    assert auc > 0.85


@pytest.fixture
def saved(trained_regressions, tmp_path):
    return save_artifact(trained_regressions["embedding_lr"], tmp_path, "proxy")


def test_missing_manifest(saved):
    (saved / MANIFEST).unlink()
    with pytest.raises(ArtifactError, match=r"manifest.json is missing: not a proxy artefact, "
                                            r"or its save did not finish"):
        load_artifact(saved)
    with pytest.raises(ArtifactError, match="no such artefact directory"):
        load_artifact(saved.parent / "v9")


def test_missing_and_changed_files(saved):
    model = saved / "model.json"
    original = model.read_text()
    model.write_text(original.replace('"intercept": ', '"intercept": 1'))
    with pytest.raises(ArtifactError, match=r"model.json: content differs from the manifest"):
        load_artifact(saved)
    model.unlink()
    with pytest.raises(ArtifactError, match=r"file model.json listed in the manifest is missing"):
        load_artifact(saved)


def test_bad_manifests(saved):
    _rewrite_manifest(saved, kind="llm_magic")
    with pytest.raises(ArtifactError, match="unknown proxy kind 'llm_magic'; this code knows "
                                            "cross_encoder, embedding_lr, pairwise_logistic, "
                                            "wer_bertscore"):
        load_artifact(saved)
    _rewrite_manifest(saved, kind="embedding_lr", proxy_version="0")
    with pytest.raises(ArtifactError, match="made by version '0' of the embedding_lr proxy"):
        load_artifact(saved)
    _rewrite_manifest(saved, proxy_version="1", files={"../../model.json": "0" * 64})
    with pytest.raises(ArtifactError, match=r"file '../../model.json' lies outside"):
        load_artifact(saved)
    _rewrite_manifest(saved, files=[])
    with pytest.raises(ArtifactError, match="field 'files' must be a JSON object, not list"):
        load_artifact(saved)
    _rewrite_manifest(saved, files={"model.json": "0"}, format=99)
    with pytest.raises(ArtifactError, match="manifest format 99 is not supported"):
        load_artifact(saved)
    manifest = _manifest(saved)
    del manifest["threshold"], manifest["files"]
    (saved / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="missing field\\(s\\) threshold, files"):
        load_artifact(saved)
    (saved / MANIFEST).write_text('{"format": 1,')
    with pytest.raises(ArtifactError, match="not valid JSON \\(line 1"):
        load_artifact(saved)


def _encoder_copy(tmp_path: Path, change_config: bool) -> Path:
    """The default encoder's files linked into a new directory, config.json optionally edited."""
    source = Path(encoder_resolve())
    target = tmp_path / "encoder-copy"
    target.mkdir()
    for item in source.iterdir():
        if item.name != "config.json":
            os.symlink(item, target / item.name)
    config = json.loads((source / "config.json").read_text())
    if change_config:
        config["layer_norm_eps"] = 1e-5  # a different model as far as the fingerprint goes
    (target / "config.json").write_text(json.dumps(config))
    return target


def test_encoder_mismatch_is_refused(saved, tmp_path):
    other = _encoder_copy(tmp_path, change_config=True)
    expected = model_fingerprint(encoder_resolve())
    with pytest.raises(ArtifactError) as info:
        load_artifact(saved, encoder_path=other)
    message = str(info.value)
    assert "encoder mismatch" in message and expected in message
    assert model_fingerprint(other) in message
    with pytest.raises(ArtifactError, match=r"does not exist or has no config.json"):
        load_artifact(saved, encoder_path=tmp_path / "nowhere")


def test_encoder_elsewhere_with_the_same_fingerprint_loads(saved, tmp_path, synthetic_study):
    same = tmp_path / "same"
    same.mkdir()
    copy = _encoder_copy(same, change_config=False)
    if model_fingerprint(copy) != model_fingerprint(encoder_resolve()):
        # json.dumps may reformat config.json; copy it byte for byte instead.
        (copy / "config.json").write_bytes((Path(encoder_resolve()) / "config.json")
                                           .read_bytes())
    loaded = load_artifact(saved, encoder_path=copy)
    assert loaded.proxy.params["model_path"] == str(copy)
    assert loaded.predict_proba(synthetic_study[:5]).shape == (5,)


def test_trained_elsewhere_falls_back_to_the_default_encoder(saved, synthetic_study):
    # Trained on a machine whose encoder lived at another path: the default encoder here has
    # the same fingerprint, so it is used.
    manifest = _manifest(saved)
    manifest["params"]["model_path"] = "/srv/other-host/all-MiniLM-L6-v2"
    (saved / MANIFEST).write_text(json.dumps(manifest))
    loaded = load_artifact(saved)
    assert loaded.proxy.params["model_path"] is None
    assert loaded.predict_proba(synthetic_study[:3]).shape == (3,)
    manifest["encoder"]["model_sha"] = "0123456789ab"
    (saved / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"fingerprint 0123456789ab, but .* \(the training "
                                            r"directory /srv/other-host/all-MiniLM-L6-v2 does "
                                            r"not exist here\)"):
        load_artifact(saved)


def test_bad_artifact_names(trained_regressions, tmp_path):
    for name in ["../escape", "", "a/b", ".hidden", "x" * 101]:
        with pytest.raises(ArtifactError, match="is not allowed"):
            save_artifact(trained_regressions["embedding_lr"], tmp_path, name)
    assert not any(tmp_path.iterdir())


def test_interrupted_save_leaves_no_version(trained_regressions, tmp_path, monkeypatch):
    trained = trained_regressions["embedding_lr"]

    def broken(directory):
        (Path(directory) / "model.json").write_text("{")
        raise OSError("disk full")

    monkeypatch.setattr(trained.proxy, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        save_artifact(trained, tmp_path, "proxy")
    assert versions(tmp_path, "proxy") == []
