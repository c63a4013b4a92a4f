"""Versioned, self-describing artefacts for trained proxies (no Django here).

Layout: `<root>/<name>/v<N>/` holds the proxy's own files (`Proxy.save`) and `manifest.json`:

    format            MANIFEST_FORMAT (bumped when the layout changes)
    name, version     the artefact's name and N
    created           UTC time, ISO 8601
    kind              a key of PROXY_KINDS; proxy_version: the class's `version`
    params, seed      what the proxy was built and split with
    encoder           the base encoder: model (display name), model_sha (`model_fingerprint`),
                      external (scoring reads it: the regressions) or not (the cross-encoder
                      carries its fine-tuned copy, whose fingerprint is checkpoint_sha);
                      model and model_sha null for a proxy reading no encoder (pairwise)
    libraries, python versions at training time
    threshold, threshold_rule, target_precision (null for a pairwise proxy: no threshold is
                      chosen; its threshold 0.5 and rule say how P(A) becomes an answer)
    metrics, split_sizes, feature_names, training_seconds, report (TrainingReport.to_dict())
    split_keys        split -> the example keys it held (output ids for a study's examples), so
                      that an analysis scores the proxy only on outputs it never saw; optional
                      (artefacts saved before it existed load with {}). A pairwise proxy has
                      one: "out_of_fold", the [output, output_b] pairs it predicted out of
                      fold (no train or dev split: nothing to leave out)
    files             relative path -> sha256 of every file the proxy saved

N is the next number after the highest existing `v<N>`, claimed with an atomic `mkdir`, so two
processes saving at once get different versions. The manifest is written last (to a temporary
file, then renamed): a version without one is an interrupted save and does not load.

`load_artifact` checks all of this and raises `ArtifactError` (a ValueError) with the path and
what is wrong: missing manifest or file, bad JSON, unknown format or kind, a changed file, a
proxy version this code does not implement, or an encoder whose fingerprint differs from the one
the proxy was trained with.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from proxies.learned.base import TrainedProxy, TrainingReport
from proxies.learned.training import PROXY_KINDS

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_VERSION_RE = re.compile(r"^v([1-9][0-9]*)$")
REQUIRED_KEYS = (
    "format", "name", "version", "created", "kind", "proxy_version", "params", "encoder",
    "threshold", "target_precision", "metrics", "split_sizes", "feature_names", "files",
)


class ArtifactError(ValueError):
    """An artefact that cannot be saved or loaded; the message names the path and the cause."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def versions(root_dir: str | os.PathLike[str], name: str) -> list[int]:
    """The version numbers under `<root>/<name>/`, ascending (complete or not)."""
    base = Path(root_dir) / name
    if not base.is_dir():
        return []
    found = (_VERSION_RE.match(p.name) for p in base.iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m)


def _claim_version(base: Path) -> tuple[int, Path]:
    base.mkdir(parents=True, exist_ok=True)
    number = max(versions(base.parent, base.name), default=0) + 1
    while True:
        target = base / f"v{number}"
        try:
            target.mkdir()
            return number, target
        except FileExistsError:  # another process claimed it first
            number += 1


def save_artifact(trained: TrainedProxy, root_dir: str | os.PathLike[str], name: str) -> Path:
    """Write `trained` to `<root_dir>/<name>/v<N>/` (the next free N); returns that directory.

    `name` is 1-100 characters of letters, digits, ".", "_" and "-", starting with a letter or
    digit. Sets `trained.version`, `.path`, `.created` and `.name`.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ArtifactError(
            f"artefact name {name!r} is not allowed: use 1-100 letters, digits, '.', '_' or "
            "'-', starting with a letter or digit"
        )
    number, directory = _claim_version(Path(root_dir) / name)
    try:
        created = _write(trained, directory, name, number)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)  # no half-written version left behind
        raise
    trained.version, trained.path, trained.created, trained.name = number, directory, created, name
    return directory


def _write(trained: TrainedProxy, directory: Path, name: str, number: int) -> str:
    proxy = trained.proxy
    files = proxy.save(directory)
    created = datetime.now(UTC).isoformat(timespec="seconds")
    encoder: dict[str, Any]
    if not proxy.uses_encoder:  # reads stored metric results (the pairwise proxy)
        encoder = {"model": None, "model_sha": None, "external": False}
    else:
        encoder = {
            "model": proxy.signature()["encoder"]["model"],
            "model_sha": (getattr(proxy, "base_fingerprint", None)
                          or proxy.encoder_fingerprint()),
            "external": proxy.uses_external_encoder,
        }
    if proxy.uses_encoder and not proxy.uses_external_encoder:
        from metrics.scorers.encoder import model_fingerprint

        encoder["checkpoint_sha"] = model_fingerprint(directory / "model")
    manifest = {
        "format": MANIFEST_FORMAT,
        "name": name,
        "version": number,
        "created": created,
        "kind": trained.kind,
        "proxy_version": proxy.version,
        "params": trained.params,
        "seed": trained.seed,
        "encoder": encoder,
        "libraries": proxy.libraries(),
        "python": platform.python_version(),
        "threshold": trained.threshold,
        "threshold_rule": trained.threshold_rule,
        "target_precision": trained.target_precision,
        "metrics": trained.metrics,
        "split_sizes": trained.split_sizes,
        "feature_names": proxy.feature_names(),
        "training_seconds": trained.training_seconds,
        "report": trained.report.to_dict(),
        "split_keys": {split: [_plain_key(key) for key in keys]
                       for split, keys in trained.split_keys.items()},
        "files": {rel: _sha256(directory / rel) for rel in files},
    }
    handle, temp = tempfile.mkstemp(dir=directory, prefix=".manifest-", suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump(manifest, out, indent=1, sort_keys=True)
    os.replace(temp, directory / MANIFEST)
    return created


def _plain_key(key: Any) -> Any:
    """An example key as JSON: numbers, text and None as they are, tuples as lists (the
    synthetic studies' keys), numpy scalars as Python ones, anything else as its text."""
    if key is None or isinstance(key, bool | int | float | str):
        return key
    if isinstance(key, list | tuple):
        return [_plain_key(part) for part in key]
    item = getattr(key, "item", None)
    if callable(item):
        return _plain_key(item())
    return str(key)


def _read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    if not path.is_file():
        if not directory.exists():
            raise ArtifactError(f"{directory}: no such artefact directory")
        raise ArtifactError(
            f"{path} is missing: not a proxy artefact, or its save did not finish"
        )
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{path}: expected a JSON object, got {type(manifest).__name__}")
    missing = [key for key in REQUIRED_KEYS if key not in manifest]
    if missing:
        raise ArtifactError(f"{path}: missing field(s) {', '.join(missing)}")
    for key in ("params", "encoder", "metrics", "split_sizes", "files"):
        if not isinstance(manifest[key], dict):
            raise ArtifactError(f"{path}: field {key!r} must be a JSON object, not "
                                f"{type(manifest[key]).__name__}")
    if manifest["format"] != MANIFEST_FORMAT:
        raise ArtifactError(f"{path}: manifest format {manifest['format']!r} is not supported "
                            f"(this code reads format {MANIFEST_FORMAT})")
    return manifest


def _external_encoder(manifest: dict[str, Any], where: Path,
                      encoder_path: str | os.PathLike[str] | None) -> str | None:
    """The encoder directory a regression proxy will read (None: the default), checked.

    `encoder_path` when given; else the directory recorded at training time if it exists here,
    otherwise the embedded default (an artefact trained on another machine names that
    machine's path). Whichever is used must have the training encoder's fingerprint.
    """
    from metrics.scorers.encoder import encoder_resolve, model_fingerprint

    expected = manifest["encoder"].get("model_sha")
    model = manifest["encoder"].get("model")
    recorded = manifest["params"].get("model_path")
    if encoder_path is not None:
        base: str | None = str(encoder_path)
    elif recorded and (Path(recorded) / "config.json").is_file():
        base = recorded
    else:
        base = None  # the default encoder
    path = encoder_resolve(model_path=base)
    if not (Path(path) / "config.json").is_file():
        raise ArtifactError(
            f"{where}: the encoder directory {path} does not exist or has no config.json; pass "
            f"encoder_path= the directory of {model!r} (fingerprint {expected})"
        )
    found = model_fingerprint(path)
    if found != expected:
        hint = ("" if base or not recorded else
                f" (the training directory {recorded} does not exist here)")
        raise ArtifactError(
            f"{where}: encoder mismatch: the proxy was trained on {model!r} with fingerprint "
            f"{expected}, but {path}{hint} has fingerprint {found}; pass encoder_path= a "
            "directory holding that model"
        )
    return base


def resolve_artifact_dir(path: str | os.PathLike[str]) -> Path:
    """A version directory as given, or for `<root>/<name>` its highest version."""
    directory = Path(path)
    if not (directory / MANIFEST).exists():
        numbers = versions(directory.parent, directory.name)
        if numbers:
            return directory / f"v{numbers[-1]}"
    return directory


def load_artifact(
    path: str | os.PathLike[str],
    *,
    encoder_path: str | os.PathLike[str] | None = None,
    device: str | None = None,
    verify_files: bool = True,
) -> TrainedProxy:
    """Load a saved proxy, checking its manifest (raises ArtifactError; see the module doc).

    `path` is a version directory (`.../<name>/v3`) or an artefact's directory (`.../<name>`:
    its highest version). The regressions read an encoder: `encoder_path` when given, else
    the training directory if it exists here, else the embedded default; its fingerprint must
    match the training encoder's.
    `device` overrides where the model runs. `verify_files=False` skips the sha256 check of
    the files (a 90 MB checkpoint takes about 0.3 s to hash).
    """
    directory = resolve_artifact_dir(path)
    manifest = _read_manifest(directory)
    where = directory / MANIFEST
    kind = manifest["kind"]
    cls = PROXY_KINDS.get(kind)
    if cls is None:
        raise ArtifactError(f"{where}: unknown proxy kind {kind!r}; this code knows "
                            f"{', '.join(sorted(PROXY_KINDS))}")
    if str(manifest["proxy_version"]) != cls.version:
        raise ArtifactError(
            f"{where}: made by version {manifest['proxy_version']!r} of the {kind} proxy; this "
            f"code implements version {cls.version!r} and would score differently: retrain"
        )
    files = manifest["files"]
    for rel, digest in sorted(files.items()):
        file = directory / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ArtifactError(f"{where}: file {rel!r} lies outside the artefact directory")
        if not file.is_file():
            raise ArtifactError(f"{directory}: file {rel} listed in the manifest is missing")
        if verify_files and _sha256(file) != digest:
            raise ArtifactError(f"{file}: content differs from the manifest's sha256 "
                                "(changed or corrupted after saving)")
    overrides: dict[str, Any] = {}
    if device is not None:
        overrides["device"] = device
    if not cls.uses_encoder:
        pass  # no encoder to check
    elif cls.uses_external_encoder:
        base = _external_encoder(manifest, where, encoder_path)
        if base != manifest["params"].get("model_path"):
            overrides["model_path"] = base
    else:
        from metrics.scorers.encoder import model_fingerprint

        found = model_fingerprint(directory / "model")
        if found != manifest["encoder"].get("checkpoint_sha"):
            raise ArtifactError(
                f"{where}: the fine-tuned checkpoint's fingerprint {found} differs from the "
                f"manifest's {manifest['encoder'].get('checkpoint_sha')}"
            )
    try:
        proxy = cls.load(directory, **overrides)
    except (OSError, ValueError, KeyError) as exc:
        raise ArtifactError(f"{directory}: cannot load the {kind} proxy: {exc}") from exc
    if proxy.feature_names() != manifest["feature_names"]:
        raise ArtifactError(f"{where}: feature names {manifest['feature_names']} differ from "
                            f"the model's {proxy.feature_names()}")
    report_data = manifest.get("report") or {}
    report = (TrainingReport.from_dict(report_data) if report_data else
              TrainingReport(kind=kind, n_train=0, n_dev=0, seconds=0.0, dev_auc=None))
    return TrainedProxy(
        kind=kind, proxy=proxy, threshold=float(manifest["threshold"]),
        threshold_rule=str(manifest.get("threshold_rule", "")),
        target_precision=(None if manifest["target_precision"] is None
                          else float(manifest["target_precision"])),
        metrics=manifest["metrics"],
        split_sizes=manifest["split_sizes"], params=manifest["params"],
        seed=int(manifest.get("seed", 0)),
        training_seconds=float(manifest.get("training_seconds", 0.0)), report=report,
        version=int(manifest["version"]), path=directory, created=manifest["created"],
        name=manifest["name"], split_keys=dict(manifest.get("split_keys") or {}),
    )
