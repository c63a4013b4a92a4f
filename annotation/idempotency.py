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

    The key is claimed before `call` runs: a placeholder row is inserted in the transaction
    that then runs `call` and fills in its response. A second request with the same key blocks
    on that row (the unique index, or the row lock) until the first commits, and then replays
    or refuses; it never runs `call` beside the first. If `call` raises, the transaction rolls
    back, the claim with it, and the waiting request runs `call` itself.

    Precondition: `call` writes only through this database connection (its writes commit or
    roll back with the claim).
    """
    with transaction.atomic():
        stored = (IdempotencyKey.objects.select_for_update()
                  .filter(rater=rater, key=key).first())
        if stored is None:
            try:
                with transaction.atomic():  # a savepoint: a lost insert race leaves us usable
                    claim = IdempotencyKey.objects.create(
                        rater=rater, key=key, fingerprint=fingerprint, status_code=0,
                        response={})
            except IntegrityError:
                # Another request held the claim and committed while we waited on the index.
                stored = IdempotencyKey.objects.select_for_update().get(rater=rater, key=key)
            else:
                status, body = call()
                claim.status_code, claim.response = status, body
                claim.save(update_fields=["status_code", "response"])
                return StoredResponse(status, body, replayed=False)
    if stored.fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            f"Idempotency-Key {key!r} was used for a different request; use a new key for a "
            "new request."
        )
    return StoredResponse(stored.status_code, stored.response, replayed=True)
