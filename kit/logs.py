"""Log lines without credentials. A rater's personal entry link (/enter/<token>/) and Django's
password-reset link (/accounts/reset/<uidb64>/<token>/) carry secrets in their path; a log
line cannot be erased with a rater's data, and anyone who reads it could act with them.
Used by gunicorn's access log (config/gunicorn.conf.py) and Django's own log (LOGGING)."""

from __future__ import annotations

import logging
import re

_SECRET_SEGMENT = re.compile(r"(/enter/|/reset/[^/?#]*/)[^/?#\s\"']+")


def mask_secret_path(path: str) -> str:
    """The path without its query string and with every secret segment replaced by
    `<token>`: "/enter/AbC123/?x=1" -> "/enter/<token>/"."""
    return _SECRET_SEGMENT.sub(r"\1<token>", path.partition("?")[0])


class MaskSecretPaths(logging.Filter):
    """Masks secret path segments in any record's message (e.g. Django's "Not Found: <path>"),
    without dropping the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = _SECRET_SEGMENT.sub(r"\1<token>", message)
        if masked != message:
            record.msg, record.args = masked, None
        return True
