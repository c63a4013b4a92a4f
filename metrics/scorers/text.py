"""Reference-based text scorers: WER, CER (jiwer), BLEU, chrF (sacrebleu) and ROUGE (rouge-score).

All scorers here are cheap, deterministic and model-free (`needs_encoder = False`). Shared
guarantees:

- `score()` returns exactly one `Score` per pair, in order. A pair that cannot be scored (a text
  that is not a str, an undefined value, a library failure) gets `Score.error` and no values; it
  never raises and never affects the other pairs.
- Every value named in `outputs` is present in every Score without an error.
- `details["reference"]` / `details["hypothesis"]` hold the texts exactly as the library saw
  them (after the normaliser, if any), so a reader can see what was compared.
- `signature()` names the scorer version, its parameters (the normaliser as a dict), and the
  versions of the libraries that compute the values.

Empty texts ("empty" means no non-whitespace character after normalisation, or for ROUGE no
token after its tokeniser): a pair whose reference and hypothesis are both empty is a perfect
match for every scorer here (WER/CER 0, BLEU/chrF 100, ROUGE 1). Other cases are documented on
each scorer.
"""

from __future__ import annotations

import functools
import importlib.metadata
import unicodedata
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import jiwer
from nltk.stem import porter
from rouge_score import rouge_scorer, tokenize, tokenizers
from sacrebleu.metrics import BLEU, CHRF

from metrics.scorers import specs
from metrics.scorers.base import Pair, Score, Scorer
from metrics.scorers.heap import fewer_collections
from metrics.scorers.memo import memoised
from metrics.scorers.normalise import Normaliser, coerce_normaliser


def library_version(distribution: str) -> str:
    """The installed version of a distribution, or "unknown" (never raises).

    importlib.metadata is used because not every library exposes `__version__` (jiwer does not).
    """
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _is_blank(text: str) -> bool:
    return not text.strip()


class TextScorer(Scorer):
    """Per-pair loop with the error handling every text scorer shares."""

    # Distributions whose versions go into the signature.
    libraries: ClassVar[tuple[str, ...]] = ()

    def signature(self) -> dict[str, Any]:
        sig = super().signature()
        sig["libraries"] = {lib: library_version(lib) for lib in self.libraries}
        return sig

    def score(self, pairs: Sequence[Pair], *, encoder: Any = None) -> list[Score]:
        """One Score per pair, in order; `encoder` is ignored (no model involved)."""
        with fewer_collections():
            return [self._safe_score(pair) for pair in pairs]

    def _safe_score(self, pair: Pair) -> Score:
        for role, text in (("reference", pair.reference), ("hypothesis", pair.hypothesis)):
            if not isinstance(text, str):
                return Score(error=f"{role} is not text (got {type(text).__name__})")
        try:
            return self._score_pair(pair.reference, pair.hypothesis)
        except Exception as exc:  # the contract: one bad pair never fails the batch
            return Score(error=f"{self.name} failed on this pair: {type(exc).__name__}: {exc}")

    @abstractmethod
    def _score_pair(self, reference: str, hypothesis: str) -> Score:
        """Implemented by each concrete scorer."""


@memoised(maxsize=1 << 13)
def word_alignment(reference: str, hypothesis: str) -> jiwer.WordOutput:
    """`jiwer.process_words(reference, hypothesis)` of one pair of normalised, non-empty texts.

    Remembered because WER and H_eval align the same normalised words (with the default
    normaliser of both). Callers must not mutate the result."""
    return jiwer.process_words(reference, hypothesis)


def display_alignment(
    ref_tokens: Sequence[str], hyp_tokens: Sequence[str], chunks: Iterable[Any]
) -> list[dict[str, Any]]:
    """jiwer AlignmentChunks as display ops: {"op", "ref": [tokens], "hyp": [tokens]}."""
    return [
        {
            "op": chunk.type,  # jiwer's names already are equal/substitute/delete/insert
            "ref": list(ref_tokens[chunk.ref_start_idx : chunk.ref_end_idx]),
            "hyp": list(hyp_tokens[chunk.hyp_start_idx : chunk.hyp_end_idx]),
        }
        for chunk in chunks
    ]


class _NormalisedErrorRate(TextScorer):
    """Shared constructor/signature for the jiwer scorers, which always normalise."""

    libraries = ("jiwer",)

    def __init__(self, *, normaliser: Normaliser | Mapping[str, Any] | None = None):
        """`normaliser`: a Normaliser, its `to_dict()`, or None for `Normaliser()`."""
        self.normaliser = coerce_normaliser(normaliser)
        super().__init__(normaliser=self.normaliser.to_dict())


class WordErrorScorer(_NormalisedErrorRate):
    """Word error rate and its parts, via `jiwer.process_words` on normalised texts.

    Values (counts are ints, the rest floats):
    - wer = (S + D + I) / N with N = H + S + D, the reference length in words; a fraction in
      [0, inf) (insertions can push it above 1). mer, wil, wip as jiwer defines them.
    - hits, substitutions, deletions, insertions, ref_words (= N).
    - sub_rate = S/N, del_rate = D/N, ins_rate = I/N (the LATTE baseline's features), so
      sub_rate + del_rate + ins_rate == wer.
    - word_acc = 100 - min(100 * wer, 100): LATTE's WordAcc, in percent, in [0, 100].
    details: "alignment" (list of {"op": "equal"|"substitute"|"delete"|"insert", "ref": [...],
    "hyp": [...]}), "reference" and "hypothesis" (the normalised texts).

    Edge cases (decided on the normalised texts, so "..." counts as empty):
    - empty reference and empty hypothesis: a perfect match, wer 0, all counts and rates 0,
      mer 0, wil 0, wip 1, word_acc 100, empty alignment.
    - empty reference, non-empty hypothesis: Score.error "reference is empty: WER is undefined"
      and no values (N = 0; jiwer would report the insertion count as the WER).
    - empty hypothesis, non-empty reference: every reference word is a deletion, wer 1.0.
    """

    spec = specs.WER
    version = "1"

    def _score_pair(self, reference: str, hypothesis: str) -> Score:
        ref = self.normaliser(reference)
        hyp = self.normaliser(hypothesis)
        details: dict[str, Any] = {"reference": ref, "hypothesis": hyp}
        # jiwer splits on whitespace; decide emptiness the same way.
        if not ref.split():
            if hyp.split():
                return Score(details=details, error="reference is empty: WER is undefined")
            details["alignment"] = []
            return Score(values=_perfect_word_values(), details=details)

        out = word_alignment(ref, hyp)
        hits, subs, dels, ins = out.hits, out.substitutions, out.deletions, out.insertions
        n = hits + subs + dels  # > 0 here: the reference has at least one word
        wer = (subs + dels + ins) / n
        values: dict[str, float] = {
            "wer": wer,
            "mer": float(out.mer),
            "wil": float(out.wil),
            "wip": float(out.wip),
            "hits": hits,
            "substitutions": subs,
            "deletions": dels,
            "insertions": ins,
            "sub_rate": subs / n,
            "del_rate": dels / n,
            "ins_rate": ins / n,
            "word_acc": 100.0 - min(100.0 * wer, 100.0),
            "ref_words": n,
        }
        details["alignment"] = display_alignment(out.references[0], out.hypotheses[0],
                                                 out.alignments[0])
        return Score(values=values, details=details)


def _perfect_word_values() -> dict[str, float]:
    return {
        "wer": 0.0,
        "mer": 0.0,
        "wil": 0.0,
        "wip": 1.0,
        "hits": 0,
        "substitutions": 0,
        "deletions": 0,
        "insertions": 0,
        "sub_rate": 0.0,
        "del_rate": 0.0,
        "ins_rate": 0.0,
        "word_acc": 100.0,
        "ref_words": 0,
    }


class CharErrorScorer(_NormalisedErrorRate):
    """Character error rate via `jiwer.process_characters` on normalised texts.

    Values: cer = (S + D + I) / N with N = char_hits + char_substitutions + char_deletions =
    ref_chars, the reference length in characters; spaces between words count as characters
    (jiwer's convention; leading/trailing whitespace does not). Counts are ints.
    details: "alignment" over characters (same op format as WER), "reference", "hypothesis".

    Edge cases, as for WER: both empty -> cer 0 and all counts 0; empty reference with a
    non-empty hypothesis -> Score.error "reference is empty: CER is undefined"; empty
    hypothesis -> all deletions, cer 1.0.
    """

    spec = specs.CER
    version = "1"

    def _score_pair(self, reference: str, hypothesis: str) -> Score:
        ref = self.normaliser(reference)
        hyp = self.normaliser(hypothesis)
        details: dict[str, Any] = {"reference": ref, "hypothesis": hyp}
        if _is_blank(ref):
            if not _is_blank(hyp):
                return Score(details=details, error="reference is empty: CER is undefined")
            details["alignment"] = []
            values: dict[str, float] = dict.fromkeys(self.outputs, 0)
            values["cer"] = 0.0
            return Score(values=values, details=details)

        out = jiwer.process_characters(ref, hyp)
        hits, subs, dels, ins = out.hits, out.substitutions, out.deletions, out.insertions
        n = hits + subs + dels
        values = {
            "cer": (subs + dels + ins) / n,
            "char_hits": hits,
            "char_substitutions": subs,
            "char_deletions": dels,
            "char_insertions": ins,
            "ref_chars": n,
        }
        details["alignment"] = display_alignment(out.references[0], out.hypotheses[0],
                                                 out.alignments[0])
        return Score(values=values, details=details)


def corpus_rate(
    scores: Iterable[Score], error_keys: tuple[str, str, str], length_key: str, metric: str
) -> float:
    errors: float = 0
    length: float = 0
    used = 0
    for score in scores:
        if score.error is not None:
            continue
        try:
            errors += sum(score.values[key] for key in error_keys)
            length += score.values[length_key]
        except KeyError as exc:
            raise ValueError(f"a score has no {exc.args[0]!r} value: not a {metric} score") from exc
        used += 1
    if used == 0:
        raise ValueError(f"corpus {metric} needs at least one score without an error")
    if length == 0:
        # Only reachable when every used pair had an empty reference and an empty hypothesis
        # (a non-empty hypothesis against an empty reference is an error score, skipped above).
        return 0.0
    return errors / length


def corpus_wer(scores: Iterable[Score]) -> float:
    """Corpus WER of WordErrorScorer scores: sum(S + D + I) / sum(N), N = reference words.

    This weights each pair by its reference length; it is NOT the mean of per-pair WERs (a
    one-word sentence with one error would otherwise weigh as much as a long one). Scores with an
    error (empty reference, non-empty hypothesis) are skipped, so their insertions are not
    counted. Returns 0.0 when every used reference is empty. Raises ValueError if no score is
    usable or a score lacks the WER counts.
    """
    return corpus_rate(scores, specs.WER_ERROR_COUNTS, specs.WER_REFERENCE_WORDS, "WER")


def corpus_cer(scores: Iterable[Score]) -> float:
    """Corpus CER of CharErrorScorer scores: sum(S + D + I) / sum(N); same rules as corpus_wer."""
    return corpus_rate(
        scores, ("char_substitutions", "char_deletions", "char_insertions"), "ref_chars", "CER"
    )


def _optional_normaliser(normalise: bool | Normaliser | Mapping[str, Any]) -> Normaliser | None:
    """The `normalise` parameter of the sacrebleu and ROUGE scorers.

    False -> no normalisation; True -> `Normaliser()`; a Normaliser or its dict -> that one.
    """
    if normalise is False:
        return None
    if normalise is True:
        return Normaliser()
    return coerce_normaliser(normalise)


def _normaliser_param(normaliser: Normaliser | None) -> dict[str, Any] | bool:
    # Stored as False rather than None so that the params read like the constructor call.
    return normaliser.to_dict() if normaliser is not None else False


class _SacrebleuScorer(TextScorer):
    """Shared parameters of the sacrebleu scorers.

    `normalise` defaults to False: sacrebleu tokenises itself and its results are comparable to
    published numbers only on raw text (the signature records this as "normaliser": null).
    True applies `Normaliser()`; a Normaliser or its dict applies that one.
    """

    libraries = ("sacrebleu",)
    _perfect: ClassVar[float] = 100.0
    normaliser: Normaliser | None
    _scorer: BLEU | CHRF  # built once in __init__, reused for every pair

    def _prepare(self, reference: str, hypothesis: str) -> tuple[str, str]:
        if self.normaliser is None:
            return reference, hypothesis
        return self.normaliser(reference), self.normaliser(hypothesis)

    @abstractmethod
    def _metric(self) -> Any:
        """Implemented by each concrete scorer."""

    def signature(self) -> dict[str, Any]:
        sig = super().signature()
        sig["normaliser"] = self.normaliser.to_dict() if self.normaliser is not None else None
        # sacrebleu only builds a signature after an evaluation (it needs the reference count):
        # evaluate a throwaway pair on a fresh metric so the shared one is left untouched.
        probe = self._metric()
        probe.sentence_score("a", ["a"])
        sig["sacrebleu_signature"] = str(probe.get_signature())
        return sig

    def _score_pair(self, reference: str, hypothesis: str) -> Score:
        ref, hyp = self._prepare(reference, hypothesis)
        details: dict[str, Any] = {"reference": ref, "hypothesis": hyp}
        if _is_blank(ref) and _is_blank(hyp):
            # sacrebleu returns 0 for two empty strings; identical (empty) texts are a perfect
            # match, consistently with WER 0 for the same pair.
            return Score(values={self.outputs[0]: self._perfect}, details=details)
        result = self._scorer.sentence_score(hyp, [ref])
        # Floating-point noise can give 100.00000000000004 for identical texts; values are
        # documented to lie in [0, 100].
        value = min(max(float(result.score), 0.0), 100.0)
        details.update(self._details(result))
        return Score(values={self.outputs[0]: value}, details=details)

    def _details(self, result: Any) -> dict[str, Any]:
        return {}


class BleuScorer(_SacrebleuScorer):
    """Sentence-level BLEU (sacrebleu, effective order, default "exp" smoothing), 0..100.

    Parameters: `tokenize` (sacrebleu tokeniser name, default "13a"; "zh", "char" or "intl"
    suit other scripts), `normalise` (see _SacrebleuScorer; default False, so BLEU is
    case-sensitive and counts punctuation tokens). Empty texts: both empty -> 100; only one
    empty -> 0 (sacrebleu's value). details: n-gram "precisions" (percent), brevity penalty
    "bp", "sys_len", "ref_len".
    """

    spec = specs.BLEU
    version = "1"

    def __init__(
        self, *, normalise: bool | Normaliser | Mapping[str, Any] = False, tokenize: str = "13a"
    ):
        self.normaliser = _optional_normaliser(normalise)
        self.tokenize = tokenize
        try:
            # Built now so that a bad `tokenize` fails at configuration, not at the first pair.
            self._scorer = self._metric()
        except KeyError as exc:  # sacrebleu's error for an unknown tokeniser name
            raise ValueError(f"unknown sacrebleu tokenizer {tokenize!r}") from exc
        super().__init__(
            normalise=_normaliser_param(self.normaliser),
            tokenize=tokenize,
        )

    def _metric(self) -> BLEU:
        return _ReferenceMemoBLEU(effective_order=True, tokenize=self.tokenize)

    def _details(self, result: Any) -> dict[str, Any]:
        return {
            "precisions": [float(p) for p in result.precisions],
            "bp": float(result.bp),
            "sys_len": int(result.sys_len),
            "ref_len": int(result.ref_len),
        }


class ChrfScorer(_SacrebleuScorer):
    """Sentence-level chrF (sacrebleu `CHRF`, character 6-grams, beta 2), 0..100.

    Parameters: `word_order` (0 = chrF, the default; 2 = chrF++), `normalise` (see
    _SacrebleuScorer; default False). Works on any script (characters, not words). Empty texts:
    both empty -> 100; only one empty -> 0 (sacrebleu's value).
    """

    spec = specs.CHRF
    version = "1"

    def __init__(
        self, *, word_order: int = 0, normalise: bool | Normaliser | Mapping[str, Any] = False
    ):
        if isinstance(word_order, bool) or not isinstance(word_order, int) or word_order < 0:
            raise ValueError(f"word_order must be a non-negative int, got {word_order!r}")
        self.normaliser = _optional_normaliser(normalise)
        self.word_order = word_order
        self._scorer = self._metric()
        super().__init__(
            word_order=word_order,
            normalise=_normaliser_param(self.normaliser),
        )

    def _metric(self) -> CHRF:
        return _ReferenceMemoCHRF(word_order=self.word_order)


class _ReferenceMemo:
    """sacrebleu metric that extracts the n-grams of each distinct reference once.

    `_extract_reference_info` is the hook sacrebleu's base class documents for its own
    reference caching (`sentence_score` calls it once per call): a reference shared by several
    systems is tokenised and counted once. Its result is only read by sacrebleu. Bounded: the
    memory starts afresh past `_REFERENCE_MEMO_SIZE` references."""

    _REFERENCE_MEMO_SIZE = 4096

    def _extract_reference_info(self, refs: Sequence[str]) -> dict[str, Any]:
        memo: dict[tuple[str, ...], dict[str, Any]] = self.__dict__.setdefault(
            "_reference_memo", {})
        key = tuple(refs)
        info = memo.get(key)
        if info is None:
            if len(memo) >= self._REFERENCE_MEMO_SIZE:
                memo.clear()
            info = memo[key] = super()._extract_reference_info(refs)  # type: ignore[misc]
        return info


class _ReferenceMemoBLEU(_ReferenceMemo, BLEU):
    pass


class _ReferenceMemoCHRF(_ReferenceMemo, CHRF):
    pass


_ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def _has_letter_or_digit(text: str) -> bool:
    return any(unicodedata.category(c)[0] in "LN" for c in text)


class RougeScorer(TextScorer):
    """ROUGE-1, ROUGE-2 and ROUGE-L precision, recall and F1 (rouge-score), each in [0, 1].

    Calls `.score(target=reference, prediction=hypothesis)`: rouge-score takes the target
    first, and swapping the arguments silently swaps precision and recall.

    Parameters: `use_stemmer` (Porter stemmer from nltk, default True), `normalise` (default
    False: rouge-score lowercases and splits on anything but [a-z0-9] itself).

    rouge-score's tokeniser keeps only ASCII letters and digits, so:
    - a text that has letters or digits but yields no token (Devanagari, CJK, Arabic, ...) gets
      Score.error "... rouge-score keeps only ASCII letters and digits" rather than a
      misleading 0 (or 1 for two such texts);
    - a text with some non-ASCII letters is scored on its ASCII tokens only ("café" -> "caf"),
      flagged with details["non_ascii_ignored"] = True.
    Empty texts (no token and no letter/digit): both empty -> every value 1.0; only one empty ->
    every value 0.0 (rouge-score's value).
    """

    spec = specs.ROUGE
    version = "1"

    def __init__(
        self, *, use_stemmer: bool = True, normalise: bool | Normaliser | Mapping[str, Any] = False
    ):
        if not isinstance(use_stemmer, bool):
            raise ValueError(f"use_stemmer must be a bool, got {use_stemmer!r}")
        self.normaliser = _optional_normaliser(normalise)
        self.use_stemmer = use_stemmer
        self._tokenizer = _MemoTokenizer(use_stemmer=use_stemmer)
        # Same tokenizer object for the emptiness checks and the scoring, so they cannot differ.
        self._scorer = rouge_scorer.RougeScorer(
            list(_ROUGE_TYPES), use_stemmer=use_stemmer, tokenizer=self._tokenizer
        )
        super().__init__(
            use_stemmer=use_stemmer,
            normalise=_normaliser_param(self.normaliser),
        )

    libraries = ("rouge-score", "nltk")

    def signature(self) -> dict[str, Any]:
        sig = super().signature()
        if not self.use_stemmer:
            # nltk only supplies the stemmer; without it, its version cannot change a score.
            del sig["libraries"]["nltk"]
        sig["normaliser"] = self.normaliser.to_dict() if self.normaliser is not None else None
        return sig

    def _score_pair(self, reference: str, hypothesis: str) -> Score:
        if self.normaliser is not None:
            reference, hypothesis = self.normaliser(reference), self.normaliser(hypothesis)
        details: dict[str, Any] = {"reference": reference, "hypothesis": hypothesis}
        ref_tokens = self._tokenizer.tokenize(reference)
        hyp_tokens = self._tokenizer.tokenize(hypothesis)
        for role, text, tokens in (
            ("reference", reference, ref_tokens),
            ("hypothesis", hypothesis, hyp_tokens),
        ):
            if not tokens and _has_letter_or_digit(text):
                return Score(
                    details=details,
                    error=f"ROUGE cannot score this {role}: it has letters or digits but no "
                    "token, because rouge-score keeps only ASCII letters and digits",
                )
        both = reference + hypothesis
        details["non_ascii_ignored"] = not both.isascii() and any(
            not c.isascii() and unicodedata.category(c)[0] in "LN" for c in both
        )
        if not ref_tokens and not hyp_tokens:
            return Score(values=dict.fromkeys(self.outputs, 1.0), details=details)
        # Target (reference) first: the argument order is rouge-score's, and a known trap.
        result = self._scorer.score(target=reference, prediction=hypothesis)
        values: dict[str, float] = {}
        for rouge_type in _ROUGE_TYPES:
            s = result[rouge_type]
            values[f"{rouge_type}_f"] = float(s.fmeasure)
            values[f"{rouge_type}_p"] = float(s.precision)
            values[f"{rouge_type}_r"] = float(s.recall)
        return Score(values={name: values[name] for name in self.outputs}, details=details)


class _MemoTokenizer(tokenizers.Tokenizer):
    """rouge-score's default tokenizer (`rouge_score.tokenize.tokenize`) with a memory: the
    emptiness check and the scoring read the same tokens, a reference shared by several systems
    is tokenised once, and every distinct word is stemmed once (Porter stemming was most of
    ROUGE's time)."""

    def __init__(self, use_stemmer: bool, size: int = 20_000):
        stemmer = _MemoStemmer() if use_stemmer else None
        self._tokenize = functools.lru_cache(maxsize=size)(
            lambda text: tuple(tokenize.tokenize(text, stemmer))
        )

    def tokenize(self, text: str) -> list[str]:
        return list(self._tokenize(text))


_PORTER = porter.PorterStemmer()  # what rouge-score's DefaultTokenizer uses


@memoised(maxsize=1 << 16)
def _porter_stem(word: str) -> str:
    return _PORTER.stem(word)


class _MemoStemmer:
    """nltk's Porter stemmer (as rouge-score builds it) remembering each word's stem."""

    def stem(self, word: str) -> str:
        return _porter_stem(word)

