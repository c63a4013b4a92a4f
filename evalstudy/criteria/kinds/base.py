"""What an answer kind is: the one place that says everything about one kind of question.

Each module of this package (`likert.py`, `slider.py`, ...) defines one subclass of
`AnswerKind` and one instance of it named `KIND`; `evalstudy.criteria.kinds` finds them by
listing the package. Everything that treats kinds differently (the admin form, the API, study
files, the rater page and its fast loop, imports, the monitor, the proxies and the analysis)
asks the kind, never its name: a new kind is a new module here, its rater template
(`templates/annotation/questions/<name>.html`) and its tests (docs/dev/extending.md).

A kind is a plain object, no Django: it reads and checks values and settings, says what a
value means (a number, a binary decision), how a rater gives it (template, keys, the form's
fields) and which families of the analysis apply. Texts shown to people are marked with
`gettext_noop` and translated by the caller (the rater page passes Django's gettext as
`translate`; others pass nothing and get the English).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from ..rule import CriterionRule, ShownText

Translate = Callable[[str], str]


def gettext_noop(text: str) -> str:
    """Marks `text` for translation (`makemessages` collects it; the Django layer translates
    it when it shows it). The identity: this package knows nothing of Django."""
    return text


def untranslated(text: str) -> str:
    return text


#: How many outputs one answer judges: one output, a pair side by side (A/B), or a tuple of 2
#: to 6 outputs of one item (A, B, C, ...).
Shows = Literal["one", "pair", "tuple"]
ONE: Shows = "one"
PAIR: Shows = "pair"
TUPLE: Shows = "tuple"

#: How agreement between raters reads the answers: as categories, ordered categories, a
#: continuous score, or not at all (free text, spans, rankings have their own statistics).
Level = Literal["nominal", "ordinal", "interval"]

#: What a kind's answer scores, for the analyses that compare raters, systems or groups on one
#: number: a binary decision (share of "yes"/"meaning preserved"), a number where higher is
#: better, or a penalty where lower is better (MQM).
Score = Literal["binary", "numeric", "penalty"]

#: The default mixed model of a kind's answers (analysis.stats.models): cumulative link
#: (ordered points), binomial (binary decisions) or linear (a continuous score).
Model = Literal["clmm", "glmm", "lmm"]

# The letters outputs are shown under (A, B, ...): at most six outputs in one slot.
LETTERS = "ABCDEF"


@dataclass(frozen=True)
class ChoiceView:
    """One answer a rater can pick: its stored value, its label (translated) and its key."""

    value: str
    label: str
    key: str  # the keyboard shortcut ("" for none)


@dataclass(frozen=True)
class Setting:
    """A criterion field that some kinds use (its column is on evalstudy.models.Criterion):
    its name and how the sentence refusing it on another kind reads."""

    name: str
    refused: str  # "{name} only applies to {kinds} criteria, not {kind}" and the like
    unset: Callable[[Any], bool] = field(default=lambda value: not value)


#: The criterion fields that belong to kinds, as the model, the API, the admin and study files
#: name them. A kind lists those it uses in `AnswerKind.settings`; any other one must be unset
#: (`evalstudy.criteria.rule.check_rule` says so in the sentence given here).
SETTINGS: dict[str, Setting] = {setting.name: setting for setting in (
    Setting("allow_both", "allow_both ('both good' and 'both bad' answers) only applies to "
            "{kinds} criteria, not {kind}"),
    Setting("scale_points", "scale_points only applies to {kinds} criteria, not {kind}",
            unset=lambda value: value is None),
    Setting("scale_min", "scale_min and scale_max only apply to {kinds} criteria, not {kind}",
            unset=lambda value: value is None),
    Setting("scale_max", "scale_min and scale_max only apply to {kinds} criteria, not {kind}",
            unset=lambda value: value is None),
    Setting("options", "options only apply to {kinds} criteria, not {kind}"),
    Setting("severity_weights", "severity_weights only apply to {kinds} criteria, not {kind}"),
    Setting("span_reference", "span_reference only applies to {kinds} criteria, not {kind}"),
    Setting("allow_tie", "allow_tie only applies to {kinds} criteria, not {kind}"),
    Setting("labels", "labels only apply to {kinds} criteria, not {kind}"),
)}
# Checked in this order, so that a criterion's problems read in the same order everywhere.
#: `labels` and `allow_tie` are not refused on other kinds (older study files carry empty or
#: ignored ones); the others are.
REFUSED_WHEN_UNUSED = ("allow_both", "scale_points", "scale_min", "options",
                       "severity_weights", "span_reference")


class AnswerKind:
    """One kind of question. Subclasses set the class attributes and override what differs;
    the defaults describe a kind whose answer is free text judging one output."""

    #: The stored name (Criterion.kind, study files, the API). Never shown translated.
    name: ClassVar[str]
    #: What the admin's kind menu calls it.
    label: ClassVar[str]
    #: Where it comes in the admin's menu and in lists of kinds (then by name).
    order: ClassVar[int] = 100
    #: One sentence for people choosing a kind (admin help, docs).
    description: ClassVar[str] = ""
    #: The criterion fields it uses (keys of SETTINGS).
    settings: ClassVar[tuple[str, ...]] = ()
    #: How many outputs one answer judges (ONE, PAIR, TUPLE).
    shows: ClassVar[Shows] = ONE
    #: The study designs that build its slots; () for the designs of one output a slot
    #: (latin_square, crossed). A study of one of these designs needs a criterion of this kind.
    designs: ClassVar[tuple[str, ...]] = ()
    #: Whether an answer is read against the slot it answers (its text, the outputs shown),
    #: which only the general write path fetches.
    slot_bound: ClassVar[bool] = False
    #: How agreement reads its answers (None: no agreement of categories or scores).
    level: ClassVar[Level | None] = None
    #: What its answers score (see Score), None when they score nothing.
    score: ClassVar[Score | None] = None
    #: The default mixed model of its answers, None when it has none.
    model: ClassVar[Model | None] = None
    #: The families of analysis.stats.families that analyse it, in report order.
    analysis: ClassVar[tuple[str, ...]] = ()
    #: The labels used when a criterion gives none (a list: severity's three levels).
    default_labels: ClassVar[tuple[str, ...]] = ()
    #: What one judged unit is called in reports ("outputs", "output pairs").
    unit_noun: ClassVar[str] = "outputs"
    #: For kinds judging a tuple: what a rater does with it, as a report says it ("ranking").
    task_phrase: ClassVar[str] = ""
    #: Whether answers are typed text (the integrity signals flag text with no keystrokes).
    free_text: ClassVar[bool] = False

    # --- values --------------------------------------------------------------------------
    def choices(self, rule: CriterionRule) -> list[str] | None:
        """The canonical values, in display order; None when answers are not picked from a
        list (free text, sliders, spans, rankings)."""
        return None

    @property
    def closed(self) -> bool:
        """Whether an answer is one of a declared list of categories (`choices`): what
        majority votes, MACE, Dawid-Skene, vote counts and the adjudication queue read."""
        return type(self).choices is not AnswerKind.choices

    def normalise(self, rule: CriterionRule, raw: object, shown: ShownText | None) -> str:
        """The canonical spelling of `raw` (a string, a number, a list... as a browser, a file
        or a judge gives it), or ValueError saying why it is not an answer. `raw` is not None.
        `shown`: what the rater saw (for kinds whose answers are read against the slot)."""
        text = plain_text(raw)
        if text == "":
            raise ValueError("a value is required")
        return self.parse(rule, text)

    def parse(self, rule: CriterionRule, text: str) -> str:
        """`normalise` of a non-empty text: one of the choices as spelled."""
        choices = self.choices(rule) or []
        if text in choices:
            return text
        raise not_one_of(text, choices)

    def normalise_expected(self, rule: CriterionRule, raw: object) -> str:
        """An expected answer (practice items, attention checks); a kind may accept more than
        an answer here (a slider: a range of acceptable scores)."""
        return rule.normalise(raw)

    def numeric(self, rule: CriterionRule, value: str) -> float | None:
        """The number a stored answer stands for (Judgment.numeric_value), or None."""
        return None

    def binary(self, value: str) -> float | None:
        """1.0/0.0 for "yes"/"meaning preserved" and its opposite, None where the kind (or
        this value) has no binary reading."""
        return None

    @property
    def binary_reading(self) -> bool:
        """Whether its answers read as a binary decision: what LATTE and learned proxies
        answer, and what a proxy's AUC and threshold are computed against."""
        return type(self).binary is not AnswerKind.binary

    def binary_value(self, preserved: bool) -> str:
        """The stored answer of a binary decision (a proxy's thresholded score)."""
        raise ValueError(f"{self.name} answers have no binary reading")

    def binary_names(self) -> tuple[str, str]:
        """What the report calls a positive and a negative binary reading."""
        return "yes", "no"

    def categories(self, rule: CriterionRule) -> list[Any] | None:
        """The declared scale every agreement statistic uses as its category set, in order
        (numbers for ordered points), or None when the criterion declares none."""
        return list(rule.options) or None

    # --- settings ------------------------------------------------------------------------
    def problems(self, rule: CriterionRule) -> list[str]:
        """What is wrong with the settings this kind uses, as sentences (empty when valid).
        The settings it does not use are checked by `check_rule`."""
        return []

    # --- the rater's page ----------------------------------------------------------------
    @property
    def template(self) -> str:
        """The rater page's template of its question (one per kind)."""
        return f"annotation/questions/{self.name}.html"

    def choice_views(self, rule: CriterionRule, sides: tuple[str, str],
                     translate: Translate = untranslated) -> list[ChoiceView] | None:
        """The answers as a rater sees them (label and key), in the rater's language;
        `sides`: what the study calls outputs A and B. None where nothing is picked."""
        values = self.choices(rule)
        if values is None:
            return None
        return [ChoiceView(value, value, digit_key(index)) for index, value in enumerate(values)]

    def widget(self, rule: CriterionRule, answer: str, letters: str,
               translate: Translate = untranslated) -> dict[str, Any] | None:
        """What its template needs beyond the choices (a slider's range, a ranking's rows),
        given the answer so far and the letters of the outputs shown."""
        return None

    def collect(self, key: str, posted: Mapping[str, Any]) -> object:
        """The answer as a form posted it (`posted`: the form's fields; a Django QueryDict
        or a plain dict of the API's JSON). Most kinds post one field named by the key."""
        return posted.get(key)

    def answer_error(self, rule: CriterionRule, error: ValueError,
                     translate: Translate = untranslated) -> str:
        """Why an answer was refused, for the rater: what to do instead (the form offers only
        valid choices, so the rule's own reason names values a rater never typed)."""
        return (translate(gettext_noop("choose one of: %(choices)s"))
                % {"choices": ", ".join(self.choices(rule) or [])})

    def feedback_label(self, value: str, label: str) -> str:
        """An answer as a practice item's feedback shows it, given its choice label."""
        return label

    # --- analysis ------------------------------------------------------------------------
    @property
    def formula_response(self) -> str | None:
        """The response column a user's model formula names for this kind (`rating ~`,
        `y ~`, `score ~`), None when it has no model."""
        return {"clmm": "rating", "glmm": "y", "lmm": "score"}.get(self.model or "")

    def __repr__(self) -> str:
        return f"<answer kind {self.name}>"

    # --- added for evalstudy (opening checks, study files, practice items) ---
    #: Whether a study holds at most one criterion of this kind (span: raters mark each error
    #: once, with its category and severity).
    one_per_study: ClassVar[bool] = False
    #: Whether its answers read one output's text, so that a design showing two outputs at once
    #: (pairwise, adaptive) cannot carry it (span: errors are marked in one output).
    one_output_only: ClassVar[bool] = False
    #: Whether a practice item or an attention check may expect an answer of it (span: there
    #: is no single right marking).
    takes_expected: ClassVar[bool] = True
    # --- added for annotation ---
    #: Whether a rater marks spans of the text shown (the rater page makes its panes
    #: markable; an imported answer is read against the output's text).
    marks_spans: ClassVar[bool] = False

    def value_range(self, rule: CriterionRule) -> tuple[float, float] | None:
        """The lowest and highest number its answers stand for, where they are points on a
        scale (what agreement between raters measures distances on, and whose span normalises
        how far apart answers lie in the adjudication queue); None for categories
        and for answers that are not numbers on a scale. By default the numeric choices of
        an ordered scale."""
        if self.level != "ordinal":
            return None
        points = [float(choice) for choice in self.choices(rule) or []]
        return (min(points), max(points)) if points else None


# --- helpers the kinds share ------------------------------------------------------------------
# The keys of the first eleven choices: 1..9, then 0 for the tenth and - for the eleventh (a
# Likert scale has up to 11 points), in the order of the keyboard's number row.
DIGIT_KEYS = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "0", "-")


def digit_key(index: int) -> str:
    return DIGIT_KEYS[index] if index < len(DIGIT_KEYS) else ""


def plain_text(raw: object) -> str:
    """A posted value as text: booleans as yes/no, whole floats without ".0", the rest
    stripped."""
    if isinstance(raw, bool):
        return "yes" if raw else "no"
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw))
    return str(raw).strip()


def whole_number(text: str, low: int, high: int, noun: str = "number") -> str:
    """`text` as a whole number from `low` to `high` (a slider's score, a count), or
    ValueError saying which numbers are answers."""
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a {noun} from {low} to {high}") from None
    if not math.isfinite(number) or not number.is_integer() or not low <= number <= high:
        raise ValueError(f"{text!r} is not a whole number from {low} to {high}")
    return str(int(number))


def not_one_of(text: str, choices: Sequence[str]) -> ValueError:
    allowed = ", ".join(repr(choice) for choice in choices)
    return ValueError(f"{text!r} is not one of {allowed}")


def letters_shown(kind: AnswerKind, shown: ShownText | None) -> str:
    """The letters of the outputs a tuple answer is read against (ValueError when unknown)."""
    letters = LETTERS[:shown.n_outputs] if shown is not None else ""
    if len(letters) < 2:
        raise ValueError(f"{kind.name} answers are read against the outputs shown, which are "
                         "not known here")
    return letters
