"""What each criterion kind accepts, as plain functions (no Django).

Values are stored as text, in one canonical spelling per kind, so that an answer from the
browser, an import file or a proxy judge compares equal when it means the same thing:

- likert: "1".."n";  binary: "yes"/"no";  severity: "0"/"1"/"2";
- pairwise: "A"/"B" (or "tie" when the criterion allows ties, and "both_good"/"both_bad" when
  it allows the absolute answers: neither preferred, and where the pair stands; plain
  preference statistics read all three as no preference, the joint model of
  `analysis.stats.pairwise_joint` reads the level too);
- categorical: one of the options, spelled as configured;  text: any string;
- ranking: the outputs shown, best first, by their letters: "B>A>C" (every letter once);
- best_worst: the best and the worst of the outputs shown: "best=A;worst=C";
- slider: a whole number in the criterion's range ("0".."100" by default: direct assessment);
- span: the error spans a rater marked in the text shown, as canonical JSON
  {"spans": [{"start", "end", "side", "category", "severity"}], "text_sha256"}: character
  offsets (Python string indices, end exclusive) into the exact text, whose SHA-256 is stored
  with them so that an answer can never be read against another text (MQM, ESA).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LIKERT = "likert"
BINARY = "binary"
SEVERITY = "severity"
PAIRWISE = "pairwise"
CATEGORICAL = "categorical"
TEXT = "text"
SLIDER = "slider"
SPAN = "span"
RANKING = "ranking"
BEST_WORST = "best_worst"
KINDS = (LIKERT, BINARY, SEVERITY, PAIRWISE, CATEGORICAL, TEXT, SLIDER, SPAN, RANKING,
         BEST_WORST)
#: Kinds whose answers are read against the slot they answer (its text, how many outputs it
#: shows): the rater loop's fast path leaves them to the general path.
SLOT_BOUND_KINDS = frozenset({SPAN, RANKING, BEST_WORST})
#: Kinds that judge several outputs of one item at once (the ranking and best-worst designs).
TUPLE_KINDS = frozenset({RANKING, BEST_WORST})
# The letters outputs are shown under (A, B, ...): at most six outputs in one slot.
LETTERS = "ABCDEF"


def gettext_noop(text: str) -> str:
    """Marks `text` for translation (`makemessages` collects it; the Django layer translates
    it when it shows it to a rater). The identity: this module knows nothing of Django."""
    return text


LIKERT_MIN_POINTS = 2
LIKERT_MAX_POINTS = 11
TEXT_MAX_LENGTH = 10_000
# Direct assessment's 0-100 scale (WMT, Graham et al. 2013), the default slider range; a
# configured range stays within SLIDER_LIMIT either side of 0 and spans at least 2 points.
SLIDER_DEFAULT_RANGE = (0, 100)
SLIDER_LIMIT = 10_000
# MQM's standard severity weights (Freitag et al. 2021, "Experts, errors, and context"): a
# minor error costs 1, a major one 5; a critical error (non-translation, or output that
# endangers a reader) is given 25 as in their non-translation category. A criterion may set
# its own weights (and its own severity names).
MQM_DEFAULT_WEIGHTS: Mapping[str, float] = {
    gettext_noop("minor"): 1.0, gettext_noop("major"): 5.0, gettext_noop("critical"): 25.0}
SPAN_MAX_SPANS = 200
SPAN_SIDES = ("output", "reference")
SPAN_MAX_CATEGORIES = 50
SPAN_MAX_SEVERITIES = 10

# LATTE's human scale: 0 meaning fully preserved, 1 mostly preserved, 2 meaning lost.
SEVERITY_DEFAULT_LABELS = (
    gettext_noop("Meaning fully preserved"),
    gettext_noop("Meaning mostly preserved (minor errors)"),
    gettext_noop("Meaning lost or changed"),
)

#: Pairwise answers that prefer neither output: a tie, and the absolute "both" answers.
TIE = "tie"
BOTH_GOOD = "both_good"
BOTH_BAD = "both_bad"
NO_PREFERENCE = (TIE, BOTH_GOOD, BOTH_BAD)
# Spellings read as each (after lower-casing and joining words with "_"): import files and
# judges write "both good", "Both-Bad", "both are bad".
_PAIRWISE_WORDS = {
    "tie": TIE,
    "both_good": BOTH_GOOD, "bothgood": BOTH_GOOD, "both_are_good": BOTH_GOOD,
    "both_bad": BOTH_BAD, "bothbad": BOTH_BAD, "both_are_bad": BOTH_BAD,
}

_YES = {"yes", "y", "true", "1"}
_NO = {"no", "n", "false", "0"}


def pairwise_choices(allow_tie: object, allow_both: object) -> list[str]:
    """A pairwise criterion's answers, in display order."""
    return (["A", "B"] + ([TIE] if allow_tie else [])
            + ([BOTH_GOOD, BOTH_BAD] if allow_both else []))


@dataclass(frozen=True)
class CriterionRule:
    """The parts of a criterion that decide which values are valid."""

    kind: str
    scale_points: int | None = None
    options: Sequence[str] = field(default_factory=tuple)
    allow_tie: bool = False
    allow_both: bool = False  # pairwise: "both good" and "both bad" as answers of their own
    scale_min: int | None = None
    scale_max: int | None = None
    severity_weights: Mapping[str, float] | None = None
    span_reference: bool = False

    @property
    def slider_range(self) -> tuple[int, int]:
        """The slider's (lowest, highest) value: its own range, else direct assessment's."""
        if self.scale_min is None or self.scale_max is None:
            return SLIDER_DEFAULT_RANGE
        return int(self.scale_min), int(self.scale_max)

    @property
    def weights(self) -> dict[str, float]:
        """A span criterion's severities and what each costs (MQM's unless it sets its own)."""
        own = self.severity_weights
        return {str(k): float(v) for k, v in own.items()} if own else dict(MQM_DEFAULT_WEIGHTS)

    def choices(self) -> list[str] | None:
        """The canonical values, in display order; None for free text, sliders and spans."""
        if self.kind == LIKERT:
            return [str(point) for point in range(1, (self.scale_points or 0) + 1)]
        if self.kind == BINARY:
            return ["yes", "no"]
        if self.kind == SEVERITY:
            return ["0", "1", "2"]
        if self.kind == PAIRWISE:
            return pairwise_choices(self.allow_tie, self.allow_both)
        if self.kind == CATEGORICAL:
            return list(self.options)
        return None

    def normalise(self, raw: object, shown: ShownText | None = None) -> str:
        """Return the canonical spelling of `raw`, or raise ValueError saying why it is invalid.

        `shown`: the texts the rater saw, which a span answer is checked against (a span answer
        without them is refused: its offsets mean nothing without the text)."""
        if raw is None:
            raise ValueError("a value is required")
        if self.kind == SPAN:
            return _spans_canonical(self, raw, shown)
        if self.kind in TUPLE_KINDS:
            letters = LETTERS[:shown.n_outputs] if shown is not None else ""
            if len(letters) < 2:
                raise ValueError(f"{self.kind} answers are read against the outputs shown, "
                                 "which are not known here")
            return (_ranking_canonical(raw, letters) if self.kind == RANKING
                    else _best_worst_canonical(raw, letters))
        if isinstance(raw, bool):
            text = "yes" if raw else "no"
        elif isinstance(raw, float) and raw.is_integer():
            text = str(int(raw))
        else:
            text = str(raw).strip()
        if self.kind == TEXT:
            if len(text) > TEXT_MAX_LENGTH:
                raise ValueError(f"text longer than {TEXT_MAX_LENGTH} characters")
            return text
        if text == "":
            raise ValueError("a value is required")
        if self.kind == BINARY:
            lowered = text.lower()
            if lowered in _YES:
                return "yes"
            if lowered in _NO:
                return "no"
        elif self.kind == PAIRWISE:
            upper = text.upper()
            if upper in {"A", "B"}:
                return upper
            word = _PAIRWISE_WORDS.get(re.sub(r"[\s_-]+", "_", text.lower()))
            if (word == TIE and self.allow_tie) or (
                    word in (BOTH_GOOD, BOTH_BAD) and self.allow_both):
                return word
        elif self.kind == CATEGORICAL:
            for option in self.options:
                if text == option or text.lower() == option.lower():
                    return option
        elif self.kind == SLIDER:
            return self._slider_value(text)
        else:
            choices = self.choices() or []
            if text in choices:
                return text
        allowed = ", ".join(repr(choice) for choice in self.choices() or [])
        raise ValueError(f"{text!r} is not one of {allowed}")

    def normalise_expected(self, raw: object) -> str:
        """An expected answer (practice items, attention checks): a value, or for a slider a
        range "lo..hi" of acceptable scores (e.g. "0..30" for a degraded output, as direct
        assessment's quality control uses them)."""
        if self.kind == SLIDER and isinstance(raw, str) and ".." in raw:
            low, _, high = raw.partition("..")
            low, high = self._slider_value(low.strip()), self._slider_value(high.strip())
            if int(low) > int(high):
                raise ValueError(f"the range {raw!r} is empty")
            return f"{low}..{high}"
        return self.normalise(raw)

    def _slider_value(self, text: str) -> str:
        low, high = self.slider_range
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number from {low} to {high}") from None
        if not math.isfinite(number) or not number.is_integer() or not low <= number <= high:
            raise ValueError(f"{text!r} is not a whole number from {low} to {high}")
        return str(int(number))

    def numeric(self, value: str) -> float | None:
        """A number for ordered kinds (likert points, severity levels, slider positions), and
        for spans their MQM penalty (the sum of the spans' severity weights); None otherwise."""
        if value == "":
            return None
        if self.kind in (LIKERT, SEVERITY, SLIDER):
            return float(value)
        if self.kind == SPAN:
            weights = self.weights
            return float(sum(weights.get(span["severity"], 0.0)
                             for span in json.loads(value)["spans"]))
        return None


@dataclass(frozen=True)
class ShownText:
    """What a rater saw of one slot: the output marked, and the reference when shown."""

    output: str
    reference: str = ""
    n_outputs: int = 1  # outputs shown side by side (ranking and best-worst slots: 2 to 6)


_RANGE = re.compile(r"(-?\d+)\.\.(-?\d+)")


def expected_met(given: str | None, expected: object) -> bool:
    """Whether an answer meets an expected one: equal, or for a slider's range "lo..hi" a
    score inside it."""
    expected = str(expected)
    if given == expected:
        return True
    found = _RANGE.fullmatch(expected)
    if found is None or given is None or not re.fullmatch(r"-?\d+", given):
        return False
    return int(found.group(1)) <= int(given) <= int(found.group(2))


def text_sha256(text: str) -> str:
    """The digest a span answer carries of the text it marks (UTF-8, as shown)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _spans_canonical(rule: CriterionRule, raw: object, shown: ShownText | None) -> str:
    """A span answer as canonical JSON, every span checked against the text shown."""
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
    if not isinstance(spans, list) or len(spans) > SPAN_MAX_SPANS:
        raise ValueError(f"spans must be a list of at most {SPAN_MAX_SPANS}")
    categories = {str(option).lower(): str(option) for option in rule.options}
    weights = rule.weights
    sides = SPAN_SIDES if rule.span_reference else SPAN_SIDES[:1]
    texts = {"output": shown.output, "reference": shown.reference}
    cleaned: list[dict[str, Any]] = []
    for number, span in enumerate(spans, start=1):
        if not isinstance(span, Mapping):
            raise ValueError(f"span {number} is not an object")
        side = str(span.get("side", "output"))
        if side not in sides:
            raise ValueError(f"span {number}: side {side!r} is not one of {', '.join(sides)}")
        start, end = span.get("start"), span.get("end")
        if (not isinstance(start, int) or not isinstance(end, int) or isinstance(start, bool)
                or isinstance(end, bool) or not 0 <= start < end <= len(texts[side])):
            raise ValueError(f"span {number}: start and end must be offsets into the "
                             f"{side} (0 <= start < end <= {len(texts[side])})")
        if not texts[side][start:end].strip():
            raise ValueError(f"span {number} marks only white space")
        category = categories.get(str(span.get("category", "")).lower())
        if category is None:
            raise ValueError(f"span {number}: category {span.get('category')!r} is not one "
                             f"of {', '.join(repr(c) for c in categories.values())}")
        severity = str(span.get("severity", ""))
        if severity not in weights:
            raise ValueError(f"span {number}: severity {severity!r} is not one of "
                             f"{', '.join(repr(s) for s in weights)}")
        cleaned.append({"start": start, "end": end, "side": side, "category": category,
                        "severity": severity})
    cleaned.sort(key=lambda s: (SPAN_SIDES.index(str(s["side"])), s["start"], s["end"]))
    for before, after in zip(cleaned, cleaned[1:], strict=False):
        if before["side"] == after["side"] and after["start"] < before["end"]:
            raise ValueError(f"spans overlap in the {before['side']} at characters "
                             f"{after['start']}-{before['end']}: mark each error once")
    return json.dumps({"spans": cleaned, "text_sha256": digest}, ensure_ascii=False,
                      separators=(",", ":"))


def _ranking_canonical(raw: object, letters: str) -> str:
    """A ranking of the outputs shown: a list or "B>A>C" text of their letters, best first."""
    text = "" if isinstance(raw, list | tuple) else str(raw)
    if "=" in text:  # one rank per output, as the form posts them: "A=2;B=1;C=3"
        ranks: dict[str, str] = {}
        for piece in text.split(";"):
            letter, _, rank = piece.partition("=")
            ranks[letter.strip().upper()] = rank.strip()
        if any(not rank.isdigit() for rank in ranks.values()) or sorted(
                int(rank) for rank in ranks.values()) != list(range(1, len(letters) + 1)):
            raise ValueError(f"give each of {', '.join(letters)} a different rank from 1 to "
                             f"{len(letters)}")
        order = sorted(ranks, key=lambda letter: int(ranks[letter]))
    elif isinstance(raw, list | tuple):
        order = [str(x).strip().upper() for x in raw]
    else:
        order = [x.strip().upper() for x in text.replace(",", ">").split(">")]
    if sorted(order) != sorted(letters):
        raise ValueError(f"a ranking orders every output shown once: {', '.join(letters)} "
                         f"(got {'>'.join(order) or 'nothing'})")
    return ">".join(order)


def _best_worst_canonical(raw: object, letters: str) -> str:
    """The best and the worst of the outputs shown, two different letters."""
    if isinstance(raw, Mapping):
        parts = {str(k).strip().lower(): str(v).strip().upper() for k, v in raw.items()}
    else:
        parts = {}
        for piece in str(raw).split(";"):
            name, _, letter = piece.partition("=")
            parts[name.strip().lower()] = letter.strip().upper()
    best, worst = parts.get("best", ""), parts.get("worst", "")
    if len(best) != 1 or len(worst) != 1 or best not in letters or worst not in letters:
        raise ValueError(f"choose the best and the worst of {', '.join(letters)}")
    if best == worst:
        raise ValueError("the best and the worst must be different outputs")
    return f"best={best};worst={worst}"


def ranking_of(value: str) -> list[str]:
    """The letters of a stored ranking, best first."""
    return value.split(">") if value else []


def best_worst_of(value: str) -> tuple[str, str]:
    """(best, worst) letters of a stored best-worst answer."""
    parts = dict(piece.split("=", 1) for piece in value.split(";"))
    return parts["best"], parts["worst"]


def spans_of(value: str) -> list[dict[str, object]]:
    """The spans of a stored span answer (canonical JSON); [] for an empty answer."""
    return list(json.loads(value)["spans"]) if value else []


def check_rule(
    kind: str,
    *,
    scale_points: int | None,
    labels: Sequence[str] | Mapping[str, str] | None,
    options: Sequence[str],
    scale_min: int | None = None,
    scale_max: int | None = None,
    severity_weights: Mapping[str, object] | None = None,
    span_reference: bool = False,
    allow_both: bool = False,
) -> list[str]:
    """Problems with a criterion's configuration, as readable sentences (empty when valid)."""
    problems: list[str] = []
    if kind not in KINDS:
        return [f"kind {kind!r} is not one of {', '.join(KINDS)}"]
    if allow_both and kind != PAIRWISE:
        problems.append(f"allow_both ('both good' and 'both bad' answers) only applies to "
                        f"pairwise criteria, not {kind}")
    if kind == LIKERT:
        if scale_points is None or not LIKERT_MIN_POINTS <= scale_points <= LIKERT_MAX_POINTS:
            problems.append(
                f"likert needs scale_points between {LIKERT_MIN_POINTS} and {LIKERT_MAX_POINTS}"
            )
        elif isinstance(labels, Mapping):
            for point in labels:
                if not str(point).isdigit() or not 1 <= int(point) <= scale_points:
                    problems.append(
                        f"anchor label for point {point!r} is outside 1..{scale_points}"
                    )
    elif scale_points is not None:
        problems.append(f"scale_points only applies to likert criteria, not {kind}")
    if kind == SLIDER:
        problems += _slider_problems(scale_min, scale_max, labels)
    elif scale_min is not None or scale_max is not None:
        problems.append(f"scale_min and scale_max only apply to slider criteria, not {kind}")
    if kind == SEVERITY and labels and (isinstance(labels, Mapping) or len(labels) != 3):
        problems.append("severity labels must be a list of exactly 3 descriptions (levels 0, 1, 2)")
    if kind in (CATEGORICAL, SPAN):
        what = "categorical needs at least 2 options" if kind == CATEGORICAL else (
            "span needs at least 1 error category (its options)")
        if len(options) < (2 if kind == CATEGORICAL else 1):
            problems.append(what)
        if len(options) > SPAN_MAX_CATEGORIES and kind == SPAN:
            problems.append(f"span takes at most {SPAN_MAX_CATEGORIES} error categories")
        if len({str(option).lower() for option in options}) != len(options):
            problems.append(f"{kind} options must be distinct (ignoring case)")
    elif options:
        problems.append(f"options only apply to categorical and span criteria, not {kind}")
    if kind == SPAN:
        problems += _weight_problems(severity_weights)
        if labels:
            problems.append("span criteria take no labels (their categories are the options)")
    elif severity_weights:
        problems.append(f"severity_weights only apply to span criteria, not {kind}")
    elif span_reference:
        problems.append(f"span_reference only applies to span criteria, not {kind}")
    return problems


def _slider_problems(scale_min: int | None, scale_max: int | None,
                     labels: Sequence[str] | Mapping[str, str] | None) -> list[str]:
    if (scale_min is None) != (scale_max is None):
        return ["a slider needs both scale_min and scale_max, or neither (0 to 100)"]
    low, high = (SLIDER_DEFAULT_RANGE if scale_min is None or scale_max is None
                 else (scale_min, scale_max))
    problems = []
    if not -SLIDER_LIMIT <= low < high <= SLIDER_LIMIT:
        problems.append(f"a slider's scale_min must be below its scale_max, both within "
                        f"{-SLIDER_LIMIT}..{SLIDER_LIMIT}")
    if labels and not isinstance(labels, Mapping):
        problems.append('slider labels name points of the range, e.g. {"0": "nonsense", '
                        '"100": "perfect"}')
    elif labels:
        for point in labels:
            try:
                inside = low <= int(str(point)) <= high
            except ValueError:
                inside = False
            if not inside:
                problems.append(f"slider label for {point!r} is outside {low}..{high}")
    return problems


def _weight_problems(weights: Mapping[str, object] | None) -> list[str]:
    if weights is None or weights == {}:
        return []
    if not isinstance(weights, Mapping):
        return ['severity_weights must map severity names to weights, e.g. {"minor": 1, '
                '"major": 5, "critical": 25}']
    problems = []
    if len(weights) > SPAN_MAX_SEVERITIES:
        problems.append(f"at most {SPAN_MAX_SEVERITIES} severities")
    for name, weight in weights.items():
        if not str(name).strip() or len(str(name)) > 40:
            problems.append(f"severity name {name!r} must be 1 to 40 characters")
        if (isinstance(weight, bool) or not isinstance(weight, int | float)
                or not math.isfinite(weight) or not 0 <= weight <= 1000):
            problems.append(f"severity {name!r}: the weight must be a number from 0 to 1000")
    return problems


# --- binary readings -------------------------------------------------------------------------
#: The kinds whose answers read as "meaning preserved" or not: what LATTE and learned proxies
#: answer, what a proxy's AUC and threshold are computed against, and what `binary_label` maps.
BINARY_KINDS = frozenset({BINARY, SEVERITY})


def binary_label(kind: str, value: str) -> float | None:
    """1/0 for "meaning preserved"/"yes", None where the kind has no binary reading.
    Severity follows LATTE: levels 0 and 1 preserve the meaning."""
    if kind == BINARY:
        return {"yes": 1.0, "no": 0.0}.get(value)
    if kind == SEVERITY:
        return {"0": 1.0, "1": 1.0, "2": 0.0}.get(value)
    return None


#: The fields of a criterion that `criterion_problems` reads, as the model and the API name them.
RULE_FIELDS = ("kind", "scale_points", "labels", "options", "scale_min", "scale_max",
               "severity_weights", "span_reference", "allow_both")


def criterion_problems(values: Mapping[str, Any]) -> list[str]:
    """Problems with a criterion given as a mapping of its fields (`RULE_FIELDS`; a missing one
    reads as unset): the one rule that the admin and the API apply when a criterion is saved
    and `study_validate` applies when the study is opened, so that the two cannot disagree."""
    kind = str(values.get("kind") or "")
    if not kind:
        return ["a criterion needs a kind"]
    options = values.get("options") or []
    return check_rule(
        kind, scale_points=values.get("scale_points"), labels=values.get("labels") or [],
        options=list(options) if isinstance(options, list | tuple) else [options],
        scale_min=values.get("scale_min"), scale_max=values.get("scale_max"),
        severity_weights=values.get("severity_weights") or None,
        span_reference=bool(values.get("span_reference")),
        allow_both=bool(values.get("allow_both")))


def attention_repeats(*, checks_per_seat: int, n_attention: int) -> str | None:
    """A warning when a seat would show the same attention check more than once: the design
    cycles through the study's checks (evalstudy.design.ordering), so with fewer checks than a
    seat's attention slots some come back. None when every slot gets a different check."""
    if n_attention <= 0 or checks_per_seat <= n_attention:
        return None
    return (f"A seat has up to {checks_per_seat} attention-check slots but the study has "
            f"{n_attention} attention check(s), so a rater sees the same check more than once: "
            f"add at least {checks_per_seat - n_attention} more, or raise "
            "attention_check_every.")


_PAIR_FLIP = {"A": "B", "B": "A"}


def pair_oriented(output: int, output_b: int | None, value: str
                  ) -> tuple[tuple[int, int | None], str]:
    """(unit, value) with a pair of outputs keyed by output id, lower first, and an answer
    given with the pair the other way round turned around ("A" <-> "B"; a tie, both good and
    both bad stay as they are), so that raters who saw the pair either way round, and a judge,
    are counted on one unit (the adjudication queue, the judge prompt versions)."""
    if output_b is None or output <= output_b:
        return (output, output_b), value
    return (output_b, output), _PAIR_FLIP.get(value, value)


def strict_majority(values: Iterable[str]) -> str | None:
    """The answer given more often than any other (None for an empty list or a tie on top)."""
    ranked = Counter(values).most_common()
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]
