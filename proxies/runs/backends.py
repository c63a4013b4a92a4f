"""What a proxy run may ask of a judge: the backend settings an editor gives, checked and
completed from the operator's settings (EVALSTUDY_JUDGE_*), the network policy every backend is
built under, which key may go to which origin, upper bounds on an editor's numbers, and the
per-study response cache in the database. Also where the soft prompts a local judge may load
live and which it may (proxies.training.soft_prompts trains them).

Every check here runs when a run is started and again on the worker before a key is read or a
model file opened (`proxies.runs.services.proxy_batch_judge`): settings may have changed
meanwhile.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError

from evalstudy.models import Study
from metrics.services import model_dir_check
from proxies.models import JudgeResponse

# Upper bounds on what an editor may ask of a judge, checked when a run is started (the
# manual, docs/guide/proxies.md). Editors choose the endpoint: without them a run could hold a
# worker for hours against a server that answers slowly or not at all (timeout_s x
# (max_retries + 1) per prompt, plus the waits), open thousands of connections, or generate
# without limit at the operator's cost. The Django-free backends and methods keep their own
# defaults and accept any value (their callers choose their own servers). concurrency may
# also reach EVALSTUDY_JUDGE_CONCURRENCY when that is higher (the operator's choice).
BACKEND_LIMITS: dict[str, dict[str, int | float]] = {
    "openai": {"concurrency": 64, "timeout_s": 120.0, "max_retries": 8, "backoff_s": 10.0,
               "max_backoff_s": 60.0, "max_retry_after_s": 120.0, "top_logprobs": 20,
               "answer_tokens": 16},
    "hf": {"batch_size": 256, "max_length": 8192},
}
# DRPE: dynamic roles generated per item (the paper's best was 4), static roles given, and
# tokens generated per vote (its default, 60 per role + 40, stays below this).
PARAM_LIMITS: dict[str, int] = {"dynamic_roles": 16, "static_roles": 16, "max_tokens": 4096}


class DatabaseResponseCache:
    """The judge backends' response cache (proxies.judges.backends.base.ResponseCache) in the
    database, so every worker host shares it and a re-run makes no request.

    Scoped to one study: answers are read and written under `study` only. A shared cache would
    let one study's run finish from another's answers (a run against a dead URL completing from
    a stranger's cached judgments) and would hand one study's prompts, its items, to another.
    """

    def __init__(self, study: Study) -> None:
        self.study = study

    def get(self, key: str) -> dict | None:
        return (JudgeResponse.objects.filter(study=self.study, key=key)
                .values_list("value", flat=True).first())

    def set(self, key: str, value: dict) -> None:
        self.set_many({key: value})

    def get_many(self, keys: Sequence[str]) -> dict[str, dict]:
        """One query for a batch's prompts."""
        return dict(JudgeResponse.objects.filter(study=self.study, key__in=list(keys))
                    .values_list("key", "value"))

    def set_many(self, values: dict[str, dict]) -> None:
        JudgeResponse.objects.bulk_create(
            [JudgeResponse(study=self.study, key=key, value=value)
             for key, value in values.items()],
            ignore_conflicts=True, batch_size=500)


def default_backend() -> dict[str, Any]:
    """The judge endpoint from settings (EVALSTUDY_JUDGE_*), key read from the environment."""
    config = {
        "backend": "openai", "base_url": settings.EVALSTUDY_JUDGE_BASE_URL,
        "model": settings.EVALSTUDY_JUDGE_MODEL, "mode": settings.EVALSTUDY_JUDGE_MODE,
        "concurrency": settings.EVALSTUDY_JUDGE_CONCURRENCY,
    }
    if os.environ.get("EVALSTUDY_JUDGE_API_KEY"):  # local servers (vLLM, Ollama) need none
        config["api_key_env"] = "EVALSTUDY_JUDGE_API_KEY"
    return config


def judge_network_policy():
    """Where judge requests may go (proxies.judges.network.NetworkPolicy), from settings:
    public addresses, plus the networks in EVALSTUDY_JUDGE_ALLOWED_NETWORKS; only the hosts in
    EVALSTUDY_JUDGE_ALLOWED_HOSTS when it is set; and the origin (scheme, host, port) of
    EVALSTUDY_JUDGE_BASE_URL whatever its address, since an operator configured it. Response
    bodies stay out of error messages: those are shown to editors, who chose the URL.

    Built on every call (cheap), so a worker applies the settings it runs with now."""
    from proxies.judges.network import NetworkPolicy

    try:
        return NetworkPolicy.build(
            allowed_networks=settings.EVALSTUDY_JUDGE_ALLOWED_NETWORKS,
            allowed_hosts=settings.EVALSTUDY_JUDGE_ALLOWED_HOSTS,
            trusted_urls=[settings.EVALSTUDY_JUDGE_BASE_URL],
            hint="an operator can allow a network in EVALSTUDY_JUDGE_ALLOWED_NETWORKS",
        )
    except ValueError as error:
        raise ImproperlyConfigured(f"EVALSTUDY_JUDGE_ALLOWED_NETWORKS: {error}") from None


Origin = tuple[str, str, int]
_KEY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _origin_text(origin: Origin) -> str:
    scheme, host, port = origin
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}"


def judge_key_origins() -> dict[str, frozenset[Origin]]:
    """The key variables a run may name (EVALSTUDY_JUDGE_KEY_ENVS), each with the origins
    (scheme, host, port) its key may be sent to. An entry `NAME` binds the key to the origin
    of EVALSTUDY_JUDGE_BASE_URL (to none while that is unset); `NAME=https://host[:port]` to
    that origin. A name listed twice is bound to both origins.

    Read on every call, so a worker applies the settings it runs with now."""
    from proxies.judges.network import url_origin

    default = url_origin(settings.EVALSTUDY_JUDGE_BASE_URL or "")
    origins: dict[str, set[Origin]] = {}
    for entry in settings.EVALSTUDY_JUDGE_KEY_ENVS:
        name, bound, url = (part.strip() for part in str(entry).partition("="))
        if not _KEY_NAME.fullmatch(name):
            raise ImproperlyConfigured(f"EVALSTUDY_JUDGE_KEY_ENVS: {entry!r} does not start "
                                       "with an environment variable's name")
        keys = origins.setdefault(name, set())
        if not bound:
            if default is not None:
                keys.add(default)
            continue
        parts = urlsplit(url)
        origin = url_origin(url)
        if (origin is None or parts.username or parts.password or parts.path not in ("", "/")
                or parts.query or parts.fragment):
            raise ImproperlyConfigured(
                f"EVALSTUDY_JUDGE_KEY_ENVS: {name}= must be followed by an origin, "
                "http(s)://host or http(s)://host:port, without a path")
        keys.add(origin)
    return {name: frozenset(keys) for name, keys in origins.items()}


def key_env_check(config: dict[str, Any]) -> None:
    """A key goes only to its own endpoint: the variable `api_key_env` names must be listed in
    EVALSTUDY_JUDGE_KEY_ENVS (any other, SECRET_KEY or DATABASE_URL, would be sent as a Bearer
    token), and the origin of `base_url` must be the one that entry binds it to. Otherwise an
    editor could send the operator's key to a server of their own by naming it with their
    base_url. Checked when a run starts and again right before a worker reads the key."""
    from proxies.judges.backends.registry import backend_kind
    from proxies.judges.network import url_origin

    key_env = config.get("api_key_env")
    if not key_env:
        return
    if not isinstance(key_env, str):
        raise ValidationError("backend: api_key_env must be the name of an environment variable")
    origins = judge_key_origins()
    if key_env not in origins:
        raise ValidationError(f"backend: api_key_env {key_env!r} is not one of the key "
                              f"variables allowed by EVALSTUDY_JUDGE_KEY_ENVS "
                              f"{sorted(origins)}")
    if backend_kind(config.get("backend", "openai")) == "hf":
        return  # a local model takes no key (build_backend refuses the setting)
    origin = url_origin(str(config.get("base_url") or ""))
    if origin is None or origin not in origins[key_env]:
        bound = (", ".join(sorted(_origin_text(o) for o in origins[key_env]))
                 or "no endpoint (EVALSTUDY_JUDGE_BASE_URL is not set)")
        shown = _origin_text(origin) if origin else repr(str(config.get("base_url") or ""))
        raise ValidationError(
            f"backend: the key in {key_env!r} is sent only to {bound}, the origin "
            f"EVALSTUDY_JUDGE_KEY_ENVS binds it to; base_url {shown} is another origin (scheme, "
            "host and port must match). Name no api_key_env for this server, or ask an "
            f"operator to bind a key to it ({key_env}=https://host:port)")


def limits_check(config: dict[str, Any], params: dict[str, Any] | None = None) -> None:
    """The editor's numbers within BACKEND_LIMITS / PARAM_LIMITS, each refusal naming its
    bound. Wrong types and values below the minimum are left to the backend's own checks (it
    names them), except for DRPE's parameters, which nothing else checks before a worker."""
    limits = dict(BACKEND_LIMITS.get(str(config.get("backend")), {}))
    if "concurrency" in limits:
        limits["concurrency"] = max(limits["concurrency"], settings.EVALSTUDY_JUDGE_CONCURRENCY)
    errors = []
    for name, bound in limits.items():
        value = config.get(name)
        if (isinstance(value, int | float) and not isinstance(value, bool)
                and not value <= bound):  # NaN and infinity fail too
            errors.append(f"backend: {name} must be at most {bound:g}, got {value!r}")
    params = params or {}
    for name in ("dynamic_roles", "max_tokens"):
        if name not in params:
            continue
        value, low, high = params[name], int(name == "max_tokens"), PARAM_LIMITS[name]
        if (not isinstance(value, int) or isinstance(value, bool)) or not low <= value <= high:
            errors.append(f"params: {name} must be an integer from {low} to at most {high}, "
                          f"got {value!r}")
    if params.get("static_roles") is not None:
        roles = params["static_roles"]
        if (not isinstance(roles, list) or not all(
                isinstance(role, dict) and isinstance(role.get("type"), str)
                and isinstance(role.get("description"), str) for role in roles)):
            errors.append('params: static_roles must be a list of {"type": ..., '
                          '"description": ...} roles')
        elif len(roles) > PARAM_LIMITS["static_roles"]:
            errors.append(f"params: static_roles may hold at most "
                          f"{PARAM_LIMITS['static_roles']} roles, got {len(roles)}")
    if "role_prompts" in params:  # DRPE's role-generation prompt(s), methods.ROLE_GRANULARITIES
        from proxies.judges.methods import ROLE_GRANULARITIES

        if params["role_prompts"] not in ROLE_GRANULARITIES:
            errors.append(f"params: role_prompts must be one of {sorted(ROLE_GRANULARITIES)}, "
                          f"got {params['role_prompts']!r}")
    if "aggregation" in params:  # DRPE: the weighted share, or eq. 4's unnormalised sum
        from proxies.judges.methods import AGGREGATIONS

        if params["aggregation"] not in AGGREGATIONS:
            errors.append(f"params: aggregation must be one of {list(AGGREGATIONS)}, got "
                          f"{params['aggregation']!r}")
    if "dedup_eps" in params:
        eps = params["dedup_eps"]
        if not isinstance(eps, int | float) or isinstance(eps, bool) or not 0 < eps <= 2:
            errors.append(f"params: dedup_eps (a cosine distance) must lie in (0, 2], "
                          f"got {eps!r}")
    if errors:
        raise ValidationError(errors)


def base_url_check(url: str, *, require_resolvable: bool = True) -> None:
    """A judge URL carries no credentials (they would be stored and shown with the run) and
    passes the network policy (`judge_network_policy`): the workers send requests wherever an
    editor says, so loopback, link-local (cloud metadata), private and other non-public
    addresses are refused unless an operator allowed them.

    The same checks run again on every connection (this one gives the editor a clear message
    early). `require_resolvable=False` lets a host that does not resolve pass (a batch about to
    send leaves a passing DNS failure to its retries)."""
    from proxies.judges.network import NetworkRefused

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(f"backend: base_url {url!r} is not an http(s) URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValidationError("backend: base_url must not carry credentials, a query or a "
                              "fragment; give the key through api_key_env")
    policy = judge_network_policy()
    allowed = settings.EVALSTUDY_JUDGE_ALLOWED_HOSTS
    if allowed and not policy.trusts_url(url) and parts.hostname not in allowed:
        raise ValidationError(f"backend: host {parts.hostname!r} is not in "
                              f"EVALSTUDY_JUDGE_ALLOWED_HOSTS {sorted(allowed)}")
    try:
        policy.check_url(url)
    except NetworkRefused as refused:
        if refused.unresolved and not require_resolvable:
            return
        raise ValidationError(f"backend: base_url {refused}") from None


def backend_clean(backend: dict[str, Any] | None) -> dict[str, Any]:
    """The stored backend settings: the caller's, with gaps filled from settings. The
    configured key goes only to the configured endpoint, and a key named by the caller only to
    the origin EVALSTUDY_JUDGE_KEY_ENVS binds it to (`key_env_check`). A local model's
    directory must be one an operator allows (`model_dir_check`), checked before any file is
    read; numbers stay within BACKEND_LIMITS."""
    from proxies.judges.backends.registry import backend_kind

    backend = dict(backend or {})
    if "backend" in backend:
        # One spelling from here on: every check below (and on the worker) compares kinds.
        kind = backend_kind(backend["backend"])
        if kind is None:
            raise ValidationError(f"backend: 'backend' must be 'openai' or 'hf', got "
                                  f"{backend['backend']!r}")
        backend["backend"] = kind
    if backend.get("backend") == "hf":
        config = backend  # a local model needs none of the HTTP defaults
    else:
        defaults = default_backend()
        if backend.get("base_url") and backend["base_url"] != defaults["base_url"]:
            defaults.pop("api_key_env", None)
        config = {**defaults, **backend}
    if "api_key" in config:
        raise ValidationError("backend: give api_key_env, the name of an environment variable "
                              "holding the key; keys are never stored")
    if "soft_prompt" in config and config.get("backend") != "hf":
        raise ValidationError("backend: soft_prompt is for a local Hugging Face judge "
                              "(backend 'hf')")
    if config.get("backend") == "openai":
        if not (config.get("base_url") and config.get("model")):
            raise ValidationError("backend: an OpenAI-compatible judge needs base_url and model "
                                  "(or EVALSTUDY_JUDGE_BASE_URL / EVALSTUDY_JUDGE_MODEL)")
        if not isinstance(config["base_url"], str):
            raise ValidationError("backend: base_url must be a string")
    limits_check(config)
    key_env_check(config)
    if config.get("backend") == "openai":
        base_url_check(str(config["base_url"]))
    if config.get("backend") == "hf":
        if not config.get("model_path"):
            raise ValidationError("backend: a local Hugging Face judge needs model_path")
        if not isinstance(config["model_path"], str):
            raise ValidationError("backend: model_path must be a string")
        model_dir_check(config["model_path"], field="backend: model_path")
        if config.get("soft_prompt") is not None:
            soft_prompt_check(config["soft_prompt"])
    return config


def backend_build(config: dict[str, Any], *, study: Study | None = None):
    """The judge backend of a stored config, under the network policy (always: this is where
    editors' URLs are called), with the study's response cache when `study` is given."""
    from proxies.judges.backends.base import JudgeError
    from proxies.judges.backends.registry import backend_kind, build_backend

    # The last word before a key is read and a local model is loaded: whoever calls, a key
    # goes only to its own origin and a model directory is one an operator allows.
    key_env_check(config)
    if backend_kind(config.get("backend")) == "hf" and config.get("model_path"):
        model_dir_check(str(config["model_path"]), field="backend: model_path")
    if backend_kind(config.get("backend")) == "hf" and config.get("soft_prompt") is not None:
        soft_prompt_check(config["soft_prompt"], study=study)
    cache = DatabaseResponseCache(study) if study is not None else None
    try:
        return build_backend(config, cache=cache, policy=judge_network_policy())
    except (KeyError, ValueError, OSError, JudgeError) as error:
        raise ValidationError(f"backend: {error}") from None


# --------------------------------------------------------------------------------------------
# Soft prompts: LATTE's prompt tuning of a local judge on a study's human labels
# --------------------------------------------------------------------------------------------

# Bounds on a prompt tuning's numbers (it holds the process that runs it, GPU or CPU, for as
# long as these say), as TRAINING_LIMITS bounds the learned proxies'.
SOFT_PROMPT_LIMITS: dict[str, float] = {
    "num_virtual_tokens": 100, "epochs": 50, "batch_size": 256, "eval_batch_size": 1024,
    "max_length": 8192, "init_vocab": 1_000_000, "learning_rate": 1.0, "warmup_ratio": 1.0,
    "weight_decay": 1.0,
}
SOFT_PROMPT_DIR = "soft-prompts"
SOFT_PROMPT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def soft_prompt_root() -> Path:
    """Where `soft_prompt_train` saves: EVALSTUDY_PROXY_DIR/soft-prompts/study-<id>/<name>/v<N>."""
    return Path(settings.EVALSTUDY_PROXY_DIR) / SOFT_PROMPT_DIR


def soft_prompt_check(path: Any, *, study: Study | None = None,
                      field: str = "backend: soft_prompt") -> str:
    """`path` as given, when a local judge may load it as its soft prompt; else
    ValidationError naming `field`.

    Only soft prompts this platform trained are loaded: an absolute path that resolves
    (symlinks followed, ".." resolved) to a directory under EVALSTUDY_PROXY_DIR/soft-prompts/
    holding a soft prompt manifest. With `study` (on the worker, right before loading), the
    soft prompt must have been trained on that study: it is made from that study's human
    labels, so another study's run may not use it (as one study's cache and raters are its
    own). Checked when a run starts and again on the worker, like a model directory."""
    from proxies.judges.soft_prompt import read_soft_prompt_manifest

    text = path if isinstance(path, str) else ""
    shown = text[:300]
    if not text.strip() or "\x00" in text:
        raise ValidationError(f"{field}: must name a soft prompt directory")
    if not Path(text).is_absolute():
        raise ValidationError(f"{field}: {shown!r} must be an absolute path")
    try:
        resolved = Path(text).resolve(strict=True)
        root = soft_prompt_root().resolve()
    except (OSError, RuntimeError):
        raise ValidationError(f"{field}: {shown!r} does not exist") from None
    if not resolved.is_dir() or not resolved.is_relative_to(root) or resolved == root:
        raise ValidationError(f"{field}: {shown!r} is not a soft prompt trained here (they live "
                              "under EVALSTUDY_PROXY_DIR/soft-prompts/)")
    try:
        manifest = read_soft_prompt_manifest(resolved)
    except ValueError:
        raise ValidationError(f"{field}: {shown!r} holds no soft prompt") from None
    if study is not None and (manifest.get("study") or {}).get("id") != study.pk:
        raise ValidationError(f"{field}: {shown!r} was trained on another study; a soft prompt "
                              "is used on the study whose labels trained it")
    return text
