"""The permission matrix: every route under /api/v1/, every method, every role, on the role's own
study and on someone else's, answers exactly the expected status.

Roles: anonymous; rater (an account with a rater profile, no study role); viewer, editor and
owner of study A; "other", a researcher who owns study B; admin (superuser). "own" requests
go to study A (B for "other"); "other" requests go to the study the role has nothing to do with
(B; A for "other"). Every request authenticates with a real API token.

The routes are read from the URL resolver: a route or method missing from CASES fails
`test_every_route_and_method_is_in_the_matrix`, so a new endpoint cannot skip the matrix.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from django.core.cache import cache
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from analysis.models import AnalysisRun
from evalstudy.importers import spec_to_document, study_to_spec
from evalstudy.models import AssignmentSlot, Rater, Study, StudyCollaborator
from evalstudy.permissions import ROLE_RANK
from evalstudy.services import assignment_next, study_open
from evalstudy.tokens import api_token_create
from metrics.models import MetricRun
from proxies.models import LearnedProxy, ProxyRun
from tests.factories import UserFactory, invite, make_study

ROLES = ("anonymous", "rater", "viewer", "editor", "owner", "other", "admin")
# The role each user has on study A and on study B.
ROLE_ON = {
    "viewer": ("viewer", None), "editor": ("editor", None), "owner": ("owner", None),
    "other": (None, "owner"), "admin": ("admin", "admin"), "rater": (None, None),
}


@dataclass
class World:
    a: Study
    b: Study
    tokens: dict[str, str]
    raters: dict[str, Rater]  # "A"/"B": a rater enrolled in that study
    # "A"/"B": (metric run id, analysis run id, proxy run id, learned proxy id)
    runs: dict[str, tuple[int, int, int, int]]
    rater_user_rater: Rater
    other_slot: dict[str, int] = field(default_factory=dict)

    def study(self, role: str, which: str) -> Study:
        """The study a request of `role` targets: "own" is A (B for other)."""
        own = self.b if role == "other" else self.a
        return own if which == "own" else (self.a if own is self.b else self.b)


@pytest.fixture
def access_world(db) -> World:
    users = {
        "owner": UserFactory(username="owner", is_staff=True),
        "editor": UserFactory(username="editor", is_staff=True),
        "viewer": UserFactory(username="viewer", is_staff=True),
        "other": UserFactory(username="other", is_staff=True),
        "admin": UserFactory(username="admin", is_staff=True, is_superuser=True),
        "rater": UserFactory(username="slp"),
    }
    UserFactory(username="helper", is_staff=True)
    a = make_study(n_items=2, n_systems=2, owner=users["owner"], slug="study-a")
    b = make_study(n_items=2, n_systems=2, owner=users["other"], slug="study-b")
    StudyCollaborator.objects.create(study=a, user=users["editor"], role="editor")
    StudyCollaborator.objects.create(study=a, user=users["viewer"], role="viewer")
    for study in (a, b):
        StudyCollaborator.objects.create(study=study, user=UserFactory(username="helper"),
                                         role="viewer")
    raters = {}
    for label, study in (("A", a), ("B", b)):
        rater = invite(study, external_id=f"PID-{label}")
        raters[label] = rater
    runs = {}
    for label, study in (("A", a), ("B", b)):
        metric = MetricRun.objects.create(study=study, metrics=["wer"])
        analysis = AnalysisRun.objects.create(
            study=study, status="done", result={"ok": True}, report_html="<p>report</p>",
            report_pdf=b"%PDF-1.4 test")
        judge = Rater.objects.create(kind="llm", external_id=f"latte:judge:{label}",
                                     study=study)
        proxy = ProxyRun.objects.create(study=study, rater=judge, method="latte",
                                        criteria=["usable"], status="done")
        learned = LearnedProxy.objects.create(
            name=f"learned-{label}", kind="wer_bertscore", study=study, criterion_key="usable",
            status="done", version=1, report={"threshold": 0.5})
        runs[label] = (metric.pk, analysis.pk, proxy.pk, learned.pk)
    tokens = {role: api_token_create(user=user)[1] for role, user in users.items()}
    return World(a=a, b=b, tokens=tokens, raters=raters, runs=runs,
                 rater_user_rater=invite(a, kind="slp", user=users["rater"]))


def open_a_with_seats(access_world: World) -> None:
    """Study A open; the rater account and another rater each hold a seat."""
    study_open(study=access_world.a)
    assignment_next(study=access_world.a, rater=access_world.rater_user_rater)
    someone = invite(access_world.a, external_id="PID-someone")
    access_world.other_slot["id"] = assignment_next(study=access_world.a, rater=someone).pk


def my_current_slot(access_world: World) -> int:
    return (AssignmentSlot.objects.filter(assignment__rater=access_world.rater_user_rater,
                                          completed_at__isnull=True)
            .order_by("position").first().pk)


# --- the matrix -----------------------------------------------------------------------------
@dataclass
class Case:
    """One route and method. `need`: the minimum study role ("viewer".."admin"); or a kind of
    route with its own rule: "public", "signed_in", "researcher", "rater", "import"."""

    need: str
    ok: int
    kwargs: Callable[[World, str, str], dict] = lambda w, role, which: {
        "slug": w.study(role, which).slug}
    body: Callable[[World, str, str], object] | None = None
    prepare: Callable[[World], None] | None = None
    both_studies: bool = True  # False: the route has no study (one request per role)


def _run(kind: int):
    def kwargs(w: World, role: str, which: str) -> dict:
        study = w.study(role, which)
        return {"pk": w.runs["A" if study == w.a else "B"][kind]}
    return kwargs


def _judge_version_of(study: Study):
    """Version 1 of a LATTE prompt on the study's `usable` criterion (made on first use)."""
    from proxies.models import JudgePromptVersion

    version, _ = JudgePromptVersion.objects.get_or_create(
        study=study, criterion=study.criteria.get(key="usable"), method="latte", number=1,
        defaults={"split": {"seed": 0, "dev_fraction": 0.5, "dev_items": []}})
    return version


def _rater_of(w: World, role: str, which: str) -> dict:
    study = w.study(role, which)
    return {"slug": study.slug, "pk": w.raters["A" if study == w.a else "B"].pk}


def _rater_study(w: World, role: str, which: str) -> dict:
    return {"slug": (w.a if which == "own" else w.b).slug}


def _rater_slot(w: World, role: str, which: str) -> dict:
    return {"slot_id": my_current_slot(w) if which == "own" else w.other_slot["id"]}


def _spec_of(w: World, role: str, which: str) -> dict:
    document = spec_to_document(study_to_spec(w.study(role, which)))
    document["study"]["title"] = "Changed by import"
    return document


def _item_of(w: World, role: str, which: str) -> dict:
    return {"slug": w.study(role, which).slug, "external_id": "item-000"}


def _adjudication_of(w: World, role: str, which: str) -> dict:
    from evalstudy.models import Output

    output = Output.objects.filter(item__study=w.study(role, which)).order_by("pk").first()
    return {"criterion": "usable", "output": output.pk, "value": "yes"}


def adaptive_with_plans(access_world: World) -> None:
    """Both studies in the adaptive design, each with a draft plan and one look made."""
    from evalstudy.models import StoppingCheck
    from evalstudy.services import study_plan_save

    for study in (access_world.a, access_world.b):
        Study.objects.filter(pk=study.pk).update(design=Study.Design.ADAPTIVE)
        study.refresh_from_db()
        plan = study_plan_save(study=study, fields={"stop_on_decision": True})
        StoppingCheck.objects.create(plan=plan, look=1, judgments=100,
                                     information_fraction=0.02, alpha_spent=0.0, boundary=8.0,
                                     nominal_alpha=1e-15)


def with_media(access_world: World) -> None:
    """Item item-000 of both studies has a media file (its row: no file is read)."""
    from evalstudy.models import Item, ItemMedia

    for study in (access_world.a, access_world.b):
        ItemMedia.objects.create(
            item=Item.objects.get(study=study, external_id="item-000"), kind="audio",
            file="evalstudy-media/matrix", mime="audio/wav", container="wav", codec="pcm_s16le",
            duration_s=1.0, size_bytes=1, sha256="0" * 64)


def _submission(w: World, role: str, which: str) -> dict:
    return {"slug": w.study(role, which).slug, "submission_id": "5f0e4a3b2c1d0e9f8a7b6c5d"}


ANSWERS = {"answers": {"severity": "0", "usable": "yes"}}
NO_STUDY = {"kwargs": lambda w, role, which: {}, "both_studies": False}

CASES: dict[tuple[str, str], Case] = {
    ("api-schema", "GET"): Case("public", 200, **NO_STUDY),
    ("api-docs", "GET"): Case("public", 200, **NO_STUDY),
    ("api-token", "POST"): Case("public", 201, body=lambda w, r, x: {
        "username": "owner", "password": "pw-for-tests"}, **NO_STUDY),
    ("api-studies", "GET"): Case("signed_in", 200, **NO_STUDY),
    ("api-studies", "POST"): Case("researcher", 201, body=lambda w, r, x: {
        "slug": "made-by-api", "title": "Made by the API"}, **NO_STUDY),
    ("api-study-import", "POST"): Case("import", 200, kwargs=lambda w, r, x: {},
                                       body=_spec_of),
    ("api-study", "GET"): Case("viewer", 200),
    ("api-study", "PATCH"): Case("editor", 200, body=lambda w, r, x: {"title": "Renamed"}),
    ("api-study-open", "POST"): Case("editor", 200),
    ("api-study-close", "POST"): Case("editor", 200),
    ("api-study-progress", "GET"): Case("viewer", 200),
    ("api-study-systems", "GET"): Case("viewer", 200),
    ("api-study-blindness", "GET"): Case("viewer", 200),
    # The adaptive plan: viewers read it and its looks, editors set it (a draft, unregistered).
    ("api-study-plan", "GET"): Case("viewer", 200, prepare=adaptive_with_plans),
    ("api-study-plan", "PUT"): Case("editor", 200, prepare=adaptive_with_plans,
                                    body=lambda w, r, x: {"target_ci_width": 1.0,
                                                          "max_looks": 5}),
    ("api-study-plan-checks", "GET"): Case("viewer", 200, prepare=adaptive_with_plans),
    ("api-study-systems", "POST"): Case("editor", 201, body=lambda w, r, x: {"name": "sys-new"}),
    ("api-study-items", "GET"): Case("viewer", 200),
    ("api-study-items", "POST"): Case("editor", 201, body=lambda w, r, x: [
        {"id": "item-new", "outputs": {"sys-0": "zero", "sys-1": "one"}}]),
    ("api-study-item-media", "GET"): Case("viewer", 200, kwargs=_item_of),
    # Without a file: a permitted request is refused for its data (400).
    ("api-study-item-media", "POST"): Case("editor", 400, kwargs=_item_of,
                                           body=lambda w, r, x: {}),
    ("api-study-item-media", "DELETE"): Case("editor", 204, kwargs=_item_of,
                                             prepare=with_media),
    ("api-study-outputs", "GET"): Case("viewer", 200),
    ("api-study-outputs", "POST"): Case("editor", 201, body=lambda w, r, x: [
        {"item": "item-000", "system": "sys-0", "text": "changed"}]),
    ("api-study-criteria", "GET"): Case("viewer", 200),
    ("api-study-criteria", "POST"): Case("editor", 201, body=lambda w, r, x: {
        "key": "fluency", "prompt": "Is it fluent?", "kind": "binary"}),
    ("api-study-design", "GET"): Case("viewer", 200),
    ("api-study-collaborators", "GET"): Case("viewer", 200),
    ("api-study-collaborators", "POST"): Case("owner", 201, body=lambda w, r, x: {
        "username": "helper", "role": "editor"}),
    ("api-study-collaborator", "DELETE"): Case("owner", 204, kwargs=lambda w, r, x: {
        "slug": w.study(r, x).slug, "username": "helper"}),
    ("api-study-raters", "GET"): Case("viewer", 200),
    ("api-study-raters", "POST"): Case("editor", 201, body=lambda w, r, x: {
        "kind": "crowd", "external_id": "PID-new", "email": "new@example.org"}),
    ("api-study-rater-personal-data", "GET"): Case("owner", 200, kwargs=_rater_of),
    ("api-study-rater-erase", "POST"): Case("owner", 200, kwargs=_rater_of),
    ("api-study-judgments-csv", "GET"): Case("viewer", 200),
    ("api-study-judgments-jsonl", "GET"): Case("viewer", 200),
    ("api-study-judgments-parquet", "GET"): Case("viewer", 200),
    ("api-study-spans-csv", "GET"): Case("viewer", 200),
    ("api-study-spans-jsonl", "GET"): Case("viewer", 200),
    ("api-study-spans-parquet", "GET"): Case("viewer", 200),
    # The adjudication queue: viewers list it, editors record a label (of an output of the
    # study the request targets).
    ("api-study-adjudication", "GET"): Case("viewer", 200),
    ("api-study-adjudication", "POST"): Case("editor", 201, body=_adjudication_of),
    ("api-study-metric-runs", "GET"): Case("viewer", 200),
    ("api-study-metric-runs", "POST"): Case("editor", 202, body=lambda w, r, x: {
        "metrics": ["wer"]}),
    ("api-metric-run", "GET"): Case("viewer", 200, kwargs=_run(0)),
    ("api-metric-results", "GET"): Case("viewer", 200),
    ("api-study-analysis-runs", "GET"): Case("viewer", 200),
    ("api-study-analysis-runs", "POST"): Case("editor", 202, body=lambda w, r, x: {}),
    ("api-analysis-run", "GET"): Case("viewer", 200, kwargs=_run(1)),
    ("api-analysis-report-html", "GET"): Case("viewer", 200, kwargs=_run(1)),
    ("api-analysis-report-pdf", "GET"): Case("viewer", 200, kwargs=_run(1)),
    ("api-analysis-report-json", "GET"): Case("viewer", 200, kwargs=_run(1)),
    ("api-study-proxy-runs", "GET"): Case("viewer", 200),
    ("api-study-proxy-runs", "POST"): Case("editor", 202, body=lambda w, r, x: {
        "method": "latte", "backend": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}),
    ("api-proxy-run", "GET"): Case("viewer", 200, kwargs=_run(2)),
    ("api-proxy-run-resume", "POST"): Case("editor", 202, kwargs=_run(2)),
    # The matrix world has no human labels: a permitted request is refused for its data (400),
    # after the permission checks that this matrix is about.
    ("api-proxy-run-threshold", "POST"): Case("editor", 400, kwargs=_run(2),
                                              body=lambda w, r, x: {"criterion": "usable"}),
    ("api-proxy-run-results", "GET"): Case("viewer", 200, kwargs=_run(2)),
    ("api-proxy-run-latte-scores", "GET"): Case("viewer", 200, kwargs=_run(2)),
    ("api-study-learned-proxies", "GET"): Case("viewer", 200),
    ("api-study-learned-proxies", "POST"): Case("editor", 400, body=lambda w, r, x: {
        "criterion": "usable", "kind": "wer_bertscore"}),  # too few labelled outputs
    ("api-learned-proxy", "GET"): Case("viewer", 200, kwargs=_run(3)),
    ("api-study-judge-versions", "GET"): Case("viewer", 200),
    ("api-study-judge-versions", "POST"): Case("editor", 400, body=lambda w, r, x: {
        "criterion": "nope", "method": "latte", "n_examples": 0}),  # no such criterion
    ("api-judge-version", "GET"): Case("viewer", 200, kwargs=lambda w, r, x: {
        "pk": _judge_version_of(w.study(r, x)).pk}),
    # Prolific: the matrix world has no link, so permitted requests get their answer without
    # calling Prolific: the link 404, the list 200, sync and actions 409 (not linked), a link
    # or an action without its body 400.
    ("api-study-prolific", "GET"): Case("viewer", 404),
    ("api-study-prolific", "POST"): Case("editor", 400, body=lambda w, r, x: {}),
    ("api-study-prolific-sync", "POST"): Case("editor", 409),
    ("api-study-prolific-submissions", "GET"): Case("viewer", 200),
    ("api-study-prolific-approve", "POST"): Case("editor", 409, kwargs=_submission),
    ("api-study-prolific-reject", "POST"): Case("editor", 400, kwargs=_submission,
                                                body=lambda w, r, x: {}),
    ("api-study-prolific-bonus", "POST"): Case("editor", 400, kwargs=_submission,
                                               body=lambda w, r, x: {}),
    ("api-study-prolific-message", "POST"): Case("editor", 400, kwargs=_submission,
                                                 body=lambda w, r, x: {}),
    ("api-study-prolific-create", "POST"): Case("editor", 400, body=lambda w, r, x: {}),
    # Researchers' actions on a rater (annotation.rater_actions): the enrolled rater of the
    # study; reopening a seat they never claimed is a 409.
    ("api-study-rater-exclude", "POST"): Case("editor", 200, kwargs=_rater_of),
    ("api-study-rater-include", "POST"): Case("editor", 200, kwargs=_rater_of),
    ("api-study-rater-reopen-seat", "POST"): Case("editor", 409, kwargs=_rater_of),
    # Recalibration (annotation.recalibration): a rater with no live seat: 409.
    ("api-study-rater-recalibrate", "POST"): Case("editor", 409, kwargs=_rater_of),
    ("api-rater-slots", "GET"): Case("rater", 200, kwargs=_rater_study,
                                     prepare=open_a_with_seats),
    ("api-rater-next", "POST"): Case("rater", 200, kwargs=_rater_study,
                                     prepare=open_a_with_seats),
    ("api-rater-submit", "POST"): Case("rater", 201, kwargs=_rater_slot,
                                       body=lambda w, r, x: ANSWERS, prepare=open_a_with_seats),
}


def expected(case: Case, access_world: World, role: str, which: str) -> int:
    if case.need == "public":
        return case.ok
    if role == "anonymous":
        return 401
    if case.need == "signed_in":
        return case.ok
    if case.need == "researcher":
        return 403 if role == "rater" else case.ok
    if case.need == "rater":
        if role != "rater":
            return 403  # signed in, but no rater profile
        return case.ok if which == "own" else 404
    if case.need == "import":
        if role == "rater":
            return 403
        on = ROLE_ON[role][0 if access_world.study(role, which) == access_world.a else 1]
        if on is None:
            return 400  # the slug is taken by a study they cannot see: refused, not revealed
        return case.ok if ROLE_RANK[on] >= ROLE_RANK["editor"] else 403
    on = ROLE_ON[role][0 if access_world.study(role, which) == access_world.a else 1]
    if on is None:
        return 404
    return case.ok if ROLE_RANK[on] >= ROLE_RANK[case.need] else 403


def api_routes() -> dict[str, tuple[str, set[str]]]:
    """URL name -> (pattern, HTTP methods its view implements) for every /api/v1/ route."""
    found: dict[str, tuple[str, set[str]]] = {}

    def walk(patterns, prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                route = prefix + str(entry.pattern)
                if not route.startswith("api/v1/"):
                    continue
                view = getattr(entry.callback, "view_class", None) or getattr(
                    entry.callback, "cls", None)
                methods = {m.upper() for m in ("get", "post", "put", "patch", "delete")
                           if view is not None and hasattr(view, m)}
                found[entry.name] = (route, methods)

    walk(get_resolver().url_patterns, "")
    return found


def test_every_route_and_method_is_in_the_matrix():
    routes = api_routes()
    in_resolver = {(name, method) for name, (_, methods) in routes.items() for method in methods}
    assert None not in routes, "every API route needs a name"
    missing = in_resolver - set(CASES)
    assert not missing, f"routes without a row in the permission matrix: {sorted(missing)}"
    stale = set(CASES) - in_resolver
    assert not stale, f"matrix rows without a route: {sorted(stale)}"


def _request(client: Client, method: str, url: str, body, token: str | None):
    headers = {"HTTP_AUTHORIZATION": f"Token {token}"} if token else {}
    call = getattr(client, method.lower())
    if body is None:
        return call(url, **headers)
    return call(url, data=json.dumps(body), content_type="application/json", **headers)


@pytest.mark.parametrize("name,method", sorted(CASES))
def test_permission_matrix(access_world, name, method, settings):
    from django.urls import reverse

    # The proxy-run bodies name a judge on loopback (nothing answers there): opt in, as a
    # deployment with a judge server on its own host would.
    settings.EVALSTUDY_JUDGE_ALLOWED_NETWORKS = ["127.0.0.0/8"]

    case = CASES[(name, method)]
    client = Client()
    failures = []
    for role in ROLES:
        for which in ("own", "other") if case.both_studies else ("own",):
            # Each request sees the same starting state; what it changed is rolled back.
            with transaction.atomic():
                if case.prepare:
                    case.prepare(access_world)
                cache.clear()  # throttles
                url = reverse(name, kwargs=case.kwargs(access_world, role, which))
                body = case.body(access_world, role, which) if case.body else None
                token = access_world.tokens.get(role)
                response = _request(client, method, url, body, token)
                want = expected(case, access_world, role, which)
                if response.status_code != want:
                    failures.append(f"{role}/{which}: {method} {url} -> "
                                    f"{response.status_code}, expected {want}: "
                                    f"{response.content[:200]!r}")
                elif response.status_code >= 400 and response["Content-Type"].startswith(
                        "application/json"):
                    shape = response.json()
                    assert {"code", "message", "field_errors"} <= set(shape), shape
                transaction.set_rollback(True)
    assert not failures, "\n".join(failures)
