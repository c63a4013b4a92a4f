"""Checking the values of a parsed document, field by field: the checks of each field (they
return the cleaned value or raise ValueError saying why) and a reader that records every
problem with its line and path."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

from .. import criteria as rules
from ..blindness import identity_terms_clean
from ..criteria import gettext_noop
from ..media_fetch import ref_problem as media_ref_problem
from .errors import SpecError
from .limits import MAX_FIELD_CHARS
from .load import LineList, LineMap

DESIGNS = ("latin_square", "crossed", "pairwise", "ranking", "best_worst", "adaptive")
# Designs whose seats show two outputs side by side (adaptive: pairwise seats built as raters
# arrive, evalstudy.services.adaptive).
PAIRWISE_DESIGNS = ("pairwise", "adaptive")
SLUG_RE = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")


def type_name(value: Any) -> str:
    """What a value is, in the words of the file (not the loader's class names)."""
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


# The study settings a spec may give: name -> (check, default). A check returns the cleaned
# value or raises ValueError with the reason.
def as_text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected text, got {type_name(value)}")
    text = str(value)
    if len(text) > MAX_FIELD_CHARS:
        raise ValueError(f"longer than {MAX_FIELD_CHARS} characters")
    return text


def _int(minimum: int, nullable: bool = False) -> Callable[[Any], int | None]:
    def check(value: Any) -> int | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {value!r}")
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return check


def _number_or_none(minimum: float, maximum: float | None = None
                    ) -> Callable[[Any], float | None]:
    """A number (whole or not) in [minimum, maximum], or null."""
    def check(value: Any) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"expected a number, got {value!r}")
        if value < minimum or (maximum is not None and value > maximum):
            upper = f" and at most {maximum}" if maximum is not None else ""
            raise ValueError(f"must be at least {minimum}{upper}, got {value}")
        return float(value)

    return check


def _whole_or_none(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


def as_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _slug(value: Any) -> str:
    text = as_text(value)
    if not SLUG_RE.match(text) or len(text) > 80:
        raise ValueError(f"{text!r} is not a slug (lowercase letters, digits, - and _)")
    return text


def one_of(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"{value!r} is not one of {', '.join(options)}")
        return str(value)

    return check


def _url(value: Any) -> str:
    text = as_text(value)
    if text and not re.match(r"^https?://[^\s]+$", text):
        raise ValueError(f"{text!r} is not an http(s) URL")
    if len(text) > 500:  # Study.completion_url's max_length
        raise ValueError("longer than 500 characters")
    return text


def _short(limit: int) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        text = as_text(value)
        if len(text) > limit:
            raise ValueError(f"longer than {limit} characters")
        return text

    return check


# What raters see the panes, buttons and end page called, by key, when the study names nothing
# else: neutral words, so that a study about summaries or notes never reads like one about ASR
# (an ASR study names the reference "What was said", as the demo does).
RATER_LABEL_DEFAULTS = {
    "reference": gettext_noop("Reference"),
    "context": gettext_noop("Context"),
    "output": gettext_noop("Output"),
    "output_a": "A",
    "output_b": "B",
    "output_c": "C",
    "output_d": "D",
    "output_e": "E",
    "output_f": "F",
    "submit": gettext_noop("Submit"),
    "previous": gettext_noop("Previous item"),
    "done": gettext_noop("You have finished every item. Thank you!"),
    "consent_agree": gettext_noop("I agree and want to take part"),
    "consent_decline": gettext_noop("I do not agree"),
    "start": gettext_noop("Start"),
    "continue": gettext_noop("Continue"),
}
RATER_LABEL_MAX_CHARS = 200
# The languages the rater interface is translated into (settings.LANGUAGES).
RATER_LANGUAGES = ("en", "fr", "es")



def rater_labels_clean(value: Any) -> dict[str, str]:
    """A study's own words for what raters see: a mapping from keys of RATER_LABEL_DEFAULTS to
    non-blank text of at most RATER_LABEL_MAX_CHARS characters (surrounding spaces removed);
    keys left out keep their default. Raises ValueError naming the key and why."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of label names to text, got {type_name(value)}")
    cleaned = {}
    for key, text in value.items():
        if key not in RATER_LABEL_DEFAULTS:
            raise ValueError(f"{key!r} is not a label raters see; the labels are "
                             f"{', '.join(RATER_LABEL_DEFAULTS)}")
        if not isinstance(text, str):  # a number is refused too: write the text you mean
            raise ValueError(f"{key}: expected text, got {type_name(text)}")
        text = text.strip()
        if not text:
            raise ValueError(f"{key}: blank (leave the label out to keep {key!r}'s default)")
        if len(text) > RATER_LABEL_MAX_CHARS:
            raise ValueError(f"{key}: longer than {RATER_LABEL_MAX_CHARS} characters")
        cleaned[key] = text
    return cleaned


_REQUIRED = object()
STUDY_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "slug": (_slug, _REQUIRED),
    "title": (_short(200), _REQUIRED),
    "instructions": (as_text, ""),
    "consent_text": (as_text, ""),
    "design": (one_of(DESIGNS), "latin_square"),
    "ratings_per_output": (_int(1), 1),
    "items_per_rater": (_int(1, nullable=True), None),
    "tuple_size": (_int(2, nullable=True), None),
    "randomise_order": (as_bool, True),
    "reference_shown": (as_bool, True),
    "completion_url": (_url, ""),
    "completion_code": (_short(64), ""),
    "screen_out_url": (_url, ""),
    "screen_out_code": (_short(64), ""),
    "crowd_platform": (one_of(("none", "prolific", "mturk", "other")), "none"),
    "crowd_no_codes": (as_bool, False),
    "lease_minutes": (_int(1), 60),
    "attention_check_every": (_int(0), 0),
    "attention_fail_limit": (_int(1, nullable=True), None),
    "speeder_seconds": (_number_or_none(0.0), None),
    "calibration_pass_mark": (_number_or_none(0.0, 1.0), None),
    "allow_revision": (as_bool, True),
    "encoder_path": (_short(500), ""),
    "language": (one_of(RATER_LANGUAGES), "en"),
    "alignment_shown": (as_bool, False),
    "media_must_finish": (as_bool, False),
    "media_max_plays": (_int(1, nullable=True), None),
    "media_autoplay": (as_bool, False),
    "rater_labels": (rater_labels_clean, {}),
    "identity_terms": (identity_terms_clean, list),
}


# --- a small reader that records errors with their place -------------------------------------
class Reader:
    def __init__(self, source: str):
        self.source = source
        self.errors: list[SpecError] = []

    def error(self, line: int | None, path: str, message: str) -> None:
        self.errors.append(SpecError(self.source, line, path, message))

    @staticmethod
    def line_of(container: Any, key: Any = None) -> int | None:
        if isinstance(container, LineMap):
            return container.key_lines.get(key, container.line) if key is not None else (
                container.line
            )
        if isinstance(container, LineList) and isinstance(key, int):
            return container.item_lines[key]
        return getattr(container, "line", None)

    def mapping(self, value: Any, path: str, line: int | None) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.error(line, path, f"expected a mapping, got {type_name(value)}")
            return None
        return value

    def sequence(self, value: Any, path: str, line: int | None) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(line, path, f"expected a list, got {type_name(value)}")
            return []
        return value

    def fields(
        self, mapping: dict[str, Any], path: str, known: dict[str, tuple[Callable[[Any], Any], Any]]
    ) -> dict[str, Any]:
        """Check `mapping` against `known` (name -> (check, default)); unknown keys are errors."""
        cleaned: dict[str, Any] = {}
        for key in mapping:
            if key not in known:
                self.error(self.line_of(mapping, key), f"{path}.{key}",
                           f"unknown field; expected one of {', '.join(known)}")
        for name, (check, default) in known.items():
            if name not in mapping or (mapping[name] is None and default is not _REQUIRED):
                if default is _REQUIRED:
                    self.error(self.line_of(mapping), path, f"missing required field {name!r}")
                else:
                    cleaned[name] = default() if callable(default) else default
                continue
            try:
                cleaned[name] = check(mapping[name])
            except ValueError as error:
                self.error(self.line_of(mapping, name), f"{path}.{name}", str(error))
        return cleaned

    def entries(self, document: dict[str, Any], key: str) -> Iterator[tuple[int, Any, str, int]]:
        """(index, entry, path, line) for each entry of the list at document[key]."""
        seq = self.sequence(document.get(key), key, self.line_of(document, key))
        for index, entry in enumerate(seq):
            yield index, entry, f"{key}[{index}]", self.line_of(seq, index) or 0


def _key(value: Any, limit: int = 200) -> str:
    text = as_text(value).strip()
    if not text:
        raise ValueError("must not be empty")
    if len(text) > limit:
        raise ValueError(f"longer than {limit} characters")
    return text


def key_up_to(limit: int) -> Callable[[Any], str]:
    """A key at most `limit` characters long (the database column's max_length)."""
    return lambda value: _key(value, limit)


def _metadata(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping, got {type_name(value)}")
    return {str(key): _plain(val) for key, val in value.items()}


def _plain(value: Any) -> Any:
    """Loader containers back to plain dict/list (for JSON fields and comparisons).

    YAML reads an unquoted 2024-01-31 as a date, which a JSON field cannot store: it is kept
    as the ISO text it was written as.
    """
    if isinstance(value, dict):
        return {str(key): _plain(val) for key, val in value.items()}
    if isinstance(value, list | tuple):  # tuples: the pairs of a YAML !!omap
        return [_plain(val) for val in value]
    if isinstance(value, dt.date):
        return value.isoformat()
    # What YAML can write but a JSON field cannot hold (the database would refuse the row).
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is not a finite number; a JSON field cannot hold it")
    if isinstance(value, set | frozenset):
        raise ValueError("a set (!!set) cannot be stored; write a list")
    if isinstance(value, bytes):
        raise ValueError("binary data (bytes, !!binary) cannot be stored; write text")
    return value


def _str_list(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list, got {type_name(value)}")
    return [as_text(v) for v in value]


def _labels(value: Any) -> list[str] | dict[str, str]:
    if isinstance(value, dict):
        return {str(key): as_text(val) for key, val in value.items()}
    return _str_list(value)


def _show_if(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or "criterion" not in value or (
        ("in" in value) == ("equals" in value)
    ):
        raise ValueError("expected {criterion: KEY, in: [VALUES]} or {criterion: KEY, equals: V}")
    values = value["in"] if "in" in value else [value["equals"]]
    if not isinstance(values, list) or not values:
        raise ValueError("'in' must be a non-empty list of values")
    return {"criterion": as_text(value["criterion"]), "values": list(values)}


def as_media_ref(value: Any) -> str:
    """A media file's path (relative to the media archive or directory) or https URL: its
    syntax only; whether it exists and plays is checked on import (evalstudy.media)."""
    text = as_text(value).strip()
    if text and (problem := media_ref_problem(text)) is not None:
        raise ValueError(problem)
    return text


CRITERION_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "key": (key_up_to(60), _REQUIRED),
    "kind": (one_of(rules.KINDS), _REQUIRED),
    "prompt": (as_text, _REQUIRED),
    "description": (as_text, ""),
    "scale_points": (_int(1, nullable=True), None),
    "labels": (_labels, list),
    "options": (_str_list, list),
    "allow_tie": (as_bool, False),
    "allow_both": (as_bool, False),
    "required": (as_bool, True),
    "show_if": (_show_if, None),
    "scale_min": (_whole_or_none, None),
    "scale_max": (_whole_or_none, None),
    "severity_weights": (_metadata, dict),
    "span_reference": (as_bool, False),
}
SYSTEM_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "name": (key_up_to(100), _REQUIRED),
    "description": (as_text, ""),
    "metadata": (_metadata, dict),
}
ITEM_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "id": (_key, _REQUIRED),
    "reference": (as_text, ""),
    "context": (as_text, ""),
    "metadata": (_metadata, dict),
    "outputs": (lambda v: {str(k): as_text(t) for k, t in _metadata(v).items()}, dict),
    "media": (as_media_ref, ""),
    "output_media": (lambda v: {str(k): as_media_ref(t) for k, t in _metadata(v).items()}, dict),
}
CONTROL_FIELDS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "id": (key_up_to(100), _REQUIRED),
    "reference": (as_text, ""),
    "context": (as_text, ""),
    "output": (as_text, None),
    "output_a": (as_text, None),
    "output_b": (as_text, None),
    "expected": (_metadata, dict),
    "feedback": (as_text, ""),
}
