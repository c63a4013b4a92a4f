"""Building a judge backend from a plain (JSON-storable) config (no Django here): the backend
names and aliases, the settings each backend takes, and their types.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from proxies.judges.backends.base import (
    JudgeBackend,
    ResponseCache,
)
from proxies.judges.backends.local_hf import LocalHFBackend
from proxies.judges.backends.openai import OpenAICompatibleBackend
from proxies.judges.network import NetworkPolicy

# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------

_OPENAI_OPTIONAL = {
    "api_key": str, "api_key_env": str, "mode": str, "concurrency": int, "timeout_s": float,
    "max_retries": int, "backoff_s": float, "top_logprobs": int, "answer_tokens": int,
    "logprobs": bool, "max_backoff_s": float, "max_retry_after_s": float,
}
_HF_OPTIONAL = {"device": str, "batch_size": int, "max_length": int, "soft_prompt": str}
_BACKEND_NAMES = {"openai": "openai", "openai-compatible": "openai", "hf": "hf",
                  "huggingface": "hf", "local": "hf"}


def backend_kind(name: Any) -> str | None:
    """"openai" or "hf" for a config's `backend` name, aliases included; None when unknown.
    Callers that check a config before building it compare kinds, never the raw name (an
    alias would otherwise slip past a check made for "openai")."""
    return _BACKEND_NAMES.get(str(name).lower()) if name is not None else None


def _typed(name: str, value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif isinstance(value, str):
        return value
    raise ValueError(f"judge config: {name!r} must be {kind.__name__}, got {value!r}")


def build_backend(config: Mapping[str, Any], *, cache: ResponseCache | None = None,
                  policy: NetworkPolicy | None = None) -> JudgeBackend:
    """A backend from a plain (JSON-storable) dict.

    `{"backend": "openai", "base_url": ..., "model": ..., "mode": "chat",
    "api_key_env": "OPENAI_API_KEY", "concurrency": 8, ...}` or
    `{"backend": "hf", "model_path": ..., "device": "cuda", "batch_size": 8}` (plus
    `"soft_prompt": DIR`, a prompt-tuned soft prompt for that model). The API key comes
    from the environment variable named by `api_key_env` (preferred: the key is not stored with
    the config) or from `api_key`. Unknown keys, missing required keys, wrong types and an unset
    key variable are errors that name the key. `policy` goes to an OpenAI-compatible backend
    (where its requests may go; a local model makes none).
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"judge config must be a mapping, got {type(config).__name__}")
    name = config.get("backend")
    kind = backend_kind(name)
    if kind is None:
        raise ValueError(f"judge config: 'backend' must be one of {sorted(_BACKEND_NAMES)}, got "
                         f"{name!r}")
    required = ("base_url", "model") if kind == "openai" else ("model_path",)
    optional = _OPENAI_OPTIONAL if kind == "openai" else _HF_OPTIONAL
    unknown = sorted(set(config) - {"backend", *required, *optional})
    if unknown:
        raise ValueError(f"judge config: unknown key(s) {unknown} for backend {kind!r}; allowed: "
                         f"{sorted({*required, *optional})}")
    missing = [key for key in required if not config.get(key)]
    if missing:
        raise ValueError(f"judge config: missing {missing} (required for backend {kind!r})")
    options = {key: _typed(key, config[key], optional[key]) for key in optional if key in config}
    if kind == "hf":
        return LocalHFBackend(str(config["model_path"]), cache=cache, **options)
    env_name = options.pop("api_key_env", None)
    if env_name:
        if options.get("api_key"):
            raise ValueError("judge config: give 'api_key' or 'api_key_env', not both")
        key = os.environ.get(env_name, "")
        if not key:
            raise ValueError(f"judge config: api_key_env names {env_name!r}, which is not set "
                             "(or empty) in the environment")
        options["api_key"] = key
    return OpenAICompatibleBackend(str(config["base_url"]), str(config["model"]), cache=cache,
                                   policy=policy, **options)
