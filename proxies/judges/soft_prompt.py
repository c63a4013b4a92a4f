"""A trained soft prompt as a file (no Django here): `SoftPrompt`, its directory (peft's
adapter files and a manifest written last, with a sha256 per file), saving, reading and
loading it checked, and the embedding probe that tells the model it was tuned on from another
of the same shape. Training is proxies.judges.prompt_tuning; a local judge
(proxies.judges.backends.local_hf) loads what is saved here."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SOFT_PROMPT_MANIFEST = "soft_prompt.json"
SOFT_PROMPT_FORMAT = 1
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
@dataclass
class SoftPrompt:
    """A trained soft prompt: `embeddings` [num_virtual_tokens, hidden] (float32, CPU), the
    peft config it was trained under (a dict, adapter_config.json), and its manifest
    (soft_prompt.json: base model, template, answers, training report; `path` and `sha256`
    once saved or loaded)."""

    embeddings: Any
    peft_config: dict[str, Any]
    manifest: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def num_virtual_tokens(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def sha256(self) -> str:
        """sha256 of the embeddings (float32 bytes): identical prompts, identical digests."""
        import numpy as np

        data = np.ascontiguousarray(self.embeddings.detach().cpu().float().numpy())
        return hashlib.sha256(data.tobytes()).hexdigest()


PROBE_ROWS = 16


def embedding_probe(model: Any) -> list[float]:
    """A few numbers that tell one model's input embeddings from another's of the same shape
    (the model fingerprint only hashes config.json and file sizes): for the first PROBE_ROWS
    token ids, the row's norm and its projection on a fixed (seeded) random direction."""
    import torch

    with torch.no_grad():
        table = model.get_input_embeddings().weight
        rows = table[: min(PROBE_ROWS, table.shape[0])].detach().float().cpu()
        direction = torch.randn(rows.shape[1], generator=torch.Generator().manual_seed(0))
        direction /= direction.norm()
        return [float(v) for pair in zip(rows.norm(dim=1), rows @ direction, strict=True)
                for v in pair]


def probes_match(trained: Sequence[float], here: Sequence[float]) -> bool:
    """Equal up to the rounding of another dtype (fp16 scoring of a model tuned in fp32 or
    bf16): within 2 % of the rows' mean norm."""
    if len(trained) != len(here):
        return False
    scale = max(1e-12, sum(abs(v) for v in trained[::2]) / max(1, len(trained) // 2))
    return all(abs(a - b) <= 0.02 * scale for a, b in zip(trained, here, strict=True))


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_soft_prompt(soft: SoftPrompt, directory: str | os.PathLike[str],
                     extra: dict[str, Any] | None = None) -> Path:
    """Write `soft` into `directory` (created if missing, must hold no soft prompt yet): peft's
    adapter files, then `soft_prompt.json` (the manifest, `extra` merged in, a sha256 per
    file) last, through a temporary file: a directory without it is an interrupted save."""
    from safetensors.torch import save_file

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    if (target / SOFT_PROMPT_MANIFEST).exists():
        raise FileExistsError(f"{target} already holds a soft prompt")
    config = dict(soft.peft_config)
    config["inference_mode"] = True
    (target / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    # peft's layout: the prompt encoder's output under "prompt_embeddings".
    save_file({"prompt_embeddings": soft.embeddings.detach().cpu().float().contiguous()},
              str(target / "adapter_model.safetensors"))
    manifest = {**soft.manifest, **(extra or {}), "embeddings_sha256": soft.sha256,
                "files": {name: _file_sha256(target / name) for name in ADAPTER_FILES}}
    temporary = target / (SOFT_PROMPT_MANIFEST + ".tmp")
    temporary.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    temporary.replace(target / SOFT_PROMPT_MANIFEST)
    soft.manifest, soft.path = manifest, target
    return target


def read_soft_prompt_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a saved soft prompt; ValueError naming the problem."""
    path = Path(directory) / SOFT_PROMPT_MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{directory} holds no {SOFT_PROMPT_MANIFEST} (not a soft prompt, "
                         "or an interrupted save)") from None
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} cannot be read: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != SOFT_PROMPT_FORMAT:
        raise ValueError(f"{path}: unknown soft prompt format")
    return manifest


def load_soft_prompt(directory: str | os.PathLike[str]) -> SoftPrompt:
    """A saved soft prompt, checked: manifest, files unchanged since saving (sha256), a peft
    PROMPT_TUNING adapter whose embeddings have the shape its config says."""
    from peft import PeftConfig
    from peft.utils import load_peft_weights

    where = Path(directory)
    manifest = read_soft_prompt_manifest(where)
    for name, digest in (manifest.get("files") or {}).items():
        if name not in ADAPTER_FILES:
            continue
        try:
            found = _file_sha256(where / name)
        except FileNotFoundError:
            raise ValueError(f"{where}: {name} is missing") from None
        if found != digest:
            raise ValueError(f"{where}: {name} changed since the soft prompt was saved")
    config = PeftConfig.from_pretrained(str(where))
    if str(getattr(config, "peft_type", "")).split(".")[-1] != "PROMPT_TUNING":
        raise ValueError(f"{where}: not a prompt-tuning adapter ({config.peft_type})")
    weights = load_peft_weights(str(where), device="cpu")
    embeddings = weights.get("prompt_embeddings")
    n_virtual = int(config.num_virtual_tokens) * int(config.num_transformer_submodules or 1)
    if embeddings is None or tuple(embeddings.shape) != (n_virtual, int(config.token_dim)):
        raise ValueError(f"{where}: the adapter holds no [{n_virtual}, {config.token_dim}] "
                         "prompt embeddings")
    if int(config.num_transformer_submodules or 1) != 1:
        raise ValueError(f"{where}: soft prompts for the decoder too are not supported")
    peft_config = json.loads((where / "adapter_config.json").read_text())
    return SoftPrompt(embeddings=embeddings.float(), peft_config=peft_config,
                      manifest=manifest, path=where.resolve())


__all__ = ["ADAPTER_FILES", "PROBE_ROWS", "SOFT_PROMPT_FORMAT", "SOFT_PROMPT_MANIFEST",
           "SoftPrompt", "embedding_probe", "load_soft_prompt", "probes_match",
           "read_soft_prompt_manifest", "save_soft_prompt"]
