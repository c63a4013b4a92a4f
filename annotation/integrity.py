"""Integrity signals of one judgment (one answered slot) and of a rater, on plain data (a
Django-free core): what the rating page reported about how the answer was given (pastes,
time away, keystrokes), how fast it was given and whether its media were heard.

The page's counters are the rater's browser talking: they are validated and clamped here,
and anything unreadable is dropped (None), never a reason to refuse an answer. Flags are
evidence for the researcher and the analysis (the monitor, the sensitivity table, rater-level
covariates); nothing here excludes or rejects anyone.

Rules and why:

- paste: text was pasted into a free-text or span input of the slot. Free text typed by a
  person is rarely pasted; pasted text is the usual trace of copying from a chatbot or
  another page.
- away: the page was hidden or lost the focus for more than `AWAY_SECONDS` (30 s) in all
  while the slot was shown. Short glances (a notification) are ordinary; half a minute
  elsewhere on one item is the time to look something up or ask someone else.
- keystroke_free: a non-empty free-text answer with zero keystrokes and zero pastes: the
  text came from neither the keyboard nor the clipboard (an extension, drag-and-drop, a
  script).
- speed: the seconds from serving the slot to its answer are below the study's speeder
  threshold (`annotation.quality.speeder_threshold`, the same threshold the monitor uses on a
  rater's median, applied here to one answer).
- listening: the slot had media and at least one file was not heard to the end
  (`annotation.models.ListeningLog.completed`).

A signal that could not be observed on a slot (no counters posted, no timing, no media) is
None, not False: a rater's share of flagged slots counts only the slots where it was observed.
A rater is flagged on a signal when, over at least `RATER_MIN_SLOTS` (5) observed slots, the
share flagged exceeds `RATER_SHARES[signal]`: 10% for paste and keystroke-free text (rare in
honest work), 25% for time away, speed and listening (ordinary now and then).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# Counters the page posts, each a non-negative whole number, and the bound it is clamped to
# (a day of seconds away; counts far beyond any real item).
BEHAVIOUR_LIMITS: dict[str, int] = {
    "pastes": 10_000,
    "focus_losses": 10_000,
    "seconds_away": 86_400,
    "keystrokes": 1_000_000,
    "inputs": 1_000_000,
}
BEHAVIOUR_FIELDS = tuple(BEHAVIOUR_LIMITS)
MAX_BEHAVIOUR_TEXT = 2_000  # characters of the posted JSON read at most

AWAY_SECONDS = 30.0
SIGNALS = ("paste", "away", "keystroke_free", "speed", "listening")
SIGNAL_LABELS = {
    "paste": "pasted into free text",
    "away": f"away from the page more than {AWAY_SECONDS:.0f} s",
    "keystroke_free": "free text without keystrokes or pastes",
    "speed": "faster than the speeder threshold",
    "listening": "media not heard to the end",
}
RATER_SHARES: dict[str, float] = {"paste": 0.10, "away": 0.25, "keystroke_free": 0.10,
                                  "speed": 0.25, "listening": 0.25}
RATER_MIN_SLOTS = 5


@dataclass(frozen=True)
class Behaviour:
    pastes: int = 0
    focus_losses: int = 0
    seconds_away: int = 0
    keystrokes: int = 0
    inputs: int = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in BEHAVIOUR_FIELDS}


def _count(value: object, limit: int) -> int | None:
    """A posted counter as a whole number in 0..limit; None when it is not a number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip()[:32])
        except ValueError:
            return None
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(min(max(round(value), 0), limit))


def behaviour_parse(raw: object) -> Behaviour | None:
    """The page's counters (an object, or its JSON text from a form field) validated and
    clamped; None (nothing recorded) when they are missing or any counter is unreadable.
    Unknown keys are ignored; a negative count reads as 0, one above its bound as the bound."""
    if isinstance(raw, str):
        if not raw.strip() or len(raw) > MAX_BEHAVIOUR_TEXT:
            return None
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):  # "[[[[..." nests past the parser's stack
            return None
    if not isinstance(raw, Mapping):
        return None
    values: dict[str, int] = {}
    for name, limit in BEHAVIOUR_LIMITS.items():
        if name not in raw:
            return None
        count = _count(raw[name], limit)
        if count is None:
            return None
        values[name] = count
    return Behaviour(**values)


def behaviour_add(before: Behaviour, more: Behaviour) -> Behaviour:
    """A revision's counters added to the first answer's (each still within its bound)."""
    return Behaviour(**{name: min(getattr(before, name) + getattr(more, name), limit)
                        for name, limit in BEHAVIOUR_LIMITS.items()})


@dataclass(frozen=True)
class SlotEvidence:
    """What is known about one answered slot."""

    behaviour: Behaviour | None  # None: the page posted no readable counters
    seconds: float | None  # served -> answered (None: not timed)
    free_text: bool = False  # a non-empty free-text answer was given
    media: int = 0  # media files shown with the slot
    media_heard: int = 0  # of those, heard to the end


@dataclass(frozen=True)
class SlotFlags:
    paste: bool | None = None
    away: bool | None = None
    keystroke_free: bool | None = None
    speed: bool | None = None
    listening: bool | None = None

    def raised(self) -> list[str]:
        return [name for name in SIGNALS if getattr(self, name)]


def slot_flags(evidence: SlotEvidence, *, speeder_seconds: float | None,
               away_seconds: float = AWAY_SECONDS) -> SlotFlags:
    """The flags of one answered slot (see the module's docstring); None where unobserved."""
    behaviour = evidence.behaviour
    paste = away = keystroke_free = None
    if behaviour is not None:
        paste = behaviour.pastes > 0
        away = behaviour.seconds_away > away_seconds
        keystroke_free = (evidence.free_text and behaviour.keystrokes == 0
                          and behaviour.pastes == 0)
    speed = None
    if evidence.seconds is not None and speeder_seconds is not None:
        speed = evidence.seconds < speeder_seconds
    listening = evidence.media_heard < evidence.media if evidence.media else None
    return SlotFlags(paste, away, keystroke_free, speed, listening)


@dataclass
class RaterIntegrity:
    slots: int = 0
    observed: dict[str, int] = field(default_factory=dict)  # signal -> slots observed
    flagged_slots: dict[str, int] = field(default_factory=dict)  # signal -> slots flagged
    shares: dict[str, float | None] = field(default_factory=dict)  # flagged / observed
    signals: list[str] = field(default_factory=list)  # signals over their share

    @property
    def flagged(self) -> bool:
        return bool(self.signals)

    def detail(self) -> str:
        return "; ".join(f"{SIGNAL_LABELS[s]}: {self.flagged_slots[s]} of {self.observed[s]}"
                         for s in self.signals)


def rater_integrity(flags: Iterable[SlotFlags], *,
                    shares: Mapping[str, float] | None = None,
                    min_slots: int = RATER_MIN_SLOTS) -> RaterIntegrity:
    """A rater's share of flagged slots per signal, and the signals whose share exceeds its
    limit (`RATER_SHARES`) over at least `min_slots` observed slots."""
    limits = {**RATER_SHARES, **(shares or {})}
    result = RaterIntegrity(observed=dict.fromkeys(SIGNALS, 0),
                            flagged_slots=dict.fromkeys(SIGNALS, 0))
    for slot in flags:
        result.slots += 1
        for name in SIGNALS:
            value = getattr(slot, name)
            if value is not None:
                result.observed[name] += 1
                result.flagged_slots[name] += int(value)
    for name in SIGNALS:
        seen = result.observed[name]
        share = result.flagged_slots[name] / seen if seen else None
        result.shares[name] = share
        if share is not None and seen >= min_slots and share > limits[name]:
            result.signals.append(name)
    return result
