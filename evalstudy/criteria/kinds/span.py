"""Error spans (MQM, ESA): the spans a rater marked in the text shown, as canonical JSON
{"spans": [{"start", "end", "side", "category", "severity"}], "text_sha256"}: character
offsets (Python string indices, end exclusive) into the exact text, whose SHA-256 is stored
with them so that an answer can never be read against another text. Its number is the MQM
penalty: the sum of the spans' severity weights."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .base import AnswerKind, Translate, gettext_noop, untranslated

if TYPE_CHECKING:
    from ..rule import CriterionRule, ShownText

# MQM's standard severity weights (Freitag et al. 2021, "Experts, errors, and context"): a
# minor error costs 1, a major one 5; a critical error (non-translation, or output that
# endangers a reader) is given 25 as in their non-translation category. A criterion may set
# its own weights (and its own severity names).
MQM_DEFAULT_WEIGHTS: Mapping[str, float] = {
    gettext_noop("minor"): 1.0, gettext_noop("major"): 5.0, gettext_noop("critical"): 25.0}
MAX_SPANS = 200
SIDES = ("output", "reference")
MAX_CATEGORIES = 50
MAX_SEVERITIES = 10


def text_sha256(text: str) -> str:
    """The digest a span answer carries of the text it marks (UTF-8, as shown)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def span_weights(rule: CriterionRule) -> dict[str, float]:
    """A span criterion's severities and what each costs (MQM's unless it sets its own)."""
    own = rule.severity_weights
    return {str(k): float(v) for k, v in own.items()} if own else dict(MQM_DEFAULT_WEIGHTS)


class Span(AnswerKind):
    name = "span"
    label = "Error spans (MQM, ESA)"
    order = 80
    description = "Mark the words of each error, with its category and severity (MQM, ESA)."
    settings = ("options", "severity_weights", "span_reference")
    slot_bound = True
    score = "penalty"
    analysis = ("spans",)
    marks_spans = True

    def normalise(self, rule: CriterionRule, raw: object, shown: ShownText | None) -> str:
        if shown is None:
            raise ValueError("span answers are checked against the text they mark, which is "
                             "not known here")
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw.strip() else {}
            except ValueError:
                raise ValueError("the spans are not valid JSON") from None
        if not isinstance(raw, Mapping):
            raise ValueError('the spans must be an object {"spans": [...], "text_sha256": ...}')
        digest = text_sha256(shown.output)
        if raw.get("text_sha256") != digest:
            raise ValueError("the spans were marked on another text than the one shown (its "
                             "SHA-256 differs): reload the item")
        spans = raw.get("spans", [])
        if not isinstance(spans, list) or len(spans) > MAX_SPANS:
            raise ValueError(f"spans must be a list of at most {MAX_SPANS}")
        categories = {str(option).lower(): str(option) for option in rule.options}
        weights = span_weights(rule)
        sides = SIDES if rule.span_reference else SIDES[:1]
        texts = {"output": shown.output, "reference": shown.reference}
        cleaned: list[dict[str, Any]] = []
        for number, span in enumerate(spans, start=1):
            if not isinstance(span, Mapping):
                raise ValueError(f"span {number} is not an object")
            side = str(span.get("side", "output"))
            if side not in sides:
                raise ValueError(f"span {number}: side {side!r} is not one of "
                                 f"{', '.join(sides)}")
            start, end = span.get("start"), span.get("end")
            if (not isinstance(start, int) or not isinstance(end, int)
                    or isinstance(start, bool) or isinstance(end, bool)
                    or not 0 <= start < end <= len(texts[side])):
                raise ValueError(f"span {number}: start and end must be offsets into the "
                                 f"{side} (0 <= start < end <= {len(texts[side])})")
            if not texts[side][start:end].strip():
                raise ValueError(f"span {number} marks only white space")
            category = categories.get(str(span.get("category", "")).lower())
            if category is None:
                raise ValueError(f"span {number}: category {span.get('category')!r} is not "
                                 f"one of {', '.join(repr(c) for c in categories.values())}")
            severity = str(span.get("severity", ""))
            if severity not in weights:
                raise ValueError(f"span {number}: severity {severity!r} is not one of "
                                 f"{', '.join(repr(s) for s in weights)}")
            cleaned.append({"start": start, "end": end, "side": side, "category": category,
                            "severity": severity})
        cleaned.sort(key=lambda s: (SIDES.index(str(s["side"])), s["start"], s["end"]))
        for before, after in itertools.pairwise(cleaned):
            if before["side"] == after["side"] and after["start"] < before["end"]:
                raise ValueError(f"spans overlap in the {before['side']} at characters "
                                 f"{after['start']}-{before['end']}: mark each error once")
        return json.dumps({"spans": cleaned, "text_sha256": digest}, ensure_ascii=False,
                          separators=(",", ":"))

    def numeric(self, rule: CriterionRule, value: str) -> float | None:
        if value == "":
            return None
        weights = span_weights(rule)
        return float(sum(weights.get(span["severity"], 0.0)
                         for span in json.loads(value)["spans"]))

    def problems(self, rule: CriterionRule) -> list[str]:
        options = list(rule.options)
        problems = []
        if len(options) < 1:
            problems.append("span needs at least 1 error category (its options)")
        if len(options) > MAX_CATEGORIES:
            problems.append(f"span takes at most {MAX_CATEGORIES} error categories")
        if len({str(option).lower() for option in options}) != len(options):
            problems.append("span options must be distinct (ignoring case)")
        problems += _weight_problems(rule.severity_weights)
        if rule.labels:
            problems.append("span criteria take no labels (their categories are the options)")
        return problems

    def widget(self, rule: CriterionRule, answer: str, letters: str,
               translate: Translate = untranslated) -> dict[str, Any] | None:
        """Its error categories and severities (with their weights; MQM's own severity
        names are translated for the rater, a study's are its own) and whether the
        reference may be marked too."""
        return {"categories": list(rule.options),
                "severities": [{"name": name, "weight": weight,
                                "label": translate(name) if name in MQM_DEFAULT_WEIGHTS
                                else name}
                               for name, weight in span_weights(rule).items()],
                "reference": rule.span_reference}

    def answer_error(self, rule: CriterionRule, error: ValueError,
                     translate: Translate = untranslated) -> str:
        return (translate(gettext_noop("the marked errors could not be saved: %(reason)s"))
                % {"reason": error})

    # --- added for evalstudy (opening checks, study files, practice items) ---
    one_per_study = True
    one_output_only = True
    takes_expected = False


def _weight_problems(weights: Mapping[str, object] | None) -> list[str]:
    if weights is None or weights == {}:
        return []
    if not isinstance(weights, Mapping):
        return ['severity_weights must map severity names to weights, e.g. {"minor": 1, '
                '"major": 5, "critical": 25}']
    problems = []
    if len(weights) > MAX_SEVERITIES:
        problems.append(f"at most {MAX_SEVERITIES} severities")
    for name, weight in weights.items():
        if not str(name).strip() or len(str(name)) > 40:
            problems.append(f"severity name {name!r} must be 1 to 40 characters")
        if (isinstance(weight, bool) or not isinstance(weight, int | float)
                or not math.isfinite(weight) or not 0 <= weight <= 1000):
            problems.append(f"severity {name!r}: the weight must be a number from 0 to 1000")
    return problems


KIND = Span()
