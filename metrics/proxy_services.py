"""Proxy judges on a study: LLM judges (LATTE, rubric/G-Eval, DRPE) and learned proxies.

A proxy run answers criteria on every unit of a study (each output; for pairwise criteria each
pair of outputs the design shows) as a non-human Rater, through one seat (source "proxy") whose
slots hold the units. The answers are ordinary Judgments, so the analysis compares humans and
proxies through the same code: `value` in the criterion's canonical spelling, `numeric_value`
the proxy's score (P(yes), the G-Eval expected score, or P(A is better)).

Every step is idempotent: judgments are unique per (slot, criterion), a batch skips what is
stored, and judge answers are cached in the database per study (by endpoint, model, mode, prompt
and parameters), so a redelivered task or a re-run on the study costs nothing and misses
nothing. A run is resumable: `proxy_run_resume` sends what is still missing.

Judges reach the network under `judge_network_policy()` (settings EVALSTUDY_JUDGE_ALLOWED_*):
every backend built here gets it, so the check happens again on each connection a worker makes,
not only when the run is started.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from datetime import timedelta
from functools import lru_cache
from itertools import combinations
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import transaction
from django.utils import timezone

from annotation.models import Judgment
from evalstudy.models import Assignment, AssignmentSlot, Criterion, Output, Rater, Study

from .models import JudgeResponse, LearnedProxy, ProxyRun

# Bump when the way answers are turned into judgments changes: it enters every proxy
# signature, so new answers belong to a new proxy rater instead of mixing with old ones.
JUDGE_VERSION = "1"

METHOD_KINDS: dict[str, frozenset[str]] = {
    ProxyRun.Method.LATTE: frozenset({"binary", "severity"}),
    ProxyRun.Method.RUBRIC: frozenset({"likert", "binary", "severity", "categorical"}),
    ProxyRun.Method.DRPE: frozenset({"pairwise"}),
    ProxyRun.Method.LEARNED: frozenset({"binary", "severity"}),
}
# Run parameters each method understands; anything else is refused by name.
METHOD_PARAMS: dict[str, frozenset[str]] = {
    ProxyRun.Method.LATTE: frozenset({"threshold"}),
    ProxyRun.Method.RUBRIC: frozenset({"threshold"}),
    ProxyRun.Method.DRPE: frozenset({"static_roles", "dynamic_roles", "dedup_eps",
                                     "max_tokens"}),
    ProxyRun.Method.LEARNED: frozenset({"threshold"}),
}

# Upper bounds on what an editor may ask of a judge, checked when a run is started (README,
# "Proxy judges"). Editors choose the endpoint: without them a run could hold a worker for
# hours against a server that answers slowly or not at all (timeout_s x (max_retries + 1) per
# prompt, plus the waits), open thousands of connections, or generate without limit at the
# operator's cost. The Django-free backends and methods keep their own defaults and accept
# any value (their callers choose their own servers). concurrency may also reach
# EVALSTUDY_JUDGE_CONCURRENCY when that is higher (the operator's choice).
BACKEND_LIMITS: dict[str, dict[str, int | float]] = {
    "openai": {"concurrency": 64, "timeout_s": 120.0, "max_retries": 8, "backoff_s": 10.0,
               "max_backoff_s": 60.0, "max_retry_after_s": 120.0, "top_logprobs": 20,
               "answer_tokens": 16},
    "hf": {"batch_size": 256, "max_length": 8192},
}
# DRPE: dynamic roles generated per item (the paper's best was 4), static roles given, and
# tokens generated per vote (its default, 60 per role + 40, stays below this).
PARAM_LIMITS: dict[str, int] = {"dynamic_roles": 16, "static_roles": 16, "max_tokens": 4096}
# Training a learned proxy holds a worker (the GPU one for the cross-encoder) for as long as
# these say: an editor's numbers stay within what a study needs.
TRAINING_LIMITS: dict[str, float] = {"epochs": 50, "batch_size": 512, "eval_batch_size": 1024,
                                     "max_length": 512, "learning_rate": 1.0,
                                     "weight_decay": 1.0, "warmup_ratio": 1.0, "C": 1e6}


class DatabaseResponseCache:
    """The judge backends' response cache (metrics.judges.backends.ResponseCache) in the
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


# --- starting a run -------------------------------------------------------------------------

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
    """Where judge requests may go (metrics.judges.network.NetworkPolicy), from settings:
    public addresses, plus the networks in EVALSTUDY_JUDGE_ALLOWED_NETWORKS; only the hosts in
    EVALSTUDY_JUDGE_ALLOWED_HOSTS when it is set; and the origin (scheme, host, port) of
    EVALSTUDY_JUDGE_BASE_URL whatever its address, since an operator configured it. Response
    bodies stay out of error messages: those are shown to editors, who chose the URL.

    Built on every call (cheap), so a worker applies the settings it runs with now."""
    from .judges.network import NetworkPolicy

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
    from .judges.network import url_origin

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


def _check_key_env(config: dict[str, Any]) -> None:
    """A key goes only to its own endpoint: the variable `api_key_env` names must be listed in
    EVALSTUDY_JUDGE_KEY_ENVS (any other, SECRET_KEY or DATABASE_URL, would be sent as a Bearer
    token), and the origin of `base_url` must be the one that entry binds it to. Otherwise an
    editor could send the operator's key to a server of their own by naming it with their
    base_url. Checked when a run starts and again right before a worker reads the key."""
    from .judges.backends import backend_kind
    from .judges.network import url_origin

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


def _check_limits(config: dict[str, Any], params: dict[str, Any] | None = None) -> None:
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
    if "dedup_eps" in params:
        eps = params["dedup_eps"]
        if not isinstance(eps, int | float) or isinstance(eps, bool) or not 0 < eps <= 2:
            errors.append(f"params: dedup_eps (a cosine distance) must lie in (0, 2], "
                          f"got {eps!r}")
    if errors:
        raise ValidationError(errors)


def _check_base_url(url: str, *, require_resolvable: bool = True) -> None:
    """A judge URL carries no credentials (they would be stored and shown with the run) and
    passes the network policy (`judge_network_policy`): the workers send requests wherever an
    editor says, so loopback, link-local (cloud metadata), private and other non-public
    addresses are refused unless an operator allowed them.

    The same checks run again on every connection (this one gives the editor a clear message
    early). `require_resolvable=False` lets a host that does not resolve pass (a batch about to
    send leaves a passing DNS failure to its retries)."""
    from .judges.network import NetworkRefused

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


def _clean_backend(backend: dict[str, Any] | None) -> dict[str, Any]:
    """The stored backend settings: the caller's, with gaps filled from settings. The
    configured key goes only to the configured endpoint, and a key named by the caller only to
    the origin EVALSTUDY_JUDGE_KEY_ENVS binds it to (`_check_key_env`). A local model's
    directory must be one an operator allows (`model_dir_check`), checked before any file is
    read; numbers stay within BACKEND_LIMITS."""
    from .judges.backends import backend_kind
    from .services import model_dir_check

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
    if config.get("backend") == "openai":
        if not (config.get("base_url") and config.get("model")):
            raise ValidationError("backend: an OpenAI-compatible judge needs base_url and model "
                                  "(or EVALSTUDY_JUDGE_BASE_URL / EVALSTUDY_JUDGE_MODEL)")
        if not isinstance(config["base_url"], str):
            raise ValidationError("backend: base_url must be a string")
    _check_limits(config)
    _check_key_env(config)
    if config.get("backend") == "openai":
        _check_base_url(str(config["base_url"]))
    if config.get("backend") == "hf":
        if not config.get("model_path"):
            raise ValidationError("backend: a local Hugging Face judge needs model_path")
        if not isinstance(config["model_path"], str):
            raise ValidationError("backend: model_path must be a string")
        model_dir_check(config["model_path"], field="backend: model_path")
    return config


def _build_backend(config: dict[str, Any], *, study: Study | None = None):
    """The judge backend of a stored config, under the network policy (always: this is where
    editors' URLs are called), with the study's response cache when `study` is given."""
    from .judges.backends import JudgeError, backend_kind, build_backend

    # The last word before a key is read and a local model is loaded: whoever calls, a key
    # goes only to its own origin and a model directory is one an operator allows.
    _check_key_env(config)
    if backend_kind(config.get("backend")) == "hf" and config.get("model_path"):
        from .services import model_dir_check

        model_dir_check(str(config["model_path"]), field="backend: model_path")
    cache = DatabaseResponseCache(study) if study is not None else None
    try:
        return build_backend(config, cache=cache, policy=judge_network_policy())
    except (KeyError, ValueError, OSError, JudgeError) as error:
        raise ValidationError(f"backend: {error}") from None


def default_template(method: str) -> str:
    from .judges import methods

    return methods.LATTE_TEMPLATE if method == ProxyRun.Method.LATTE else ""


def _check_template(method: str, template: str) -> None:
    if not template:
        return
    if method != ProxyRun.Method.LATTE:
        raise ValidationError("template: only the LATTE prompt is editable; rubric and DRPE "
                              "prompts are built from the criterion")
    from .judges.methods import latte_prompts

    try:
        latte_prompts([("reference", "output")], template, contexts=["context"])
    except (KeyError, ValueError) as error:
        raise ValidationError(f"template: {error}") from None


def _criteria_for(study: Study, method: str, keys: Sequence[str] | None) -> list[Criterion]:
    allowed = METHOD_KINDS[method]
    criteria = {c.key: c for c in study.criteria.all()}
    if not keys:
        chosen = [c for c in criteria.values() if c.kind in allowed]
        if not chosen:
            raise ValidationError(f"criteria: study {study.slug!r} has no criterion a {method} "
                                  f"judge answers (kinds {sorted(allowed)})")
        return sorted(chosen, key=lambda c: (c.order, c.pk))
    errors = []
    for key in keys:
        if key not in criteria:
            errors.append(f"criteria: {key!r} is not a criterion of {study.slug!r} "
                          f"(known: {sorted(criteria)})")
        elif criteria[key].kind not in allowed:
            errors.append(f"criteria: {key!r} is {criteria[key].kind}; a {method} judge answers "
                          f"{sorted(allowed)}")
    if len(set(keys)) != len(keys):
        errors.append("criteria: a criterion is named twice")
    if errors:
        raise ValidationError(errors)
    return [criteria[key] for key in keys]


def _queue_for(method: str, backend: dict[str, Any], learned: LearnedProxy | None) -> str:
    if method == ProxyRun.Method.LEARNED:
        return "gpu" if learned and learned.kind == LearnedProxy.Kind.CROSS_ENCODER else "cpu"
    return "gpu" if backend.get("backend") == "hf" else "llm"


def proxy_signature(*, method: str, backend_signature: dict[str, Any], template: str,
                    params: dict[str, Any]) -> dict[str, Any]:
    """Everything a proxy's answers depend on, the decision threshold included: two thresholds
    are two proxies (their scores come from the same cached model answers)."""
    return {
        "method": method, "judge_version": JUDGE_VERSION, "backend": backend_signature,
        "template": template, "params": dict(sorted(params.items())),
    }


def proxy_rater_for(*, study: Study, method: str, signature: dict[str, Any]) -> Rater:
    """The proxy's Rater in `study`: one per signature, so a changed prompt or model is another
    rater. A rater of this study only: another owner's study running the same judge gets its
    own row, so neither can rename or read the other's."""
    digest = hashlib.sha256(json.dumps(signature, sort_keys=True, default=str).encode())
    backend = signature["backend"]
    model = str(backend.get("model") or backend.get("name") or backend.get("model_path") or "")
    model = Path(model).name if "/" in model else model
    external_id = f"{method}:{model}:{digest.hexdigest()[:10]}"[:200]
    kind = Rater.Kind.METRIC if method == ProxyRun.Method.LEARNED else Rater.Kind.LLM
    # Analyses name raters by display name: two prompts of one model must not share one.
    rater, _ = Rater.objects.get_or_create(
        study=study, kind=kind, external_id=external_id,
        defaults={"display_name": f"{method} {model} [{digest.hexdigest()[:6]}]"[:200],
                  "metadata": signature, "origin": Rater.Origin.PROXY},
    )
    return rater


def proxy_run_prepare(
    *, study: Study, method: str, criteria: Sequence[str] | None = None,
    backend: dict[str, Any] | None = None, template: str = "",
    params: dict[str, Any] | None = None, learned_proxy: LearnedProxy | None = None,
) -> dict[str, Any]:
    """Check a proxy-run request and return the run's fields; writes nothing.

    Raises ValidationError naming the field for an unknown method, criterion, parameter or
    backend setting, an invalid template, or a learned proxy that is not trained.
    """
    if method not in METHOD_KINDS:
        raise ValidationError(f"method: {method!r} is not one of {sorted(METHOD_KINDS)}")
    params = dict(params or {})
    unknown = set(params) - METHOD_PARAMS[method]
    if unknown:
        raise ValidationError(f"params: {sorted(unknown)} not understood by {method}; known: "
                              f"{sorted(METHOD_PARAMS[method])}")
    if "threshold" in params:
        try:
            threshold = float(params["threshold"])
        except (TypeError, ValueError):
            threshold = None
        if threshold is None or isinstance(params["threshold"], bool) or not 0 <= threshold <= 1:
            raise ValidationError("params: threshold must lie in [0, 1]")
    _check_limits({}, params)
    chosen = _criteria_for(study, method, criteria)
    if method == ProxyRun.Method.LEARNED:
        if learned_proxy is None or learned_proxy.status != LearnedProxy.Status.DONE:
            raise ValidationError("learned_proxy: a trained learned proxy is required")
        if template or backend:
            raise ValidationError("a learned proxy takes no backend or template")
        config: dict[str, Any] = {}
        backend_signature = learned_proxy.report.get("signature") or {
            "name": learned_proxy.name, "kind": learned_proxy.kind,
            "version": learned_proxy.version, "artifact": learned_proxy.artifact_path}
        backend_signature = {**backend_signature, "name": f"{learned_proxy.name}-v"
                             f"{learned_proxy.version}"}
        params.setdefault("threshold", learned_proxy.report.get("threshold", 0.5))
    else:
        config = _clean_backend(backend)
        _check_template(method, template)
        template = template or default_template(method)
        # The key is read where the judging happens (the `llm` workers); this process may not
        # hold it, and it never enters the signature.
        backend_signature = _build_backend(
            {k: v for k, v in config.items() if k != "api_key_env"}).signature()
    signature = proxy_signature(method=method, backend_signature=backend_signature,
                                template=template, params=params)
    units = proxy_units(study, chosen)
    return {
        "study": study, "method": method, "criteria": [c.key for c in chosen],
        "backend": config, "template": template, "params": params,
        "learned_proxy": learned_proxy, "signature": signature,
        "queue": _queue_for(method, config, learned_proxy),
        "total": sum(len(units[c.kind == "pairwise"]) for c in chosen),
    }


def proxy_run_start(*, user: Any = None, enqueue: bool = True, **request: Any) -> ProxyRun:
    """Validate the request (`proxy_run_prepare`'s arguments), record the run under its proxy
    rater, and (after commit) hand it to the workers."""
    fields = proxy_run_prepare(**request)
    with transaction.atomic():
        rater = proxy_rater_for(study=fields["study"], method=fields["method"],
                                signature=fields["signature"])
        run = ProxyRun.objects.create(
            rater=rater, created_by=user if user and user.pk else None, **fields)
        if enqueue:
            from .tasks import proxy_run_dispatch_task

            transaction.on_commit(lambda: proxy_run_dispatch_task.delay(run.pk))
    return run


# --- units, seat and dispatch ---------------------------------------------------------------

def proxy_units(study: Study, criteria: Sequence[Criterion]
                ) -> dict[bool, list[tuple[int, int | None]]]:
    """{pairwise?: [(output, output_b)]}: every output for item criteria; for pairwise ones the
    ordered pairs the design shows humans (so both judge the same units), else every pair per
    item."""
    units: dict[bool, list[tuple[int, int | None]]] = {False: [], True: []}
    if any(c.kind != "pairwise" for c in criteria):
        units[False] = [(pk, None) for pk in Output.objects.filter(item__study=study)
                        .order_by("item_id", "system_id").values_list("id", flat=True)]
    if any(c.kind == "pairwise" for c in criteria):
        shown = (AssignmentSlot.objects
                 .filter(assignment__study=study, kind=AssignmentSlot.Kind.TARGET,
                         output_b__isnull=False)
                 .exclude(assignment__source=Assignment.Source.PROXY)
                 .values_list("output_id", "output_b_id").distinct())
        # As shown to humans (A, B), both orientations where the design shows both: the
        # analysis' unit is the ordered pair, and DRPE judges both orders of each anyway.
        pairs = sorted(set(shown))
        if not pairs:
            by_item: dict[int, list[int]] = defaultdict(list)
            for pk, item in (Output.objects.filter(item__study=study)
                             .order_by("item_id", "system_id").values_list("id", "item_id")):
                by_item[item].append(pk)
            pairs = [pair for outputs in by_item.values() for pair in combinations(outputs, 2)]
        units[True] = pairs
    return units


def proxy_seat_prepare(run: ProxyRun) -> Assignment:
    """The proxy's seat on the study with one slot per unit; creates what is missing only."""
    now = timezone.now()
    with transaction.atomic():
        seat, _ = Assignment.objects.get_or_create(
            study=run.study, rater=run.rater,
            defaults={"source": Assignment.Source.PROXY, "state": Assignment.State.ACTIVE,
                      "claimed_at": now},
        )
        # Two dispatches of one proxy (a resume, a second run) must not number slots alike.
        seat = Assignment.objects.select_for_update().get(pk=seat.pk)
        _add_missing_slots(run, seat)
    return seat


def _add_missing_slots(run: ProxyRun, seat: Assignment) -> None:
    criteria = list(run.study.criteria.filter(key__in=run.criteria))
    wanted = [unit for units in proxy_units(run.study, criteria).values() for unit in units]
    existing = set(seat.slots.values_list("output_id", "output_b_id"))
    position = (seat.slots.order_by("-position").values_list("position", flat=True).first()
                if existing else -1)
    new = []
    for output, output_b in wanted:
        if (output, output_b) not in existing:
            position += 1
            new.append(AssignmentSlot(assignment=seat, position=position, output_id=output,
                                      output_b_id=output_b, kind=AssignmentSlot.Kind.TARGET))
    AssignmentSlot.objects.bulk_create(new, batch_size=2000)


def _missing(run: ProxyRun, seat: Assignment, slot_ids: Sequence[int] | None = None
             ) -> dict[int, list[Criterion]]:
    """slot id -> the run's criteria it still lacks a judgment for."""
    criteria = list(run.study.criteria.filter(key__in=run.criteria))
    slots = seat.slots.all()
    if slot_ids is not None:
        slots = slots.filter(pk__in=slot_ids)
    slot_pairs = list(slots.values_list("id", "output_b_id"))
    have = set(Judgment.objects.filter(slot__in=[pk for pk, _ in slot_pairs],
                                       criterion__in=criteria)
               .values_list("slot_id", "criterion_id"))
    missing: dict[int, list[Criterion]] = {}
    for pk, output_b in slot_pairs:
        lacking = [c for c in criteria if (c.kind == "pairwise") == (output_b is not None)
                   and (pk, c.pk) not in have]
        if lacking:
            missing[pk] = lacking
    return missing


def proxy_run_dispatch(run: ProxyRun, *, send: Callable[[str, list[int]], None]) -> int:
    """Prepare the seat, mark the run started and send the batches still to judge with
    `send(queue, slot_ids)`; returns the number of batches. Finishes at once when complete."""
    seat = proxy_seat_prepare(run)
    todo = sorted(_missing(run, seat))
    size = settings.EVALSTUDY_PROXY_BATCH_SIZE
    now = timezone.now()
    # A resumed run tries its unreadable answers again.
    ProxyRun.objects.filter(pk=run.pk).update(
        status=ProxyRun.Status.RUNNING, started_at=run.started_at or now, heartbeat_at=now,
        error="", unreadable={}, finished_at=None,
    )
    batches = [todo[start:start + size] for start in range(0, len(todo), size)]
    for batch in batches:
        send(run.queue, batch)
    proxy_run_refresh(run)
    return len(batches)


# --- judging one batch ----------------------------------------------------------------------

def _unit_texts(slot_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    texts: dict[int, dict[str, Any]] = {}
    for pk, reference, context, metadata, text, text_b in (
        AssignmentSlot.objects.filter(pk__in=slot_ids).values_list(
            "id", "output__item__reference", "output__item__context", "output__item__metadata",
            "output__text", "output_b__text")
    ):
        texts[pk] = {"reference": reference, "context": context, "metadata": metadata,
                     "output": text, "output_b": text_b}
    return texts


def _decide(criterion: Criterion, score: float, threshold: float) -> str:
    """The canonical answer for a P(yes) score. LATTE's binary reading of the severity scale:
    a preserved meaning is stored as 0 (fully preserved), a lost one as 2."""
    preserved = score >= threshold
    if criterion.kind == "severity":
        return "0" if preserved else "2"
    return "yes" if preserved else "no"


def _answers_latte(run, backend, criterion, units, texts):
    from .judges.methods import latte_judge

    pairs = [(texts[pk]["reference"] or texts[pk]["context"], texts[pk]["output"])
             for pk in units]
    threshold = float(run.params.get("threshold", 0.5))
    completions = latte_judge(backend, pairs, template=run.template,
                              contexts=[texts[pk]["context"] for pk in units])
    for pk, completion in zip(units, completions, strict=True):
        score = completion.p_yes
        if score is None:
            yield (pk, None, None, completion.error or f"no answer read ({completion.source})",
                   completion.source)
        else:
            yield pk, _decide(criterion, score, threshold), score, "", completion.source


def _answers_rubric(run, backend, criterion, units, texts):
    from .judges.methods import rubric_judge

    threshold = float(run.params.get("threshold", 0.5))
    spec = _criterion_spec(criterion)
    results = rubric_judge(
        backend, [texts[pk]["output"] for pk in units], criterion=spec["prompt"],
        scale=spec["scale"], definition=spec["description"],
        references=[texts[pk]["reference"] for pk in units],
        contexts=[texts[pk]["context"] for pk in units],
    )
    for pk, result in zip(units, results, strict=True):
        completion = result.completion
        if result.answer is None:
            yield (pk, None, None, completion.error or f"no answer read ({completion.source})",
                   completion.source)
            continue
        probs = result.probs or {}
        answer = str(result.answer)
        if criterion.kind == "binary":
            score = probs.get("yes")
            value = _decide(criterion, score, threshold) if score is not None else answer
        elif criterion.kind == "severity":
            # The analysis reads a proxy's score as P(meaning preserved): levels 0 and 1.
            score = (probs.get("0", 0.0) + probs.get("1", 0.0)) if probs else None
            value = answer
        elif criterion.kind == "likert":
            score, value = result.expected, answer
        else:  # categorical: the most likely option and its probability
            score, value = probs.get(answer), answer
        yield pk, value, score, "", completion.source


def _criterion_spec(criterion: Criterion) -> dict[str, Any]:
    """The criterion as the rubric prompt shows it: its question, help text and scale points
    (canonical values with their labels)."""
    choices = [choice for choice in criterion.rule.choices() or [] if choice != "tie"]
    labels = list(criterion.labels or [])
    if criterion.kind == "severity" and not labels:
        from evalstudy.criteria import SEVERITY_DEFAULT_LABELS

        labels = list(SEVERITY_DEFAULT_LABELS)
    return {
        "prompt": criterion.prompt, "description": criterion.description,
        "scale": {choice: (labels[i] if i < len(labels) else "")
                  for i, choice in enumerate(choices)},
    }


def _answers_drpe(run, backend, criterion, units, texts):
    from .judges import methods
    from .judges.backends import JudgeError

    static = ([methods.Role(role["type"], role["description"])
               for role in run.params["static_roles"]]
              if run.params.get("static_roles") else list(methods.STATIC_ROLES))
    k = int(run.params.get("dynamic_roles", 4))
    options = {"eps": float(run.params["dedup_eps"])} if "dedup_eps" in run.params else {}
    from .services import default_model_path

    embed = methods.sentence_embedder(default_model_path())
    max_tokens = run.params.get("max_tokens")
    roles_by_content: dict[str, list] = {}
    for pk in units:
        content = texts[pk]["context"] or texts[pk]["reference"]
        if content not in roles_by_content:
            try:
                roles_by_content[content] = methods.drpe_roles(
                    backend, content, static=static, k=k, embed=embed, **options)
            except JudgeError as error:
                yield pk, None, None, str(error), "error"
                continue
        result = methods.drpe_judge(backend, roles_by_content[content], content,
                                    texts[pk]["output"], texts[pk]["output_b"],
                                    max_tokens=max_tokens)
        if result.p_a is None or result.winner is None:
            yield (pk, None, None, "; ".join(result.errors) or "no role vote could be read",
                   "unparsed")
            continue
        if result.winner == "tie" and not criterion.allow_tie:
            value = "A" if result.p_a >= 0.5 else "B"
        else:
            value = result.winner
        yield pk, value, result.p_a, "", "/".join(sorted(set(result.weighting.values()))) or "votes"


@lru_cache(maxsize=4)
def _learned_model(artifact_path: str):
    """A trained proxy, loaded once per worker process (artefact versions never change)."""
    from .learned import load_artifact

    return load_artifact(artifact_path)


def _answers_learned(run, backend, criterion, units, texts):
    from .learned import Example

    trained = _learned_model(run.learned_proxy.artifact_path)
    examples = [Example(reference=texts[pk]["reference"] or texts[pk]["context"],
                        output=texts[pk]["output"], label=None,
                        group=texts[pk]["reference"], key=pk) for pk in units]
    threshold = float(run.params.get("threshold", 0.5))
    for pk, score in zip(units, trained.predict_proba(examples), strict=True):
        yield pk, _decide(criterion, float(score), threshold), float(score), "", "model"


ANSWERERS = {
    ProxyRun.Method.LATTE: _answers_latte,
    ProxyRun.Method.RUBRIC: _answers_rubric,
    ProxyRun.Method.DRPE: _answers_drpe,
    ProxyRun.Method.LEARNED: _answers_learned,
}


def proxy_batch_judge(*, run_id: int, slot_ids: Sequence[int]) -> int:
    """Judge the slots' missing (slot, criterion) answers; returns the judgments stored.

    Safe to run twice and concurrently with itself: stored judgments are skipped, inserts
    ignore conflicts on (slot, criterion), and answers come from the cache the second time.
    An answer that cannot be read is recorded in `unreadable`, not stored.
    """
    run = ProxyRun.objects.select_related("study", "rater", "learned_proxy").get(pk=run_id)
    ProxyRun.objects.filter(pk=run_id).update(heartbeat_at=timezone.now())
    seat = Assignment.objects.get(study=run.study, rater=run.rater)
    missing = _missing(run, seat, slot_ids)
    if not missing:
        proxy_run_refresh(run)
        return 0
    # Settings may have changed since the run was started, and a run stored before a check
    # existed was never checked: a URL the policy now refuses, a key bound to another origin
    # or a model directory no longer allowed fails the run with the reason, before the key is
    # read or a file of the model opened, not every answer with the same one. (Each connection
    # is checked against the policy again anyway, which is what stops DNS rebinding.)
    try:
        _check_run_on_worker(run)
    except ValidationError as error:
        proxy_run_fail(run_id=run.pk, error=" ".join(error.messages))
        return 0
    texts = _unit_texts(list(missing))
    backend = (None if run.method == ProxyRun.Method.LEARNED
               else _build_backend(run.backend, study=run.study))
    by_criterion: dict[int, list[int]] = defaultdict(list)
    criteria = {}
    for pk, lacking in missing.items():
        for criterion in lacking:
            by_criterion[criterion.pk].append(pk)
            criteria[criterion.pk] = criterion
    now = timezone.now()
    rows, failures = [], {}
    # Where answers came from ("logprobs", "logits", or "parsed" when the server gave no
    # probabilities and the answer text was read): reported with the run's usage.
    sources: dict[str, int] = defaultdict(int)
    for criterion_pk, units in by_criterion.items():
        criterion = criteria[criterion_pk]
        answers = ANSWERERS[run.method](run, backend, criterion, units, texts)
        for pk, value, score, error, source in answers:
            sources[f"answers_{source}"] += 1
            if value is None:
                failures[f"{pk}:{criterion.key}"] = error[:300]
                continue
            rows.append(Judgment(slot_id=pk, criterion=criterion, rater=run.rater, value=value,
                                 numeric_value=score, submitted_at=now))
    Judgment.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
    _complete_slots(seat, run)
    _record_usage(run.pk, {**(backend.usage.as_dict() if backend else {}), **sources},
                  failures)
    proxy_run_refresh(run)
    return len(rows)


def _check_run_on_worker(run: ProxyRun) -> None:
    """The start's checks of what a run will reach, again with this worker's settings:
    network policy, key origin, model directories (ValidationError saying which failed)."""
    from .judges.backends import backend_kind
    from .services import model_dir_check

    backend = run.backend or {}
    kind = backend_kind(backend.get("backend"))
    if kind == "openai" and backend.get("base_url"):
        _check_base_url(str(backend["base_url"]), require_resolvable=False)
    if backend:
        _check_key_env(backend)
    if kind == "hf" and backend.get("model_path"):
        model_dir_check(str(backend["model_path"]), field="backend: model_path")
    learned = run.learned_proxy
    if run.method == ProxyRun.Method.LEARNED and learned is not None:
        encoder = (learned.report.get("params") or {}).get("model_path")
        if encoder and learned.kind != LearnedProxy.Kind.CROSS_ENCODER:
            try:
                model_dir_check(str(encoder), field="the learned proxy's model_path")
            except ValidationError:
                # A regression proxy reads the encoder it was trained on where that exists
                # here, else the default (metrics.learned.artifacts): an artefact trained on
                # another host names that host's directory, which is no concern here.
                if (Path(str(encoder)) / "config.json").is_file():
                    raise


def _complete_slots(seat: Assignment, run: ProxyRun) -> None:
    """Mark the slots that now hold every answer of the run as completed."""
    still_missing = list(_missing(run, seat))
    seat.slots.filter(completed_at__isnull=True).exclude(pk__in=still_missing).update(
        completed_at=timezone.now())


def _record_usage(run_id: int, usage: dict[str, Any], failures: dict[str, str]) -> None:
    with transaction.atomic():
        run = ProxyRun.objects.select_for_update().get(pk=run_id)
        merged = dict(run.usage)
        for name, amount in usage.items():
            if isinstance(amount, int | float):
                merged[name] = round(merged.get(name, 0) + amount, 4)
        run.usage = merged
        run.unreadable = {**run.unreadable, **failures}
        run.heartbeat_at = timezone.now()
        run.save(update_fields=["usage", "unreadable", "heartbeat_at"])


def proxy_judgments(run: ProxyRun):
    """The run's judgments: its rater's answers to its criteria on this study."""
    return Judgment.objects.filter(rater=run.rater, slot__assignment__study=run.study,
                                   criterion__key__in=run.criteria)


def proxy_run_refresh(run: ProxyRun) -> ProxyRun:
    """Recount progress from the stored judgments (the truth); finish the run when every unit
    has an answer or a recorded failure."""
    answered = set(proxy_judgments(run).values_list("slot_id", "criterion__key"))
    done = len(answered)
    with transaction.atomic():
        run = ProxyRun.objects.select_for_update().get(pk=run.pk)
        # A unit that failed once and was answered later (a redelivered batch) is done.
        failed = sum(1 for key in run.unreadable
                     if (int(key.split(":", 1)[0]), key.split(":", 1)[1]) not in answered)
        run.done, run.failed = done, failed
        fields = ["done", "failed"]
        if done + failed >= run.total and run.status == ProxyRun.Status.RUNNING:
            run.status = ProxyRun.Status.DONE
            run.finished_at = timezone.now()
            fields += ["status", "finished_at"]
            if failed:
                run.error = f"{failed} answers could not be read; resume the run to retry them"
                fields.append("error")
        run.save(update_fields=fields)
    return run


def proxy_run_resume(run: ProxyRun) -> ProxyRun:
    """Send what is still missing (after a failure, a stop, or unreadable answers)."""
    from .tasks import proxy_run_dispatch_task

    if run.status == ProxyRun.Status.RUNNING:
        raise ValidationError(f"proxy run {run.pk} is still running; resume it once it is done "
                              "or failed (a stalled run is failed by the beat scheduler)")
    ProxyRun.objects.filter(pk=run.pk).update(status=ProxyRun.Status.PENDING)
    transaction.on_commit(lambda: proxy_run_dispatch_task.delay(run.pk))
    run.refresh_from_db()
    return run


def proxy_run_fail(*, run_id: int, error: str) -> None:
    ProxyRun.objects.filter(pk=run_id).update(
        status=ProxyRun.Status.FAILED, error=error[:5000], finished_at=timezone.now())


# --- thresholds and LATTEScore --------------------------------------------------------------

def proxy_scores_with_labels(run: ProxyRun, criterion_key: str):
    """(output, item reference, proxy score, human majority label) for every output that both
    the proxy scored and the humans judged with a clear majority."""
    import pandas as pd

    from analysis.stats.pipeline import binary_label

    criterion = run.study.criteria.get(key=criterion_key)
    human = (Judgment.objects.filter(slot__assignment__study=run.study, criterion=criterion,
                                     rater__kind__in=Rater.HUMAN_KINDS,
                                     slot__output__isnull=False)
             .values_list("slot__output_id", "value"))
    labels = pd.DataFrame(list(human), columns=["output", "value"])
    labels["label"] = labels["value"].map(lambda v: binary_label(criterion.kind, v))
    share = labels.dropna(subset=["label"]).groupby("output")["label"].mean()
    majority = share[share != 0.5].gt(0.5).astype(int).rename("label")
    scores = pd.DataFrame(list(
        proxy_judgments(run).filter(criterion=criterion).values_list(
            "slot__output_id", "slot__output__item__reference", "numeric_value")),
        columns=["output", "reference", "score"]).dropna().set_index("output")
    return scores.join(majority, how="inner")


def proxy_threshold_choose(run: ProxyRun, *, criterion_key: str, target_precision: float = 0.9,
                           dev_fraction: float = 0.5, seed: int = 0, apply: bool = True,
                           enqueue: bool = True, user: Any = None) -> dict[str, Any]:
    """Pick the decision threshold on a dev split (no reference shared with the test split)
    for `target_precision` and report precision/recall on the held-out test split (LATTE: 0.85
    gave 90 % precision).

    With `apply`, start a new run of the same judge at that threshold on this criterion
    (`report["run"]`): the decision is part of a proxy's identity, so the first run's answers
    stay as they were, and the new one costs no model call (stored scores, cached answers).

    The choice is recorded (`threshold_choice_record`) on the new run's rater, or without
    `apply` on this run's: the dev outputs took part in choosing the threshold, so the
    analysis leaves them out of every decision-based figure of a rater deciding at it."""
    import numpy as np

    from analysis.stats.validity import threshold_for_precision

    if criterion_key not in run.criteria:
        raise ValidationError(f"criterion: {criterion_key!r} is not one of this run's "
                              f"criteria {run.criteria}")
    criterion = run.study.criteria.get(key=criterion_key)
    if criterion.kind not in ("binary", "severity") or run.method == ProxyRun.Method.DRPE:
        raise ValidationError(f"criterion: {criterion_key!r} is {criterion.kind}; a threshold "
                              "needs a binary or severity criterion")
    if run.method == ProxyRun.Method.RUBRIC and criterion.kind == "severity":
        raise ValidationError("criterion: a rubric judge answers the most likely severity "
                              "level; a threshold applies to its binary criteria only")
    table = proxy_scores_with_labels(run, criterion_key)
    references = sorted(table["reference"].unique())
    if len(references) < 4 or table["label"].nunique() < 2:
        raise ValidationError("too few human-labelled outputs (or one class only) to choose a "
                              "threshold")
    rng = np.random.default_rng(seed)
    rng.shuffle(references)
    dev_refs = set(references[: max(1, round(len(references) * dev_fraction))])
    dev = table[table["reference"].isin(dev_refs)]
    test = table[~table["reference"].isin(dev_refs)]
    choice = threshold_for_precision(dev["score"].to_numpy(), dev["label"].to_numpy(),
                                     target_precision=target_precision)
    if choice.threshold is None:
        raise ValidationError(f"no threshold reaches precision {target_precision} on the dev "
                              f"split ({len(dev)} outputs); lower the target")
    threshold = float(choice.threshold)

    def rates(frame):
        predicted = frame["score"] >= threshold
        tp = int((predicted & (frame["label"] == 1)).sum())
        fp = int((predicted & (frame["label"] == 0)).sum())
        fn = int((~predicted & (frame["label"] == 1)).sum())
        return {"n": len(frame), "precision": tp / (tp + fp) if tp + fp else None,
                "recall": tp / (tp + fn) if tp + fn else None}

    dev_outputs = sorted(int(pk) for pk in dev.index)
    report: dict[str, Any] = {
        "criterion": criterion_key, "target_precision": target_precision,
        "threshold": threshold, "dev": rates(dev), "test": rates(test),
        "dev_references": len(dev_refs), "test_references": len(references) - len(dev_refs),
        "dev_outputs": dev_outputs}
    decided_signature = {**run.signature,
                         "params": {**(run.signature.get("params") or {}), "threshold": threshold}}
    record = {
        "criterion": criterion_key, "threshold": threshold, "target_precision": target_precision,
        "dev_fraction": dev_fraction, "seed": seed, "dev_outputs": dev_outputs,
        "from_run": run.pk, "chosen_at": timezone.now().isoformat(),
        "identity": decision_identity(decided_signature),
    }
    rater_id = run.rater_id
    if apply:
        decided = proxy_run_start(
            study=run.study, method=run.method, criteria=[criterion_key],
            backend=run.backend or None, template=run.template,
            params={**run.params, "threshold": threshold}, learned_proxy=run.learned_proxy,
            user=user, enqueue=enqueue)
        report["run"] = decided.pk
        rater_id = decided.rater_id
    threshold_choice_record(rater_id=rater_id, record=record)
    return report


# The threshold a judge applies when its run names none (_answers_latte, _answers_rubric).
DEFAULT_THRESHOLD = 0.5
# The signature fields a proxy's decisions depend on (a rater's metadata may hold more).
_SIGNATURE_FIELDS = ("method", "judge_version", "backend", "template", "params")


def decision_identity(signature: dict[str, Any]) -> str:
    """A digest of what a proxy's decisions depend on: its signature with the threshold it
    decides at (DEFAULT_THRESHOLD where the run named none). A threshold choice records the
    identity of the decisions it produced, and the analysis finds it again on whichever rater
    decides that way: the new run's, or a later run started by hand at that threshold."""
    fields = {name: signature.get(name) for name in _SIGNATURE_FIELDS}
    params = dict(fields.get("params") or {})
    params["threshold"] = float(params.get("threshold", DEFAULT_THRESHOLD))
    fields["params"] = params
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def threshold_choice_record(*, rater_id: int, record: dict[str, Any]) -> None:
    """Append a threshold choice (criterion, threshold, dev outputs, identity) to the rater's
    metadata["threshold_choices"]. Under a row lock: two choices at once both stay."""
    with transaction.atomic():
        rater = Rater.objects.select_for_update().get(pk=rater_id)
        metadata = dict(rater.metadata or {})
        metadata["threshold_choices"] = [*(metadata.get("threshold_choices") or []), record]
        rater.metadata = metadata
        rater.save(update_fields=["metadata"])


def latte_scores(run: ProxyRun, *, criterion_key: str, by: str = "system") -> list[dict]:
    """LATTEScore per group = 100 x share of the group's outputs the proxy judged meaning-
    preserved. `by`: "system", "item", or any item metadata field (e.g. "speaker")."""
    from analysis.stats.pipeline import binary_label

    criterion = run.study.criteria.get(key=criterion_key)
    groups: dict[str, list[float]] = defaultdict(list)
    rows = proxy_judgments(run).filter(criterion=criterion).values_list(
        "value", "slot__output__system__name", "slot__output__item__external_id",
        "slot__output__item__metadata")
    for value, system, item, metadata in rows:
        if by == "system":
            group = system
        elif by == "item":
            group = item
        else:
            group = (metadata or {}).get(by)
            if group is None:
                continue
        label = binary_label(criterion.kind, value)
        if label is not None:
            groups[str(group)].append(label)
    from analysis.stats.validity import latte_score

    return [{"group": group, "n": len(labels), "latte_score": round(latte_score(labels), 2)}
            for group, labels in sorted(groups.items())]


# --- learned proxies ------------------------------------------------------------------------

def learned_examples(study: Study, criterion_key: str) -> list:
    """One Example per output with a clear human majority on the criterion's binary reading
    (ties are left out): the training data of a learned proxy."""
    from analysis.stats.pipeline import binary_label

    from .learned import Example

    try:
        criterion = study.criteria.get(key=criterion_key)
    except Criterion.DoesNotExist:
        raise ValidationError(f"criterion: {criterion_key!r} is not a criterion of "
                              f"{study.slug!r}") from None
    if criterion.kind not in METHOD_KINDS[ProxyRun.Method.LEARNED]:
        raise ValidationError(f"criterion: {criterion_key!r} is {criterion.kind}; a learned "
                              "proxy needs a binary or severity criterion")
    votes: dict[int, list[float]] = defaultdict(list)
    texts = {}
    for output, reference, context, text, value in (
        Judgment.objects.filter(slot__assignment__study=study, criterion=criterion,
                                rater__kind__in=Rater.HUMAN_KINDS, slot__output__isnull=False)
        .values_list("slot__output_id", "slot__output__item__reference",
                     "slot__output__item__context", "slot__output__text", "value")
    ):
        label = binary_label(criterion.kind, value)
        if label is not None:
            votes[output].append(label)
            texts[output] = (reference or context, text)
    examples = []
    for output, labels in sorted(votes.items()):
        share = sum(labels) / len(labels)
        if share != 0.5:
            reference, text = texts[output]
            examples.append(Example(reference=reference, output=text, label=int(share > 0.5),
                                    group=reference, key=output))
    return examples


def learned_proxy_start(*, study: Study, criterion_key: str, kind: str, name: str = "",
                        params: dict[str, Any] | None = None, user: Any = None,
                        enqueue: bool = True) -> LearnedProxy:
    """Record a training request (checked now: criterion, kind, enough labelled outputs) and
    hand it to a worker (`gpu` queue for the cross-encoder, `cpu` otherwise)."""
    if kind not in LearnedProxy.Kind.values:
        raise ValidationError(f"kind: {kind!r} is not one of {LearnedProxy.Kind.values}")
    learned_proxy_check(study=study, params=params or {})
    examples = learned_examples(study, criterion_key)
    if len(examples) < 20:
        raise ValidationError(f"only {len(examples)} outputs of {study.slug!r} have a clear "
                              f"human majority on {criterion_key!r}; at least 20 are needed")
    name = name or f"{study.slug}-{criterion_key}-{kind}".replace("_", "-")
    with transaction.atomic():
        proxy = LearnedProxy.objects.create(
            name=name, kind=kind, study=study, criterion_key=criterion_key,
            params=params or {}, total=len(examples),
            created_by=user if user and user.pk else None,
        )
        if enqueue:
            from .tasks import learned_proxy_train_cpu_task, learned_proxy_train_gpu_task

            task = (learned_proxy_train_gpu_task if kind == LearnedProxy.Kind.CROSS_ENCODER
                    else learned_proxy_train_cpu_task)
            transaction.on_commit(lambda: task.delay(proxy.pk))
    return proxy


def learned_proxy_train(proxy_id: int) -> LearnedProxy:
    """Train, pick the threshold on dev, test, and save the versioned artefact; the row gets
    the artefact's path, version and manifest (split sizes, threshold, AUCs) as its report.

    The manifest's `split_keys` are the output ids of each split (`learned_examples` keys
    its examples by output): the analysis scores the proxy only on outputs outside train and
    dev (`analysis.selectors.proxy_raters`)."""
    from .learned import save_artifact, train_proxy

    proxy = LearnedProxy.objects.select_related("study").get(pk=proxy_id)
    if proxy.status == LearnedProxy.Status.DONE:
        return proxy  # redelivered: trained already
    # Training may outlast the broker's visibility timeout, which then hands the task to a
    # second worker: while the first one's heartbeat is fresh, leave the training to it.
    fresh = timezone.now() - timedelta(minutes=5)
    claimed = LearnedProxy.objects.filter(pk=proxy.pk).exclude(
        status=LearnedProxy.Status.RUNNING, heartbeat_at__gte=fresh).update(
        status=LearnedProxy.Status.RUNNING, started_at=timezone.now(),
        heartbeat_at=timezone.now())
    if not claimed:
        return proxy
    # Checked again here, before a file of it is read: the study's encoder_path may have
    # changed, and a proxy recorded before the check existed was never checked.
    learned_proxy_check(study=proxy.study, params=proxy.params)
    params = dict(proxy.params)
    seed = int(params.pop("seed", 0))
    target_precision = float(params.pop("target_precision", 0.9))
    params.setdefault("model_path", _encoder_for(proxy.study))
    try:
        with _heartbeat(LearnedProxy, proxy.pk):
            trained = train_proxy(proxy.kind,
                                  learned_examples(proxy.study, proxy.criterion_key),
                                  params=params, seed=seed, target_precision=target_precision)
    except ValueError as error:  # bad parameter, too few groups, a one-class split
        raise ValidationError(str(error)) from None
    path = save_artifact(trained, settings.EVALSTUDY_PROXY_DIR, proxy.name)
    manifest = json.loads((Path(path) / "manifest.json").read_text())
    now = timezone.now()
    LearnedProxy.objects.filter(pk=proxy.pk).update(
        artifact_path=str(path), version=trained.version,
        report=_jsonable({**manifest, "signature": trained.signature()}), done=proxy.total,
        status=LearnedProxy.Status.DONE, error="", finished_at=now, heartbeat_at=now)
    proxy.refresh_from_db()
    return proxy


@contextmanager
def _heartbeat(model, pk: int, every_seconds: float = 60.0):
    """Beat a BackgroundRun's heartbeat from a thread while one long call runs (training has
    no batches to beat between), so the stale-run check does not fail it."""
    stop = threading.Event()

    def beat() -> None:
        from django.db import connection

        try:
            while not stop.wait(every_seconds):
                model.objects.filter(pk=pk).update(heartbeat_at=timezone.now())
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=beat, name=f"heartbeat-{pk}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def learned_proxy_check(*, study: Study, params: dict[str, Any]) -> None:
    """The encoder a learned proxy would train from (`params["model_path"]`, else the study's
    encoder_path) must be a model directory an operator allows: checked when training is
    requested (`learned_proxy_start`, the admin form) and again before it starts."""
    from .services import model_dir_check

    if not isinstance(params, dict):
        raise ValidationError("params: must be a JSON object")
    for name, bound in TRAINING_LIMITS.items():
        value = params.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                0 < value <= bound):
            raise ValidationError(f"params: {name} must be a number above 0 and at most "
                                  f"{bound:g}, got {value!r}")
    path = params.get("model_path")
    if path not in (None, ""):  # unset: the study's encoder, else the embedded default
        if not isinstance(path, str):
            raise ValidationError("params: model_path must be a string")
        model_dir_check(path, field="params: model_path")
    elif study.encoder_path:
        model_dir_check(study.encoder_path, field="encoder_path (the study's)")


def _encoder_for(study: Study | None) -> str:
    from .services import default_model_path

    return (study.encoder_path if study and study.encoder_path else "") or default_model_path()


def _jsonable(value: Any) -> Any:
    from analysis.stats.pipeline import to_jsonable

    return json.loads(json.dumps(to_jsonable(value), default=str))


def learned_proxy_fail(*, proxy_id: int, error: str) -> None:
    LearnedProxy.objects.filter(pk=proxy_id).update(
        status=LearnedProxy.Status.FAILED, error=error[:5000], finished_at=timezone.now())
