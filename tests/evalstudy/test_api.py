"""The REST API, researcher side: bulk items and outputs, pagination and filters, spec import,
draft-only changes, exports, the error shape, tokens, throttling and the OpenAPI schema."""

from __future__ import annotations

import csv
import io
import json

import pyarrow.parquet as pq
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from annotation.services import judgment_submit
from evalstudy.models import ApiToken, Item, Output, Rater, Study
from evalstudy.services import assignment_next, study_open
from evalstudy.tokens import api_token_create
from kit.throttles import TokenObtainThrottle
from tests.factories import UserFactory, invite, make_study, token_client

# Throttle counters start empty (tests/conftest.py): these tests call the API.
pytestmark = pytest.mark.usefixtures("fresh_throttles")


def post_json(client, url, body, **headers):
    return client.post(url, data=json.dumps(body), content_type="application/json", **headers)


def outputs_snapshot(study):
    return sorted(Output.objects.filter(item__study=study).values_list(
        "item__external_id", "system__name", "text"))


# --- bulk create ----------------------------------------------------------------------------
def test_bulk_outputs_json_lists_every_bad_row_and_writes_nothing(api, draft):
    before = outputs_snapshot(draft)
    url = reverse("api-study-outputs", args=[draft.slug])
    # Shape first: a row that is not {item, system, text} is reported before any lookup.
    response = post_json(api, url, [
        {"item": "item-000", "system": "sys-0", "text": "fine"},
        {"item": "item-001", "text": "system missing", "colour": "red"},
        "not an object",
    ])
    assert response.status_code == 400
    assert [(e["row"], e["field"]) for e in response.json()["errors"]] == [
        (2, "colour"), (2, "system"), (3, "")]
    response = post_json(api, url, [
        {"item": "item-000", "system": "sys-0", "text": "fine"},
        {"item": "item-999", "system": "sys-0", "text": "no such item"},
        {"item": "item-001", "system": "sys-9", "text": "no such system"},
        {"item": "item-002", "system": "sys-1", "text": "fine too"},
    ])
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_file" and body["field_errors"] == {}
    assert body["message"] == "Nothing was written: 2 problems."  # not "2 problem(s)"
    problems = {(e["row"], e["field"]) for e in body["errors"]}
    assert problems == {(2, "item"), (3, "system")}, body["errors"]
    # The same pair twice.
    response = post_json(api, url, [
        {"item": "item-000", "system": "sys-0", "text": "a"},
        {"item": "item-000", "system": "sys-0", "text": "b"},
    ])
    assert [(e["row"], e["field"]) for e in response.json()["errors"]] == [(2, "system")]
    assert response.json()["message"] == "Nothing was written: 1 problem."
    assert "first at row 1" in response.json()["errors"][0]["message"]
    assert outputs_snapshot(draft) == before


def test_bulk_outputs_csv_upserts_in_one_transaction(api, draft):
    url = reverse("api-study-outputs", args=[draft.slug])
    Item.objects.create(study=draft, external_id="item-new")
    text = "item,system,output\nitem-000,sys-0,rewritten\nitem-new,sys-0,x\nitem-new,sys-1,y\n"
    response = api.post(url, data=text, content_type="text/csv")
    assert response.status_code == 201, response.content
    assert response.json()["outputs_written"] == 3
    assert Output.objects.get(item__external_id="item-000", system__name="sys-0").text == (
        "rewritten")
    # A bad line in a file: its line number, and nothing of the good lines written.
    bad = "item,system,output\nitem-001,sys-0,changed\nitem-001,,missing system\n"
    response = api.post(url, data=bad, content_type="text/csv")
    assert response.status_code == 400
    assert response.json()["errors"][0] == {
        "source": "outputs.csv", "row": 3, "field": "system", "message": "must not be empty"}
    assert Output.objects.get(item__external_id="item-001", system__name="sys-0").text != (
        "changed")


def test_bulk_items_as_json_csv_and_multipart_file(api, draft):
    url = reverse("api-study-items", args=[draft.slug])
    response = post_json(api, url, [
        {"id": "new-1", "reference": "r", "metadata": {"speaker": "S1"},
         "outputs": {"sys-0": "a", "sys-1": "b"}},
        {"id": "new-2", "outputs": {"sys-0": "a"}},
    ])
    assert response.status_code == 400
    assert response.json()["errors"] == [{
        "source": "body", "row": 2, "field": "item 'new-2'.outputs",
        "message": "no output for system 'sys-1'"}]
    assert not Item.objects.filter(external_id="new-1").exists()

    csv_text = "item,system,output,speaker\nnew-3,sys-0,a,S2\nnew-3,sys-1,b,S2\n"
    upload = io.BytesIO(csv_text.encode())
    upload.name = "more.csv"
    response = api.post(url, data={"file": upload})
    assert response.status_code == 201, response.content
    assert response.json() == {"items_written": 1, "outputs_written": 2}
    assert Item.objects.get(external_id="new-3").metadata == {"speaker": "S2"}


def test_lists_are_paginated_and_filtered(api, draft):
    Item.objects.filter(study=draft, external_id="item-001").update(
        metadata={"speaker": "S7", "severity": 3})
    url = reverse("api-study-outputs", args=[draft.slug])
    page = api.get(url, {"page_size": 4}).json()
    assert page["count"] == 6 and len(page["results"]) == 4 and page["next"]
    rest = api.get(page["next"]).json()
    assert len(rest["results"]) == 2 and rest["next"] is None
    ids = [row["id"] for row in page["results"] + rest["results"]]
    assert len(set(ids)) == 6
    assert set(page["results"][0]) == {"id", "item", "system", "text"}
    only = api.get(url, {"system": "sys-1"}).json()["results"]
    assert {row["system"] for row in only} == {"sys-1"} and len(only) == 3
    one = api.get(url, {"item": "item-002", "system": "sys-0"}).json()["results"]
    assert [(row["item"], row["system"]) for row in one] == [("item-002", "sys-0")]
    by_meta = api.get(url, {"meta.speaker": "S7"}).json()["results"]
    assert {row["item"] for row in by_meta} == {"item-001"}
    items = reverse("api-study-items", args=[draft.slug])
    assert [i["external_id"] for i in api.get(items, {"meta.severity": "3"}).json()["results"]
            ] == ["item-001"]
    assert api.get(items, {"meta.a__b": "1"}).status_code == 400
    assert api.get(url, {"page": 9}).status_code == 404


# --- studies --------------------------------------------------------------------------------
SPEC = """\
study:
  slug: from-api
  title: Imported through the API
systems:
  - name: a
  - name: b
criteria:
  - key: usable
    kind: binary
    prompt: Usable?
items:
  - id: i1
    reference: hello
    outputs: {a: hello, b: yellow}
"""


def test_import_spec_creates_then_reports_errors_with_lines(api, owner):
    url = reverse("api-study-import")
    upload = io.BytesIO(SPEC.encode())
    upload.name = "study.yaml"
    response = api.post(url, data={"file": upload})
    assert response.status_code == 201, response.content
    assert response.json()["outcome"] == "created"
    assert Study.objects.get(slug="from-api").owner == owner
    response = api.post(url, data=SPEC, content_type="application/yaml")
    assert response.status_code == 200 and response.json()["outcome"] == "unchanged"
    broken = SPEC.replace("kind: binary", "kind: stars")
    response = api.post(url, data=broken, content_type="application/yaml")
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["row"] == 9 and error["field"] == "criteria[0].kind"


def test_create_patch_open_close(api, owner):
    response = post_json(api, reverse("api-studies"), {"slug": "s1", "title": "One"})
    assert response.status_code == 201
    assert response.json()["owner"] == "owner" and response.json()["your_role"] == "owner"
    response = post_json(api, reverse("api-studies"), {"slug": "s1", "title": "Again"})
    assert response.status_code == 400 and "slug" in response.json()["field_errors"]
    study = make_study(owner=owner, slug="ready")
    url = reverse("api-study", args=["ready"])
    assert api.patch(url, data={"title": "New"}, content_type="application/json").json()[
        "title"] == "New"
    response = api.post(reverse("api-study-open", args=["s1"]))
    assert response.status_code == 400 and "no criteria" in response.json()["message"]
    assert api.post(reverse("api-study-open", args=["ready"])).json()["status"] == "open"
    response = api.patch(url, data={"title": "Too late"}, content_type="application/json")
    assert response.status_code == 409 and response.json()["code"] == "conflict"
    response = post_json(api, reverse("api-study-systems", args=["ready"]), {"name": "x"})
    assert response.status_code == 409
    progress = api.get(reverse("api-study-progress", args=["ready"])).json()
    assert progress["seats_total"] > 0 and progress["outputs_total"] == 18
    assert api.post(reverse("api-study-close", args=["ready"])).json()["status"] == "closed"
    study.refresh_from_db()
    assert study.status == "closed"


def test_criteria_are_validated(api, draft):
    url = reverse("api-study-criteria", args=[draft.slug])
    response = post_json(api, url, {"key": "q", "prompt": "?", "kind": "likert"})
    assert response.status_code == 400 and "kind" in response.json()["field_errors"]
    response = post_json(api, url, {"key": "q", "prompt": "?", "kind": "likert",
                                    "scale_points": 5})
    assert response.status_code == 201
    response = post_json(api, url, {"key": "why", "prompt": "Why?", "kind": "text",
                                    "show_if_criterion": "q", "show_if_values": ["9"]})
    assert response.status_code == 400 and "show_if_values" in response.json()["field_errors"]


def test_invite_rater_returns_entry_link_that_works(api, draft):
    response = post_json(api, reverse("api-study-raters", args=[draft.slug]),
                         {"kind": "slp", "display_name": "Dr. A", "email": "a@example.org"})
    assert response.status_code == 201
    rater = Rater.objects.get(pk=response.json()["id"])
    assert response.json()["entry_url"].endswith(f"/enter/{rater.access_token}/")
    assert rater.metadata == {"email": "a@example.org"}
    listed = api.get(reverse("api-study-raters", args=[draft.slug])).json()["results"]
    assert [row["id"] for row in listed] == [rater.pk]
    browser = Client()
    assert browser.get(f"/enter/{rater.access_token}/").status_code == 302
    data = api.get(reverse("api-study-rater-personal-data", args=[draft.slug, rater.pk]))
    assert data.status_code == 200 and "a@example.org" in json.dumps(data.json())
    erased = api.post(reverse("api-study-rater-erase", args=[draft.slug, rater.pk]))
    assert erased.status_code == 200
    rater.refresh_from_db()
    assert "email" not in rater.metadata
    assert browser.get(f"/enter/{response.json()['entry_url'].split('/')[-2]}/"
                       ).status_code == 404


def test_design_csv(api, owner):
    study = make_study(owner=owner, slug="designed", status=Study.Status.OPEN)
    response = api.get(reverse("api-study-design", args=[study.slug]))
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert rows and {"list", "position", "item", "system"} <= set(rows[0])


# --- exports --------------------------------------------------------------------------------
@pytest.fixture
def rated(owner):
    study = make_study(owner=owner, slug="rated", status=Study.Status.OPEN, n_items=2,
                       n_systems=2, ratings_per_output=2)
    Item.objects.filter(study=study, external_id="item-000").update(
        external_id="=HYPERLINK(\"http://x\")", metadata={"speaker": "S1", "age": 7})
    for pid in ("=cmd|' /C calc'!A0", "PID2"):
        rater = invite(study, external_id=pid, display_name=pid)
        while (slot := assignment_next(study=study, rater=rater)) is not None:
            judgment_submit(rater=rater, slot_id=slot.pk,
                            answers={"severity": "2", "usable": "no", "note": "+1 bad"})
    return study


def test_exports_in_three_formats_with_formulas_neutralised(api, rated):
    response = api.get(reverse("api-study-judgments-csv", args=[rated.slug]))
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == 2 * 2 * 3  # 2 raters x 2 target slots x 3 answers
    cells = [value for row in rows for value in row.values()]
    assert not [c for c in cells if c and c[0] in "=+@"], "a cell could run as a formula"
    assert "'=HYPERLINK(\"http://x\")" in {row["item"] for row in rows}
    assert "'+1 bad" in {row["value"] for row in rows}

    response = api.get(reverse("api-study-judgments-jsonl", args=[rated.slug]))
    records = [json.loads(line) for line in response.content.decode().splitlines()]
    assert len(records) == 12
    assert {r["item"] for r in records} == {"=HYPERLINK(\"http://x\")", "item-001"}
    assert {r["item.age"] for r in records} == {7, None}

    response = api.get(reverse("api-study-judgments-parquet", args=[rated.slug]))
    table = pq.read_table(io.BytesIO(response.content))
    assert table.num_rows == 12 and "criterion" in table.column_names
    assert sorted(set(table.column("value").to_pylist())) == ["+1 bad", "2", "no"]
    humans = api.get(reverse("api-study-judgments-jsonl", args=[rated.slug]),
                     {"raters": "proxy"})
    assert humans.content == b""
    assert api.get(reverse("api-study-judgments-csv", args=[rated.slug]),
                   {"raters": "robots"}).status_code == 400


# --- errors ---------------------------------------------------------------------------------
def test_unhandled_error_is_500_in_the_shape_without_a_trace(api, draft, settings, monkeypatch,
                                                             caplog):
    settings.DEBUG = True

    def explode(**kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr("evalstudy.api.studies.study_close", explode)
    response = api.post(reverse("api-study-close", args=[draft.slug]))
    assert response.status_code == 500
    assert response.json() == {"code": "server_error",
                               "message": "Internal server error; it was logged.",
                               "field_errors": {}}
    assert b"secret internals" not in response.content and b"Traceback" not in response.content
    assert "secret internals" in caplog.text  # logged server-side, with its traceback


def test_unknown_api_path_and_unauthenticated_use_the_shape(api):
    response = api.get("/api/v1/no-such-thing/")
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    response = Client().get(reverse("api-studies"))
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Token"
    assert response.json()["code"] == "not_authenticated"
    response = Client(HTTP_AUTHORIZATION="Token nonsense").get(reverse("api-studies"))
    assert response.status_code == 401 and response.json()["code"] == "authentication_failed"


# --- tokens and throttling ------------------------------------------------------------------
def test_token_lifecycle(owner, capsys):
    response = post_json(Client(), reverse("api-token"),
                         {"username": "owner", "password": "wrong"})
    assert response.status_code == 400 and "Wrong username" in response.json()["message"]
    response = post_json(Client(), reverse("api-token"),
                         {"username": "owner", "password": "pw-for-tests", "name": "ci"})
    assert response.status_code == 201
    raw = response.json()["token"]
    stored = ApiToken.objects.get(user=owner)
    assert raw not in (stored.key_hash, stored.prefix) and raw.startswith(stored.prefix)
    client = Client(HTTP_AUTHORIZATION=f"Token {raw}")
    assert client.get(reverse("api-studies")).status_code == 200
    stored.refresh_from_db()
    assert stored.last_used_at is not None

    call_command("api_token", "create", "owner", "--name", "cron", "--days", "30")
    second = capsys.readouterr().out.strip()
    assert Client(HTTP_AUTHORIZATION=f"Bearer {second}").get(
        reverse("api-studies")).status_code == 200
    call_command("api_token", "list", "owner")
    assert "cron" in capsys.readouterr().out
    call_command("api_token", "revoke", "owner", "--prefix", raw[:10])
    assert client.get(reverse("api-studies")).status_code == 401
    with pytest.raises(CommandError, match="--prefix"):
        call_command("api_token", "revoke", "owner")
    call_command("api_token", "revoke", "owner", "--all")
    assert not ApiToken.objects.exists()
    owner.is_active = False
    owner.save()
    _, raw = api_token_create(user=owner)
    assert Client(HTTP_AUTHORIZATION=f"Token {raw}").get(
        reverse("api-studies")).status_code == 401


def test_token_endpoint_is_throttled(owner, monkeypatch):
    monkeypatch.setattr(TokenObtainThrottle, "THROTTLE_RATES", {"token_obtain": "3/min"})
    client = Client()
    statuses = [post_json(client, reverse("api-token"),
                          {"username": "owner", "password": "guess"}).status_code
                for _ in range(4)]
    assert statuses == [400, 400, 400, 429]
    response = post_json(client, reverse("api-token"),
                         {"username": "owner", "password": "pw-for-tests"})
    assert response.status_code == 429 and response.json()["code"] == "throttled"
    assert int(response["Retry-After"]) > 0


# --- schema ---------------------------------------------------------------------------------
def test_schema_generates_without_warnings_and_docs_need_no_cdn(db, tmp_path):
    path = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    text = path.read_text()
    for route in ("/api/v1/studies/{slug}/outputs/", "/api/v1/rater/slots/{slot_id}/judgments/",
                  "/api/v1/studies/{slug}/judgments.parquet", "/api/v1/auth/token/"):
        assert route in text
    docs = Client().get(reverse("api-docs")).content.decode()
    assert "/static/drf_spectacular_sidecar/" in docs and "cdn" not in docs.lower()
    schema = Client().get(reverse("api-schema"), HTTP_ACCEPT="application/json").json()
    outputs = schema["paths"]["/api/v1/studies/{slug}/outputs/"]
    assert set(outputs["post"]["requestBody"]["content"]) >= {"application/json", "text/csv",
                                                              "multipart/form-data"}
    assert "PaginatedOutputList" in json.dumps(outputs["get"]["responses"]["200"])
    assert "403" in outputs["post"]["responses"]


def test_open_via_admin_role_checks_use_the_same_module(api, owner):
    """The HTML metrics page follows the same rules: a viewer sees, cannot start runs."""
    study = make_study(owner=owner, slug="pages")
    viewer = UserFactory(username="viewer", is_staff=True)
    study.collaborators.add(viewer, through_defaults={"role": "viewer"})
    browser = Client()
    browser.force_login(viewer)
    assert browser.get(reverse("metrics:page", args=[study.slug])).status_code == 200
    assert browser.post(reverse("metrics:start", args=[study.slug])).status_code == 403
    stranger = UserFactory(username="stranger", is_staff=True)
    browser.force_login(stranger)
    assert browser.get(reverse("metrics:page", args=[study.slug])).status_code == 404
    study_open(study=study)


def test_api_changes_and_imports_are_audited(api, owner):
    from evalstudy.models import AuditEvent

    response = post_json(api, reverse("api-studies"), {"slug": "audited", "title": "Before"})
    assert response.status_code == 201
    assert api.patch(reverse("api-study", args=["audited"]), data=json.dumps(
        {"title": "After"}), content_type="application/json").status_code == 200
    assert post_json(api, reverse("api-study-systems", args=["audited"]),
                     {"name": "sys-a"}).status_code == 201
    events = list(AuditEvent.objects.filter(study_slug="audited").order_by("pk").values_list(
        "action", "source", "changes"))
    assert [(action, source) for action, source, _ in events] == [
        ("create", "api"), ("update", "api"), ("create", "api")]
    assert events[1][2]["title"] == ["Before", "After"]


def test_uploaded_files_over_the_limit_are_refused(api, draft, settings):
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.EVALSTUDY_UPLOAD_MAX_BYTES = 100
    before = outputs_snapshot(draft)
    csv_text = "item,system,output\n" + "item-000,sys-0,x\n" * 20
    response = api.post(reverse("api-study-outputs", args=[draft.slug]), {
        "file": SimpleUploadedFile("outputs.csv", csv_text.encode(), "text/csv")})
    assert response.status_code == 400
    assert "over the upload limit" in json.dumps(response.json())
    assert outputs_snapshot(draft) == before


def test_rater_entry_links_and_metadata_only_for_owners(api, owner, draft):
    from evalstudy.models import StudyCollaborator

    viewer, editor = UserFactory(username="viewer"), UserFactory(username="editor")
    StudyCollaborator.objects.create(study=draft, user=viewer, role="viewer")
    StudyCollaborator.objects.create(study=draft, user=editor, role="editor")
    url = reverse("api-study-raters", args=[draft.slug])
    created = post_json(token_client(editor), url, {"kind": "crowd", "external_id": "PID-9",
                                                     "email": "p@example.org"})
    assert created.status_code == 201  # the inviting editor gets the link to send, once
    rater = Rater.objects.get(pk=created.json()["id"])
    assert created.json()["entry_url"].endswith(f"/enter/{rater.access_token}/")
    for user in (viewer, editor):
        response = token_client(user).get(url)
        assert response.status_code == 200
        (row,) = response.json()["results"]
        assert row["id"] == rater.pk and row["external_id"] == "PID-9"
        assert "entry_url" not in row and "metadata" not in row
        assert rater.access_token not in response.content.decode()
        assert "p@example.org" not in response.content.decode()
    (row,) = api.get(url).json()["results"]
    assert row["entry_url"].endswith(f"/enter/{rater.access_token}/")
    assert row["metadata"] == {"email": "p@example.org"}
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    (row,) = token_client(admin).get(url).json()["results"]
    assert "entry_url" in row


def test_token_lockout_holds_whatever_x_forwarded_for_says(owner, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    client = Client()
    url = reverse("api-token")
    statuses = [post_json(client, url, {"username": "owner", "password": f"bad{i}"},
                          HTTP_X_FORWARDED_FOR=f"10.0.0.{i}").status_code for i in range(4)]
    assert statuses == [400, 400, 400, 429]
    # The right password does not get through while locked out, from any claimed address.
    response = post_json(client, url, {"username": "owner", "password": "pw-for-tests"},
                         HTTP_X_FORWARDED_FOR="10.0.1.1")
    assert response.status_code == 429 and response.json()["code"] == "locked_out"
    assert int(response["Retry-After"]) > 0 and "message" in response.json()
    assert not ApiToken.objects.exists()
    # Another account from the same address is not locked out (the lock is per username).
    UserFactory(username="colleague")
    assert post_json(client, url, {"username": "colleague", "password": "pw-for-tests"}
                     ).status_code == 201


def test_token_success_clears_the_failure_count(owner, settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    client, url = Client(), reverse("api-token")
    for _ in range(2):
        assert post_json(client, url, {"username": "owner", "password": "bad"}
                         ).status_code == 400
    assert post_json(client, url, {"username": "owner", "password": "pw-for-tests"}
                     ).status_code == 201
    for _ in range(2):
        assert post_json(client, url, {"username": "owner", "password": "bad"}
                         ).status_code == 400
    assert post_json(client, url, {"username": "owner", "password": "pw-for-tests"}
                     ).status_code == 201


def test_token_throttle_ignores_client_supplied_forwarded_for(owner, settings, monkeypatch):
    settings.LOGIN_FAILURE_LIMIT = 100  # the throttle, not the lockout, must answer here
    monkeypatch.setattr(TokenObtainThrottle, "THROTTLE_RATES", {"token_obtain": "3/min"})
    client = Client()
    statuses = [post_json(client, reverse("api-token"),
                          {"username": f"user-{i}", "password": "guess"},
                          HTTP_X_FORWARDED_FOR=f"10.0.0.{i}").status_code for i in range(4)]
    assert statuses == [400, 400, 400, 429]
