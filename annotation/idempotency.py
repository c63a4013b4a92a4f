"""`Idempotency-Key` for rater submissions: a retried request gets the stored response.

A client that cannot tell whether its request arrived (a timeout, a dropped connection)
resends it with the same key; the second answer is the first answer, not a second effect. The
slot+criterion uniqueness of judgments already makes a resubmission harmless; the key also
makes the *response* the same (e.g. "created" rather than "unchanged") and catches a client
that reuses a key for a different request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from evalstudy.models import Rater

from .models import IdempotencyKey

MAX_KEY_LENGTH = 255


class IdempotencyKeyReused(Exception):
    """The key was used before with a different request."""


@dataclass(frozen=True)
class StoredResponse:
    status: int
    body: dict[str, Any]
    replayed: bool


def request_fingerprint(method: str, path: str, body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{method} {path}\n{canonical}".encode()).hexdigest()


def idempotent_call(
    *, rater: Rater, key: str, fingerprint: str, call: Callable[[], tuple[int, dict[str, Any]]]
) -> StoredResponse:
    """Run `call` once per (rater, key) and store its (status, body); a later call with the same
    key and fingerprint replays it. Raises IdempotencyKeyReused for the same key with another
    fingerprint. Server errors (an exception from `call`) are not stored, so a retry runs again.

    Precondition: `call` is itself safe to run twice (two first requests racing both run it;
    the loser of the insert then replays the winner's response).
    """
    stored = IdempotencyKey.objects.filter(rater=rater, key=key).first()
    if stored is None:
        status, body = call()
        try:
            with transaction.atomic():
                IdempotencyKey.objects.create(rater=rater, key=key, fingerprint=fingerprint,
                                              status_code=status, response=body)
            return StoredResponse(status, body, replayed=False)
        except IntegrityError:
            stored = IdempotencyKey.objects.get(rater=rater, key=key)
    if stored.fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            f"Idempotency-Key {key!r} was used for a different request; use a new key for a "
            "new request."
        )
    return StoredResponse(stored.status_code, stored.response, replayed=True)
