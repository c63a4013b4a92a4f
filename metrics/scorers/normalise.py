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
5. `collapse_whitespace`: runs of Unicode whitespace become one space; ends are trimmed.

Finally the Unicode form is applied again, so the output is guaranteed to be in that form.

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
        words += _below_thousand(thousands) + ["thousand"]
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

    VERSION: ClassVar[int] = NORMALISER_VERSION

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
        return "+".join(parts)

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
        if self.strip_punctuation:
            text = _strip_punctuation(text)
        if self.collapse_whitespace:
            text = " ".join(text.split())
        # Lowercasing and deleting characters can leave a string that is no longer in the
        # requested form (e.g. "İ".lower() adds a combining dot); normalise once more.
        return self._unicode(text)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable settings plus `name` and `version` (for people reading records)."""
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
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


@memoised(maxsize=1 << 16)
def _normalised(normaliser: Normaliser, text: str) -> str:
    return normaliser._normalise(text)


def coerce_normaliser(value: Normaliser | Mapping[str, Any] | None) -> Normaliser:
    """A Normaliser from itself, its `to_dict()` form, or None (the default settings)."""
    if value is None:
        return DEFAULT_NORMALISER
    if isinstance(value, Normaliser):
        return value
    if isinstance(value, Mapping):
        return Normaliser.from_dict(value)
    raise ValueError(f"expected a Normaliser, a mapping or None, got {type(value).__name__}")
