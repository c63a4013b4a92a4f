"""A small client of Prolific's REST API (https://docs.prolific.com/api-reference), on
`requests`: a timeout on every call, errors that carry Prolific's own message, bounded retries
with backoff on 429 (honouring Retry-After) and 5xx, and pagination.

A Django-free core (docs/architecture.md): services.py builds it from the settings.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urljoin

import requests

DEFAULT_URL = "https://api.prolific.com/api/v1/"


class ProlificError(Exception):
    """A call to Prolific failed: `status` is the HTTP status (0: no answer), `detail` what
    Prolific said (or what went wrong on the way)."""

    def __init__(self, detail: str, *, status: int = 0) -> None:
        super().__init__(f"Prolific answered {status}: {detail}" if status else detail)
        self.status = status
        self.detail = detail


class ProlificAuthError(ProlificError):
    """401/403: the token is missing, wrong or not allowed."""


class ProlificNotFound(ProlificError):
    """404: no such study or submission (for this token)."""


class ProlificRejected(ProlificError):
    """400/422: Prolific refused the request for its content."""


class ProlificUnavailable(ProlificError):
    """No answer, 429 or 5xx after the retries."""


def _message(response: requests.Response) -> str:
    """Prolific's error text: its body is `{"error": {"detail": ..., "title": ...}}` (assumed
    from the docs' examples); any other JSON or text is passed on, shortened."""
    try:
        body = response.json()
    except ValueError:
        return (response.text or response.reason or "")[:500]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            for key in ("detail", "title", "message"):
                if error.get(key):
                    detail = error[key]
                    return str(detail if not isinstance(detail, list) else "; ".join(
                        map(str, detail)))[:500]
        return str(error)[:500]
    return str(body)[:500]


@dataclass
class ProlificClient:
    token: str
    base_url: str = DEFAULT_URL
    timeout: float = 15.0
    retries: int = 3
    backoff: float = 1.0
    max_wait: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    session: requests.Session = field(default_factory=requests.Session)

    def _url(self, path: str) -> str:
        base = self.base_url.rstrip("/") + "/"
        if path.startswith(("http://", "https://")):
            # A `next` link from an answer: followed only under the API's own base URL, so the
            # token never goes anywhere else.
            if not path.startswith(base):
                raise ProlificError(f"Prolific's answer pointed outside {base}; not followed.")
            return path
        return urljoin(base, path.lstrip("/"))

    def _wait(self, attempt: int, response: requests.Response | None) -> float:
        wait = self.backoff * (2 ** attempt)
        if response is not None and response.headers.get("Retry-After"):
            with contextlib.suppress(ValueError):  # an HTTP date: keep the backoff
                wait = float(response.headers["Retry-After"])
        return max(0.0, min(wait, self.max_wait))

    def request(self, method: str, path: str, *, json: Any = None,
                params: dict[str, Any] | None = None) -> Any:
        if not self.token:
            raise ProlificAuthError("No Prolific API token is set for this study.")
        headers = {"Authorization": f"Token {self.token}", "Accept": "application/json"}
        url = self._url(path)
        for attempt in range(self.retries + 1):
            response: requests.Response | None = None
            try:
                response = self.session.request(method, url, json=json, params=params,
                                                headers=headers, timeout=self.timeout,
                                                allow_redirects=False)
            except requests.RequestException as exc:
                failure: ProlificError = ProlificUnavailable(
                    f"Prolific did not answer: {type(exc).__name__}")
            else:
                status = response.status_code
                if status < 300:
                    return response.json() if response.content else {}
                detail = _message(response)
                if status in (401, 403):
                    raise ProlificAuthError(detail, status=status)
                if status == 404:
                    raise ProlificNotFound(detail, status=status)
                if status == 429 or status >= 500:
                    failure = ProlificUnavailable(detail, status=status)
                else:
                    raise ProlificRejected(detail, status=status)
            # A POST that got no answer may have been done: only 429 (refused before any
            # work) is retried for writes; reads are retried on every transient failure.
            retry = response is not None and response.status_code == 429
            if method.upper() == "GET":
                retry = True
            if not retry or attempt == self.retries:
                raise failure
            self.sleep(self._wait(attempt, response))
        raise AssertionError("unreachable")

    def paginate(self, path: str) -> Iterator[dict[str, Any]]:
        """Every result of a paginated list: pages are followed through `_links.next.href`
        (Prolific's shape) or a top-level `next` URL."""
        url: str | None = path
        seen = 0
        while url:
            page = self.request("GET", url)
            if isinstance(page, list):
                yield from page
                return
            yield from page.get("results", [])
            links = page.get("_links") or {}
            nxt = (links.get("next") or {}).get("href") if isinstance(links, dict) else None
            url = nxt or page.get("next")
            seen += 1
            if seen > 10_000:  # a server that always answers "next": stop
                raise ProlificError("Prolific's pagination did not end.")

    # --- the calls used ------------------------------------------------------------------
    def study(self, study_id: str) -> dict[str, Any]:
        return self.request("GET", f"studies/{quote(study_id, safe='')}/")

    def submissions(self, study_id: str) -> Iterator[dict[str, Any]]:
        return self.paginate(f"studies/{quote(study_id, safe='')}/submissions/")

    def transition(self, submission_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", f"submissions/{quote(submission_id, safe='')}/transition/",
                            json=body)

    def bonus_create(self, study_id: str, csv_bonuses: str) -> dict[str, Any]:
        return self.request("POST", "submissions/bonus-payments/",
                            json={"study_id": study_id, "csv_bonuses": csv_bonuses})

    def bonus_pay(self, bulk_id: str) -> dict[str, Any]:
        return self.request("POST", f"bulk-bonus-payments/{quote(bulk_id, safe='')}/pay/")

    def study_create(self, body: dict[str, Any]) -> dict[str, Any]:
        """A draft study (Prolific: "Create a draft study"); publishing stays a human step."""
        return self.request("POST", "studies/", json=body)

    def message(self, recipient_id: str, study_id: str, body: str) -> dict[str, Any]:
        """One message to one participant about one study (Prolific: "Send a message")."""
        return self.request("POST", "messages/", json={
            "recipient_id": recipient_id, "study_id": study_id, "body": body})
