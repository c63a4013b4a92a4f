"""A fake of Prolific's REST API (https://docs.prolific.com/api-reference) on 127.0.0.1, for
the tests: stateful (studies, submissions, transitions, bulk bonus payments), strict about the
token, and able to answer 429 with Retry-After once. The shapes follow the documentation;
where it is silent the assumptions are the same as the client's (see README, "Prolific").
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PREFIX = "/api/v1/"
REJECTION_CATEGORIES = {
    "TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "FAILED_CHECK",
    "LOW_EFFORT", "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA", "UNSUPP_DEVICE", "OTHER"}


@dataclass
class FakeProlific:
    token: str = "fake-token"
    page_size: int = 2
    studies: dict[str, dict[str, Any]] = field(default_factory=dict)
    submissions: dict[str, dict[str, Any]] = field(default_factory=dict)
    bonuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    paid: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, str, Any, str]] = field(default_factory=list)  # method, path, body, auth
    throttle_next: int = 0  # answer this many requests with 429 first
    retry_after: str = "0"
    fail_next_5xx: int = 0
    url: str = ""

    # --- state helpers for the tests ----------------------------------------------------
    def add_study(self, study_id: str, name: str = "A Prolific study") -> None:
        self.studies[study_id] = {"id": study_id, "name": name, "internal_name": name,
                                  "status": "ACTIVE", "reward": 300, "currency_code": "GBP"}

    def add_submission(self, study_id: str, submission_id: str, participant_id: str,
                       status: str = "ACTIVE") -> None:
        self.submissions[submission_id] = {
            "id": submission_id, "study_id": study_id, "participant_id": participant_id,
            "status": status, "started_at": "2026-11-26T10:00:00.000000Z",
            "completed_at": None, "study_code": ""}

    def writes(self) -> list[tuple[str, str, Any]]:
        return [(m, p, b) for m, p, b, _ in self.calls if m == "POST"]


def _handler(fake: FakeProlific):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, detail: str, headers: dict[str, str] | None = None):
            self._send(status, {"error": {"status": status, "title": "Error",
                                          "detail": detail}}, headers)

        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            auth = self.headers.get("Authorization", "")
            path, _, query = self.path.partition("?")
            fake.calls.append((method, path, body, auth))
            if fake.throttle_next > 0:
                fake.throttle_next -= 1
                return self._error(429, "Request was throttled.", {"Retry-After": fake.retry_after})
            if fake.fail_next_5xx > 0:
                fake.fail_next_5xx -= 1
                return self._error(503, "Service unavailable.")
            if auth != f"Token {fake.token}":
                return self._error(401, "Invalid token.")
            if not path.startswith(PREFIX):
                return self._error(404, "Not found.")
            route = path[len(PREFIX):]
            if method == "GET" and (m := re.fullmatch(r"studies/([^/]+)/", route)):
                study = fake.studies.get(m[1])
                return self._send(200, study) if study else self._error(404, "No such study.")
            if method == "GET" and (m := re.fullmatch(r"studies/([^/]+)/submissions/", route)):
                if m[1] not in fake.studies:
                    return self._error(404, "No such study.")
                rows = [s for s in fake.submissions.values() if s["study_id"] == m[1]]
                page = int(re.search(r"page=(\d+)", query)[1]) if "page=" in query else 1
                chunk = rows[(page - 1) * fake.page_size: page * fake.page_size]
                more = page * fake.page_size < len(rows)
                nxt = f"{fake.url}studies/{m[1]}/submissions/?page={page + 1}" if more else None
                return self._send(200, {"results": chunk, "_links": {
                    "self": {"href": None}, "next": {"href": nxt}}, "meta": {"count": len(rows)}})
            if method == "POST" and (m := re.fullmatch(r"submissions/([^/]+)/transition/",
                                                       route)):
                sub = fake.submissions.get(m[1])
                if sub is None:
                    return self._error(404, "No such submission.")
                action = (body or {}).get("action")
                if action == "APPROVE":
                    sub["status"] = "APPROVED"
                elif action == "REJECT":
                    message = (body or {}).get("message") or ""
                    if len(message) < 100:
                        return self._error(400, "message: Ensure this field has at least 100 "
                                                "characters.")
                    if (body or {}).get("rejection_category") not in REJECTION_CATEGORIES:
                        return self._error(400, "rejection_category: not a valid choice.")
                    sub["status"] = "REJECTED"
                else:
                    return self._error(400, "action: not a valid choice.")
                return self._send(200, sub)
            if method == "POST" and route == "studies/":
                body = body or {}
                missing = [key for key in ("name", "description", "external_study_url",
                                           "completion_codes", "total_available_places",
                                           "estimated_completion_time", "reward")
                           if not body.get(key)]
                if missing:
                    return self._error(400, f"{missing[0]}: This field is required.")
                if not str(body["external_study_url"]).startswith(("http://", "https://")):
                    return self._error(400, "external_study_url: Enter a valid URL.")
                study_id = f"{len(fake.studies) + 1:024x}"
                fake.studies[study_id] = {**body, "id": study_id, "status": "UNPUBLISHED"}
                return self._send(201, fake.studies[study_id])
            if method == "POST" and route == "messages/":
                body = body or {}
                if not body.get("body"):
                    return self._error(400, "body: This field is required.")
                if not any(s["participant_id"] == body.get("recipient_id")
                           and s["study_id"] == body.get("study_id")
                           for s in fake.submissions.values()):
                    return self._error(400, "recipient_id: not a participant of this study.")
                fake.messages.append(body)
                return self._send(204, {})
            if method == "POST" and route == "submissions/bonus-payments/":
                study_id = (body or {}).get("study_id")
                csv = (body or {}).get("csv_bonuses") or ""
                if study_id not in fake.studies:
                    return self._error(400, "study_id: no such study.")
                total = 0
                for line in filter(None, csv.strip().splitlines()):
                    pid, _, amount = line.partition(",")
                    if not any(s["participant_id"] == pid and s["study_id"] == study_id
                               for s in fake.submissions.values()):
                        return self._error(400, f"{pid} did not take part in this study.")
                    total += round(float(amount) * 100)
                bulk_id = f"bulk{len(fake.bonuses) + 1:020d}"
                fake.bonuses[bulk_id] = {"id": bulk_id, "study": study_id, "amount": total,
                                         "fees": 0, "total_amount": total, "csv": csv}
                return self._send(201, fake.bonuses[bulk_id])
            if method == "POST" and (m := re.fullmatch(r"bulk-bonus-payments/([^/]+)/pay/",
                                                       route)):
                if m[1] not in fake.bonuses:
                    return self._error(404, "No such bonus payment.")
                fake.paid.append(m[1])
                return self._send(202, {})
            return self._error(404, "Not found.")

        def do_GET(self):
            self._handle("GET")

        def do_POST(self):
            self._handle("POST")

    return Handler


class running_fake:  # noqa: N801 - used as a function: with running_fake(...)
    """Context manager: a FakeProlific served on 127.0.0.1 (a free port) in a thread."""

    def __init__(self, fake: FakeProlific | None = None) -> None:
        self.fake = fake or FakeProlific()

    def __enter__(self) -> FakeProlific:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.fake))
        self.fake.url = f"http://127.0.0.1:{self.server.server_address[1]}{PREFIX}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self.fake

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
