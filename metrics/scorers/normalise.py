"""An explicit, serialisable text normaliser for reference/hypothesis comparison.

jiwer's default transform only strips and splits whitespace, so "Hello," and "hello" count as a
substitution. Every error-rate score must therefore say which normalisation produced it: a
`Normaliser` is a frozen value whose `to_dict()` is stored in each scorer's signature and whose
`from_dict()` rebuilds exactly the same behaviour.

Steps, always in this order (each can be switched off except the Unicode form):

1. Unicode normalisation (`unicode_form`, default NFKC): full-width letters and digits become
   ASCII, ligatures split, compatibility spaces become plain spaces.
2. `lowercase`: `str.lower()` (not `casefold()`, which would also rewrite "ß" as "ss").
3. `numbers`: "keep" leaves digits alone; "digits_to_words" spells standalone integers
   0..999999 as English cardinals ("123" -> "one hundred twenty three"; no "and", no hyphens,
   so the result matches a human-written "twenty-three" once punctuation is stripped).
   Only a maximal run of ASCII digits not touching a letter, digit or underscore is converted,
   optionally grouped with commas ("12,345"). Left as digits: numbers above 999999, numbers with
   a leading zero ("007"), parts of decimals ("3.5"), ordinals ("5th") and digits of other
   scripts. Years and phone numbers are read as cardinals ("1990" -> "one thousand nine hundred
   ninety"), signs are not read ("-5" -> "five" after punctuation stripping), "%" is
   punctuation and is dropped.
4. `strip_punctuation`: every character of Unicode category P* (including "%", "&", "/", "-",
   "_", CJK and Devanagari full stops, Arabic commas) becomes a space, so "yes/no" gives two
   words. Exception: an apostrophe between two word characters (letters, marks, digits of any
   script) is kept and written as ASCII "'" ("don't", "don’t" -> "don't"); quotes around words
   go ("'hello'" -> "hello", "students'" -> "students"). The Hebrew geresh/gershayim and the
   middle dot (Catalan "l·l") are likewise kept inside words. Symbols (categories S*: "$",
   "+", emoji) and combining marks (M*) are not punctuation and are kept.
   Two settings refine step 4 for words joined by an apostrophe or a hyphen. They apply whether
   or not punctuation is stripped, and their defaults are exactly the behaviour above:
   - `elision` (French "l'analyse", Italian "dell'anno"): "keep" (default) leaves a word-internal
     apostrophe inside its word ("l'analyse" is one word) and, when punctuation is stripped,
     drops a detached one ("l' analyse" -> "l analyse": two different spellings of one phrase
     give different words). "split" ends the word after an apostrophe that follows a word
     character and precedes a word (directly or after whitespace): "l'analyse" and
     "l' analyse" both give "l' analyse", the words "l'" and "analyse" (HATS's convention:
     "c' est", "aujourd' hui"). "join" attaches that apostrophe to the next word instead:
     both give "l'analyse", one word (what a G2P such as espeak-ng needs to pronounce it).
     Either way the apostrophe is written as ASCII "'". Not language-aware: English "don't"
     becomes "don' t" under "split", and a closing single quote before a word is taken for
     an elision ("'oui' dit-il" -> "oui' dit il").
   - `hyphens`, for a hyphen ("-", U+2010, U+2011) between two word characters: "punctuation"
     (default) treats it like any other punctuation, so it becomes a space when punctuation is
     stripped ("peut-être" -> "peut être") and stays when it is not; "split" always makes it a
     space; "keep" always keeps it, as "-" ("peut-être" stays one word even when punctuation is
     stripped). Hyphens elsewhere ("-5", "a - b") and dashes (U+2013, U+2014) are punctuation.
5. `collapse_whitespace`: runs of Unicode whitespace become one space; ends are trimmed.

Finally the Unicode form is applied again, so the output is guaranteed to be in that form.

Named presets (`Normaliser.preset(name)`, or the name where a normaliser is accepted, e.g. a
metric's `{"normaliser": "raw"}` parameter):
- "default": `Normaliser()`.
- "raw": nothing at all (no Unicode form, case, punctuation or whitespace change): the text
  as written. WER then splits on whitespace only (jiwer's own transform), CER compares every
  character; this is how HATS's published figures were computed.
- "fr": the default plus `elision="split"` and `hyphens="split"` ("C'est-à-dire" ->
  "c' est à dire"), so French elisions count as words whether or not the writer put a space
  after the apostrophe.

Caveat for scripts written without spaces (Chinese, Japanese, Thai): punctuation becomes a space,
and a character error rate counts spaces as characters; compare such texts with CER and either
keep punctuation or make sure both sides are punctuated alike.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, get_args

from metrics.scorers.memo import memoised

NumbersMode = Literal["keep", "digits_to_words"]
UnicodeForm = Literal["NFC", "NFD", "NFKC", "NFKD", "none"]
ElisionMode = Literal["keep", "split", "join"]
HyphensMode = Literal["punctuation", "split", "keep"]

# Bumped whenever the output of some setting changes, so a stored signature that names an older
# version cannot be silently rebuilt into a normaliser that behaves differently.
NORMALISER_VERSION = 1

# Punctuation kept when it sits between two word characters, mapped to the form it is kept as.
# The typographic apostrophes collapse to ASCII so that "don’t" and "don't" compare equal.
_INWORD_KEEP = {
    "'": "'",
    "\u2019": "'",  # RIGHT SINGLE QUOTATION MARK, the usual typographic apostrophe
    "\u2018": "'",  # LEFT SINGLE QUOTATION MARK, often autocorrected in place of an apostrophe
    "\u05f3": "\u05f3",  # HEBREW PUNCTUATION GERESH (abbreviations, transliteration)
    "\u05f4": "\u05f4",  # HEBREW PUNCTUATION GERSHAYIM (acronyms)
    "\u00b7": "\u00b7",  # MIDDLE DOT (Catalan "l·l")
}

# Apostrophes an elision may be written with (the ones _INWORD_KEEP folds to ASCII).
_APOSTROPHES = frozenset("'\u2019\u2018")
# Hyphens proper (not the dashes U+2013/U+2014, which separate clauses, not word parts).
_HYPHENS = frozenset("-\u2010\u2011")

# A standalone integer: comma-grouped ("12,345") or a plain digit run. The lookarounds keep the
# digits of words ("mp3", "5th"), decimals ("3.5", "3,5") and identifiers ("a_1") untouched.
_INTEGER_RE = re.compile(r"(?<!\w)(?<!\d[.,])([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?!\w)(?![.,]\d)")

_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)  # fmt: skip
_TENS = (
    "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
)  # fmt: skip

MAX_SPELLED_NUMBER = 999_999


def _below_thousand(n: int) -> list[str]:
    """English words for 1 <= n <= 999 (an empty list for 0)."""
    words: list[str] = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += [_ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(_TENS[tens])
        if ones:
            words.append(_ONES[ones])
    elif rest:
        words.append(_ONES[rest])
    return words


def number_to_words(n: int) -> str:
    """English cardinal for 0 <= n <= 999999, space-separated, without "and" or hyphens.

    Raises ValueError outside that range.
    """
    if not 0 <= n <= MAX_SPELLED_NUMBER:
        raise ValueError(f"number_to_words handles 0..{MAX_SPELLED_NUMBER}, got {n}")
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    words: list[str] = []
    if thousands:
        words += [*_below_thousand(thousands), "thousand"]
    words += _below_thousand(rest)
    return " ".join(words)


def _spell_integer(match: re.Match[str]) -> str:
    token = match.group(1)
    digits = token.replace(",", "")
    # A leading zero marks a code or identifier ("007"), not a quantity: reading it as a
    # cardinal would lose the zeros, so it stays as written.
    if len(digits) > 1 and digits.startswith("0"):
        return token
    value = int(digits)
    if value > MAX_SPELLED_NUMBER:
        return token
    return number_to_words(value)


def _is_word_char(char: str) -> bool:
    # Letters, combining marks and digits of any script: a mark (e.g. a Devanagari vowel sign)
    # before an apostrophe still belongs to the word.
    return unicodedata.category(char)[0] in "LMN"


def _strip_punctuation(text: str) -> str:
    out: list[str] = []
    last = len(text) - 1
    for i, char in enumerate(text):
        if not unicodedata.category(char).startswith("P"):
            out.append(char)
            continue
        kept = _INWORD_KEEP.get(char)
        if (
            kept is not None
            and 0 < i < last
            and _is_word_char(text[i - 1])
            and _is_word_char(text[i + 1])
        ):
            out.append(kept)
        else:
            # A space, not nothing: "yes/no" and "well,then" are two words each.
            out.append(" ")
    return "".join(out)


def _punctuation_by_settings(
    text: str, *, strip: bool, elision: ElisionMode, hyphens: HyphensMode
) -> str:
    """Step 4 when `elision` or `hyphens` is not its default (the default path is
    `_strip_punctuation` alone, so default output cannot change)."""
    out: list[str] = []
    n = len(text)
    i = 0
    while i < n:
        char = text[i]
        if elision != "keep" and char in _APOSTROPHES and i > 0 and _is_word_char(text[i - 1]):
            j = i + 1
            while j < n and text[j].isspace():
                j += 1
            if j < n and _is_word_char(text[j]):
                # An elided word ("l'", "qu'", "aujourd'") before the next word, with or
                # without a space between them.
                out.append("'" if elision == "join" else "' ")
                i = j
                continue
        if (
            hyphens != "punctuation"
            and char in _HYPHENS
            and 0 < i < n - 1
            and _is_word_char(text[i - 1])
            and _is_word_char(text[i + 1])
        ):
            out.append("-" if hyphens == "keep" else " ")
        elif strip and unicodedata.category(char).startswith("P"):
            kept = _INWORD_KEEP.get(char)
            inword = 0 < i < n - 1 and _is_word_char(text[i - 1]) and _is_word_char(text[i + 1])
            out.append(kept if kept is not None and inword else " ")
        else:
            out.append(char)
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class Normaliser:
    """A text normaliser whose settings fully determine its output (see the module docstring).

    Guarantees: `__call__` is deterministic and pure; `Normaliser.from_dict(n.to_dict()) == n`;
    `to_dict()` is JSON-serialisable; `name` differs between any two different settings (the
    default Unicode form NFKC is implied, other forms are appended as "+unicode=NFC").
    """

    lowercase: bool = True
    strip_punctuation: bool = True
    collapse_whitespace: bool = True
    numbers: NumbersMode = "keep"
    unicode_form: UnicodeForm = "NFKC"
    elision: ElisionMode = "keep"
    hyphens: HyphensMode = "punctuation"

    VERSION: ClassVar[int] = NORMALISER_VERSION
    # Settings added after version 1, with the default that reproduces version 1's output.
    # `to_dict()` and `name` mention them only when they differ from it, so the dict, name and
    # signature (and so the stored metric configurations) of every normaliser that leaves them
    # alone are what they were before these settings existed.
    _LATER_DEFAULTS: ClassVar[dict[str, str]] = {"elision": "keep", "hyphens": "punctuation"}

    def __post_init__(self) -> None:
        # Settings often arrive from JSON (study configuration, stored signatures): validate
        # here so that a typo fails loudly instead of silently meaning "default".
        for name in ("lowercase", "strip_punctuation", "collapse_whitespace"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Normaliser.{name} must be a bool, got {getattr(self, name)!r}")
        if self.numbers not in get_args(NumbersMode):
            raise ValueError(
                f"Normaliser.numbers must be one of {get_args(NumbersMode)}, got {self.numbers!r}"
            )
        if self.unicode_form not in get_args(UnicodeForm):
            raise ValueError(
                f"Normaliser.unicode_form must be one of {get_args(UnicodeForm)}, "
                f"got {self.unicode_form!r}"
            )
        if self.elision not in get_args(ElisionMode):
            raise ValueError(
                f"Normaliser.elision must be one of {get_args(ElisionMode)}, got {self.elision!r}"
            )
        if self.hyphens not in get_args(HyphensMode):
            raise ValueError(
                f"Normaliser.hyphens must be one of {get_args(HyphensMode)}, got {self.hyphens!r}"
            )

    @property
    def name(self) -> str:
        """A short, human-readable and unique label, e.g. "lower+nopunct+ws+numbers=keep"."""
        parts = [
            "lower" if self.lowercase else "cased",
            "nopunct" if self.strip_punctuation else "punct",
            "ws" if self.collapse_whitespace else "rawws",
            f"numbers={self.numbers}",
        ]
        if self.unicode_form != "NFKC":
            parts.append(f"unicode={self.unicode_form}")
        for setting, default in self._LATER_DEFAULTS.items():
            if getattr(self, setting) != default:
                parts.append(f"{setting}={getattr(self, setting)}")
        return "+".join(parts)

    @classmethod
    def preset(cls, name: str) -> Normaliser:
        """The named preset "default", "raw" or "fr" (see the module docstring).

        Raises ValueError for another name."""
        try:
            return PRESETS[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown normaliser preset {name!r}; known: {', '.join(PRESETS)}"
            ) from None

    def _unicode(self, text: str) -> str:
        if self.unicode_form == "none":
            return text
        return unicodedata.normalize(self.unicode_form, text)

    def __call__(self, text: str) -> str:
        """The normalised text. Raises TypeError if `text` is not a str."""
        if not isinstance(text, str):
            raise TypeError(f"Normaliser expects str, got {type(text).__name__}")
        # Remembered per (settings, text): WER, CER and H_eval normalise the same texts, and a
        # reference recurs once per system.
        return _normalised(self, text)

    def _normalise(self, text: str) -> str:
        text = self._unicode(text)
        if self.lowercase:
            text = text.lower()
        if self.numbers == "digits_to_words":
            # Before punctuation stripping, which would turn "12,345" into "12 345".
            text = _INTEGER_RE.sub(_spell_integer, text)
        if self.elision != "keep" or self.hyphens != "punctuation":
            text = _punctuation_by_settings(
                text, strip=self.strip_punctuation, elision=self.elision, hyphens=self.hyphens
            )
        elif self.strip_punctuation:
            text = _strip_punctuation(text)
        if self.collapse_whitespace:
            text = " ".join(text.split())
        # Lowercasing and deleting characters can leave a string that is no longer in the
        # requested form (e.g. "İ".lower() adds a combining dot); normalise once more.
        return self._unicode(text)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable settings plus `name` and `version` (for people reading records).

        `elision` and `hyphens` appear only when they differ from their defaults (see
        `_LATER_DEFAULTS`); `from_dict` fills in what is missing."""
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in self._LATER_DEFAULTS and value == self._LATER_DEFAULTS[f.name]:
                continue
            data[f.name] = value
        data["name"] = self.name
        data["version"] = self.VERSION
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Normaliser:
        """Rebuild a normaliser from `to_dict()` output (missing settings take their defaults).

        Raises ValueError for unknown keys, invalid settings, a `version` other than the current
        one (the stored results were produced by different code), or a `name` that contradicts
        the settings.
        """
        data = dict(data)
        version = data.pop("version", cls.VERSION)
        if version != cls.VERSION:
            raise ValueError(
                f"normaliser version {version!r} cannot be rebuilt by version {cls.VERSION}"
            )
        name = data.pop("name", None)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown normaliser setting(s): {', '.join(unknown)}")
        normaliser = cls(**data)
        if name is not None and name != normaliser.name:
            raise ValueError(f"normaliser name {name!r} does not match its settings")
        return normaliser


DEFAULT_NORMALISER = Normaliser()

PRESETS: dict[str, Normaliser] = {
    "default": DEFAULT_NORMALISER,
    "raw": Normaliser(
        lowercase=False, strip_punctuation=False, collapse_whitespace=False, unicode_form="none"
    ),
    "fr": Normaliser(elision="split", hyphens="split"),
}


@memoised(maxsize=1 << 16)
def _normalised(normaliser: Normaliser, text: str) -> str:
    return normaliser._normalise(text)


def coerce_normaliser(value: Normaliser | Mapping[str, Any] | str | None) -> Normaliser:
    """A Normaliser from itself, its `to_dict()` form, a preset name ("raw", "fr", ...), or
    None (the default settings)."""
    if value is None:
        return DEFAULT_NORMALISER
    if isinstance(value, Normaliser):
        return value
    if isinstance(value, Mapping):
        return Normaliser.from_dict(value)
    if isinstance(value, str):
        return Normaliser.preset(value)
    raise ValueError(
        f"expected a Normaliser, a mapping, a preset name or None, got {type(value).__name__}"
    )
