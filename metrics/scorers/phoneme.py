"""Phoneme error rate (PER): the edit distance between the phoneme sequences of the reference
and the hypothesis, divided by the reference's phoneme count (CER over phonemes).

Grapheme-to-phoneme conversion is espeak-ng's (Debian package `espeak-ng`), run as a separate
program: espeak-ng is GPL-3, and so is the `phonemizer` Python package that wraps it, so
neither is imported or linked here. Without the program the metric is unavailable (the registry
lists "per" in `UNAVAILABLE` with the reason, and the scorer's constructor raises
`ScorerUnavailable`).

How a text becomes phonemes:

1. The scorer's normaliser (default `PER_DEFAULT_NORMALISER`: the default normaliser with
   `elision="join"`, so that French "c' est" stays pronounceable; the plain default would
   leave "c est", which espeak-ng reads as the letter c).
2. `g2p_input`: what espeak-ng is given. Whitespace and control characters become single
   spaces; a detached elision is joined ("c' est" -> "c'est": espeak-ng reads "c' est" as
   "sé è"); every punctuation character becomes a space, except an apostrophe, hyphen, full
   stop, comma or middle dot between two word characters ("l'analyse", "peut-être", "3.5").
   Punctuation is not pronounced, and espeak-ng ends a clause (an output line) on ".", ",",
   "?", "…" and many others, which would break the batch protocol below. Symbols that
   espeak-ng reads aloud ("$", "+") are kept; "%", "&", "@", "#", "/" are punctuation to
   Unicode and are dropped, as the default normaliser drops them.
3. `espeak-ng -q -b 1 --ipa --sep=_ -v <language>`, one text a line on stdin, many texts per
   call (a few hundred per second per process; large batches are split over up to 4
   processes). espeak-ng answers each input line with one line per clause; step 2 leaves no
   clause break inside a line, texts over `_MAX_LINE_BYTES` (espeak-ng splits clauses longer
   than about 725 bytes) are sent alone, and if a call still returns a different number of
   lines than it was given, the batch is halved and retried down to single texts, whose
   lines are all theirs. Identical input lines get identical outputs whatever their
   neighbours (checked on HATS's 2,505 distinct texts: batch == one call per text).
4. Tokens: espeak-ng's own phoneme segmentation (`--sep`), so a phoneme written with several
   symbols stays one token: nasal vowels "ɑ̃" (base + combining tilde), long vowels "iː",
   diphthongs "aɪ", affricates "tʃ", aspiration "bʰ", Mandarin/Vietnamese tone digits "a1".
   Dropped: stress marks "ˈ" "ˌ" (espeak-ng places them by position, so an inserted word
   shifts stress without changing a sound), the "-" it writes after unstressed clitics,
   word boundaries (a listener hears no spaces: "aujourd' hui" and "aujourd'hui" are the same
   sounds) and language-switch marks such as "(en)" (espeak-ng reads some words with another
   language's rules, e.g. French "business", and the phonemes between the marks are kept).
   Splitting phonemes into IPA characters instead would count a nasal-for-oral vowel as an
   insertion and weight diphthongs twice; keeping stress would count prosody, not segments.

Numbers are read by espeak-ng in the voice's language ("123" and "cent vingt-trois" have the
same phonemes in French), so keep `numbers="keep"` (the English `digits_to_words` is wrong for
other languages). Scripts espeak-ng has no rules for in the chosen voice are read as letter
names ("Chinese letter"): choose the language's own voice (`cmn`, `ja`, ...).

Phonemes are remembered per (espeak-ng program, version, voice, espeak-ng input) in a bounded
memory (`metrics.scorers.memo.BatchMemo`), so a reference shared by three systems, or the same
text under two normalisers, is converted once.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import re
import shutil
import subprocess
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jiwer

from metrics.scorers import specs
from metrics.scorers.base import Pair, Score, ScorerUnavailable
from metrics.scorers.heap import fewer_collections
from metrics.scorers.memo import BatchMemo
from metrics.scorers.normalise import Normaliser, coerce_normaliser
from metrics.scorers.text import TextScorer, corpus_rate, display_alignment

ESPEAK_PROGRAM = "espeak-ng"
# Quiet (no audio), UTF-8 input, IPA output with phonemes separated by "_" (words by spaces).
ESPEAK_ARGUMENTS: tuple[str, ...] = ("-q", "-b", "1", "--ipa", "--sep=_")
INSTALL_HINT = "install Debian's espeak-ng package (apt-get install espeak-ng)"

# espeak-ng ends a clause after about 725 bytes without punctuation; longer texts go alone.
_MAX_LINE_BYTES = 600
# Texts per espeak-ng process once a batch is split over several processes.
_MIN_CHUNK = 200
_MAX_PROCESSES = 4
# A voice name as espeak-ng's -v takes it ("fr", "en-us", "cmn", "en+f3"); no path separators,
# so that a parameter cannot name a file elsewhere.
_VOICE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_+-]{0,39}")

PER_DEFAULT_NORMALISER = Normaliser(elision="join", hyphens="keep")

_APOSTROPHES = frozenset("'\u2019\u2018")
# Punctuation kept between two word characters, as what espeak-ng is given.
_G2P_INWORD = {
    "'": "'",
    "\u2019": "'",
    "\u2018": "'",
    "-": "-",
    "\u2010": "-",
    "\u2011": "-",
    ".": ".",  # "3.5", "U.S.A"
    ",": ",",  # "3,5"
    "\u00b7": "\u00b7",  # Catalan "l·l"
}
# What espeak-ng writes that is not a phoneme: stress marks and its clitic hyphen.
_NOT_PHONEME = str.maketrans("", "", "\u02c8\u02cc-")
# A language switch: "(en)", "(fr)", "(cmn)", "(en-us)".
_LANGUAGE_SWITCH = re.compile(r"\([a-z]{2,3}(?:-[a-z0-9]+)*\)")
_TOKEN_SPLIT = re.compile(r"[\s_]+")

Phonemes = tuple[str, ...]

_PHONEMES: BatchMemo[tuple[str, str, str, str], Phonemes] = BatchMemo(
    "metrics.scorers.phoneme.phonemes", maxsize=1 << 16
)


def espeak_path() -> str | None:
    """The espeak-ng program on PATH, or None."""
    return shutil.which(ESPEAK_PROGRAM)


def espeak_unavailable_reason() -> str | None:
    """Why the per metric cannot run here (a sentence), or None when it can."""
    path = espeak_path()
    if path is None:
        return f"the {ESPEAK_PROGRAM} program is not installed; {INSTALL_HINT}"
    try:
        espeak_version(path)
    except ScorerUnavailable as exc:
        return str(exc)
    return None


def _environment() -> dict[str, str]:
    # A fixed UTF-8 locale: espeak-ng's character classes must not depend on the worker's.
    return {**os.environ, "LC_ALL": "C.UTF-8"}


@functools.lru_cache(maxsize=8)
def espeak_version(path: str) -> str:
    """espeak-ng's version ("1.51"), from `espeak-ng --version`; ScorerUnavailable when the
    program does not run or does not say."""
    try:
        proc = subprocess.run(
            [path, "--version"], capture_output=True, text=True, encoding="utf-8",
            errors="replace", timeout=30, check=False, env=_environment(),
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise ScorerUnavailable(f"{path} --version failed ({exc}); {INSTALL_HINT}") from exc
    match = re.search(r"text-to-speech:\s*(\S+)", proc.stdout)
    if proc.returncode != 0 or match is None:
        raise ScorerUnavailable(
            f"{path} --version did not name a version (exit {proc.returncode}: "
            f"{(proc.stdout + proc.stderr).strip()[:200]!r}); {INSTALL_HINT}"
        )
    return match.group(1)


class EspeakError(RuntimeError):
    """espeak-ng failed on a batch (a crash, a timeout, an error exit)."""


def _run_espeak(path: str, voice: str, lines: Sequence[str]) -> list[str]:
    """espeak-ng's output lines for these input lines (none may hold a line break)."""
    text = "".join(line + "\n" for line in lines)
    try:
        proc = subprocess.run(
            [path, *ESPEAK_ARGUMENTS, "-v", voice], input=text, capture_output=True, text=True,
            encoding="utf-8", errors="replace", timeout=60 + 0.05 * len(lines), check=False,
            env=_environment(),
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise EspeakError(f"{ESPEAK_PROGRAM} failed: {type(exc).__name__}: {exc}") from exc
    if proc.returncode != 0:
        message = proc.stderr.strip().removeprefix("Error: ") or f"exit status {proc.returncode}"
        raise EspeakError(f"{ESPEAK_PROGRAM} -v {voice}: {message}")
    out = proc.stdout.split("\n")
    if out and out[-1] == "":
        out.pop()
    return out


@functools.lru_cache(maxsize=64)
def _voice_check(path: str, voice: str) -> str | None:
    """None when espeak-ng accepts `voice`, else espeak-ng's complaint."""
    try:
        _run_espeak(path, voice, ["a"])
    except EspeakError as exc:
        return str(exc)
    return None


def _is_word_char(char: str) -> bool:
    return unicodedata.category(char)[0] in "LMN"


def g2p_input(text: str) -> str:
    """What espeak-ng is given for `text`: one line, no clause break (module docstring, 2)."""
    chars = [
        " " if char.isspace() or unicodedata.category(char) in ("Cc", "Cs") else char
        for char in text
    ]
    out: list[str] = []
    n = len(chars)
    i = 0
    while i < n:
        char = chars[i]
        if char in _APOSTROPHES and i > 0 and _is_word_char(chars[i - 1]):
            j = i + 1
            while j < n and chars[j] == " ":
                j += 1
            if j > i + 1 and j < n and _is_word_char(chars[j]):
                out.append("'")  # a detached elision, joined: "c' est" -> "c'est"
                i = j
                continue
        if unicodedata.category(char).startswith("P"):
            kept = _G2P_INWORD.get(char)
            inword = 0 < i < n - 1 and _is_word_char(chars[i - 1]) and _is_word_char(chars[i + 1])
            out.append(kept if kept is not None and inword else " ")
        else:
            out.append(char)
        i += 1
    return " ".join("".join(out).split())


def phoneme_tokens(line: str) -> Phonemes:
    """The phonemes of one espeak-ng output line (module docstring, 4)."""
    line = _LANGUAGE_SWITCH.sub(" ", line)
    tokens = (token.translate(_NOT_PHONEME) for token in _TOKEN_SPLIT.split(line))
    return tuple(token for token in tokens if token)


class Phonemiser:
    """espeak-ng for one voice, with the batch protocol and the shared memory.

    Raises ScorerUnavailable when espeak-ng is missing, ValueError for a voice espeak-ng does
    not have."""

    def __init__(self, voice: str, *, path: str | None = None):
        path = path or espeak_path()
        if path is None:
            raise ScorerUnavailable(
                f"the {ESPEAK_PROGRAM} program is not installed; {INSTALL_HINT}"
            )
        if not isinstance(voice, str) or not _VOICE_RE.fullmatch(voice):
            raise ValueError(
                f"language must be an espeak-ng voice name such as 'fr' or 'en-us', got {voice!r}"
            )
        self.path = path
        self.version = espeak_version(path)
        problem = _voice_check(path, voice)
        if problem is not None:
            raise ValueError(
                f"espeak-ng has no voice {voice!r} ({problem}); `espeak-ng --voices` lists them"
            )
        self.voice = voice

    def signature(self) -> dict[str, Any]:
        return {
            "program": ESPEAK_PROGRAM,
            "version": self.version,
            "voice": self.voice,
            "arguments": [*ESPEAK_ARGUMENTS, "-v", self.voice],
            "tokens": "espeak-ng phonemes (--sep); stress marks, clitic hyphens, word "
            "boundaries and language-switch marks dropped",
        }

    def phonemes(self, texts: Iterable[str]) -> dict[str, Phonemes]:
        """Text (as given, after normalisation) -> its phonemes, for every text.

        Raises EspeakError when espeak-ng fails."""
        inputs = {text: g2p_input(text) for text in texts}
        keys = {line: (self.path, self.version, self.voice, line) for line in inputs.values()}
        known = _PHONEMES.lookup(key for line, key in keys.items() if line)
        missing = [line for line, key in keys.items() if line and key not in known]
        found = self._convert(missing)
        _PHONEMES.store({keys[line]: phonemes for line, phonemes in found.items()})
        by_line = {line: known.get(key, ()) for line, key in keys.items()}
        by_line.update(found)
        return {text: by_line[line] for text, line in inputs.items()}

    def _convert(self, lines: list[str]) -> dict[str, Phonemes]:
        out: dict[str, Phonemes] = {}
        batch = []
        for line in lines:
            if len(line.encode("utf-8")) > _MAX_LINE_BYTES:
                out[line] = self._alone(line)
            else:
                batch.append(line)
        if not batch:
            return out
        processes = max(1, min(_MAX_PROCESSES, os.cpu_count() or 1, len(batch) // _MIN_CHUNK))
        size = -(-len(batch) // processes)
        chunks = [batch[start : start + size] for start in range(0, len(batch), size)]
        if len(chunks) == 1:
            results = [self._aligned(chunks[0])]
        else:
            with concurrent.futures.ThreadPoolExecutor(len(chunks)) as pool:
                results = list(pool.map(self._aligned, chunks))
        for chunk, result in zip(chunks, results, strict=True):
            out.update(zip(chunk, result, strict=True))
        return out

    def _alone(self, line: str) -> Phonemes:
        # One text in the call: every output line (one per clause) is its own.
        return phoneme_tokens(" ".join(_run_espeak(self.path, self.voice, [line])))

    def _aligned(self, lines: list[str]) -> list[Phonemes]:
        out = _run_espeak(self.path, self.voice, lines)
        if len(out) == len(lines):
            return [phoneme_tokens(line) for line in out]
        if len(lines) == 1:
            return [phoneme_tokens(" ".join(out))]
        middle = len(lines) // 2
        return self._aligned(lines[:middle]) + self._aligned(lines[middle:])


class PhonemeErrorScorer(TextScorer):
    """Phoneme error rate via espeak-ng (see the module docstring for every choice).

    Parameters: `language`, an espeak-ng voice ("fr", "en-us", "de", "cmn"; default "en"; a
    metric run fills in the study's language when it does not set one); `normaliser` (a
    Normaliser, its dict, a preset name, or None for `PER_DEFAULT_NORMALISER`).

    Values: per = (S + D + I) / N with N = phon_hits + phon_substitutions + phon_deletions =
    ref_phonemes; counts are ints. details: "reference"/"hypothesis" (the normalised texts),
    "reference_phonemes"/"hypothesis_phonemes" (space-separated), "alignment" over phonemes
    (the WER op format).

    Edge cases, decided on the phonemes: both without phonemes -> per 0, all counts 0; a
    reference without phonemes and a hypothesis with some -> Score.error "reference has no
    phonemes: PER is undefined"; a hypothesis without phonemes -> all deletions, per 1.0.
    espeak-ng failing on a batch gives every pair of it Score.error.
    """

    spec = specs.PER
    version = "1"
    libraries = ("jiwer",)

    def __init__(
        self,
        *,
        language: str = "en",
        normaliser: Normaliser | Mapping[str, Any] | str | None = None,
    ):
        self.normaliser = (
            PER_DEFAULT_NORMALISER if normaliser is None else coerce_normaliser(normaliser)
        )
        self.phonemiser = Phonemiser(language)
        self.language = language
        # Phonemes of the batch being scored (filled by `score`, one espeak-ng pass).
        self._batch: dict[str, Phonemes] = {}
        super().__init__(language=language, normaliser=self.normaliser.to_dict())

    def signature(self) -> dict[str, Any]:
        sig = super().signature()
        sig["g2p"] = self.phonemiser.signature()
        return sig

    def score(self, pairs: Sequence[Pair], *, encoder: Any = None) -> list[Score]:
        """One Score per pair, in order, with one espeak-ng pass for the batch's texts."""
        texts = [
            self.normaliser(text)
            for pair in pairs
            for text in (pair.reference, pair.hypothesis)
            if isinstance(text, str)
        ]
        try:
            self._batch = self.phonemiser.phonemes(texts)
        except EspeakError as exc:
            error = f"espeak-ng could not convert this batch: {exc}"
            # Pairs that are not text still get their own error.
            return [
                Score(error=error) if _both_text(pair) else self._safe_score(pair)
                for pair in pairs
            ]
        try:
            with fewer_collections():
                return [self._safe_score(pair) for pair in pairs]
        finally:
            self._batch = {}

    def _phonemes(self, text: str) -> Phonemes:
        found = self._batch.get(text)
        if found is None:
            found = self.phonemiser.phonemes([text])[text]
        return found

    def _score_pair(self, reference: str, hypothesis: str) -> Score:
        ref = self.normaliser(reference)
        hyp = self.normaliser(hypothesis)
        ref_ph, hyp_ph = self._phonemes(ref), self._phonemes(hyp)
        details: dict[str, Any] = {
            "reference": ref,
            "hypothesis": hyp,
            "reference_phonemes": " ".join(ref_ph),
            "hypothesis_phonemes": " ".join(hyp_ph),
        }
        if not ref_ph:
            if hyp_ph:
                return Score(details=details, error="reference has no phonemes: PER is undefined")
            details["alignment"] = []
            values: dict[str, float] = dict.fromkeys(self.outputs, 0)
            values["per"] = 0.0
            return Score(values=values, details=details)
        out = jiwer.process_words(" ".join(ref_ph), " ".join(hyp_ph))
        hits, subs, dels, ins = out.hits, out.substitutions, out.deletions, out.insertions
        n = hits + subs + dels
        values = {
            "per": (subs + dels + ins) / n,
            "phon_hits": hits,
            "phon_substitutions": subs,
            "phon_deletions": dels,
            "phon_insertions": ins,
            "ref_phonemes": n,
        }
        details["alignment"] = display_alignment(ref_ph, hyp_ph, out.alignments[0])
        return Score(values=values, details=details)


def _both_text(pair: Pair) -> bool:
    return isinstance(pair.reference, str) and isinstance(pair.hypothesis, str)


def corpus_per(scores: Iterable[Score]) -> float:
    """Corpus PER of PhonemeErrorScorer scores: sum(S + D + I) / sum(N), N = reference phonemes;
    the rules of `metrics.scorers.text.corpus_wer` (error scores skipped, ValueError if none is
    usable)."""
    return corpus_rate(
        scores, ("phon_substitutions", "phon_deletions", "phon_insertions"), "ref_phonemes", "PER"
    )
