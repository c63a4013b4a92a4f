"""What every scorer stores and how each stored value reads: the one declaration of a metric.

Each scorer is one `ScorerSpec` below: its metric name, where its class lives (imported only
when a scorer is built), whether it needs the shared encoder, and one `MetricValue` per value
it stores in a result (`MetricResult.values`), with that value's direction and whether it is a
headline score. The scorer class names its spec (`spec = specs.WER`) and takes its name,
outputs, direction and encoder need from it; `registry` lists the specs and answers every
reader (the metrics page, the analysis, the learned proxies) without importing a scorer's
module, so listing them costs nothing (no torch, no jiwer, no nltk).

A scorer's `params` are the parameters a researcher sets on the metrics page, typed
(`kit.params.Param`): the page builds one input per parameter from them, so nobody types JSON.

A new metric is one spec added to `SPECS` here and its class naming it; `SPECS`' order is the
order pages show metrics in (WER first: the headline of an ASR study).

How the values were decided, for the ones that are not plain "a score":

- Error rates (wer, cer, per, mer, wil, sub/del/ins_rate, nker, sd, heval) are lower-better;
  accuracies and similarities (wip, word_acc, bleu, chrf, rouge, bertscore, cosine) are
  higher-better.
- Counts (`count=True`) grow with the length of the reference, so across items they say more
  about lengths than about quality: the analysis' validity tables compare only rates and
  scores with people. Between two outputs of the same reference (a learned pairwise proxy's
  feature) a count does compare, so it still has a direction: an error count is lower-better
  and a hit count higher-better (hits + substitutions + deletions is the reference's length,
  fixed for a reference: one more hit is one error fewer).
- Counts of the reference itself (`ref_words`, `ref_chars`, `ref_phonemes`, and H_eval's
  `n_keywords` / `n_nonkeywords`, whose keyword split depends on the reference alone) are the
  same for every system's output of an item: they have no direction (None) and nothing
  compares them.
- `nker` (H_eval's non-keyword error rate, wrong non-keywords over non-keywords, in [0, 1]) is
  a rate like `sub_rate`, not a count.
- Headline scores are each metric's main values: the one stored as the result's `headline`
  (the first value) and ROUGE-L's F besides ROUGE-1's. The analysis compares them with every
  binary criterion's human labels and lists them first elsewhere.
- `sd` is stored by `semantic_distance` and again by `heval` (the same number, one forward
  pass); a value shared by two scorers is declared once (`_SD`) and the registry refuses two
  declarations of one name that differ.
"""

from __future__ import annotations

from kit.params import BOOL, CHOICE, FLOAT, INT, TEXT, Param
from metrics.scorers.base import MetricValue, ScorerSpec


def _lower(name: str, *, headline: bool = False, count: bool = False) -> MetricValue:
    return MetricValue(name, "lower", headline=headline, count=count)


def _higher(name: str, *, headline: bool = False, count: bool = False) -> MetricValue:
    return MetricValue(name, "higher", headline=headline, count=count)


def _of_reference(name: str) -> MetricValue:
    """A count of the reference alone: the same for every output of an item."""
    return MetricValue(name, None, count=True)


def _edit_counts(prefix: str) -> tuple[MetricValue, ...]:
    """An alignment's counts of one unit (words, characters or phonemes)."""
    return (
        _higher(f"{prefix}hits", count=True),
        _lower(f"{prefix}substitutions", count=True),
        _lower(f"{prefix}deletions", count=True),
        _lower(f"{prefix}insertions", count=True),
    )


_SD = _lower("sd", headline=True)

# The stored WER counts a corpus WER sums (errors over reference words), read by
# `metrics.scorers.text.corpus_wer` and by the analysis' per-speaker WordAcc, which must
# not import the scorer's module (jiwer) to know them.
WER_ERROR_COUNTS = ("substitutions", "deletions", "insertions")
WER_REFERENCE_WORDS = "ref_words"

# The parameters a researcher sets on the metrics page (their inputs are built from these).
_NORMALISER = Param(
    "normaliser", CHOICE, choices=("default", "raw", "fr"),
    help="How texts are normalised before they are compared: default (lower case, no "
         "punctuation), raw (as written), fr (French elisions and hyphens split).")


def _normalise(default: bool = False) -> Param:
    return Param("normalise", BOOL, default=default,
                 help="Normalise both texts first (lower case, no punctuation).")

WER = ScorerSpec(
    name="wer",
    target="metrics.scorers.text:WordErrorScorer",
    default=True,
    params=(_NORMALISER,),
    values=(
        _lower("wer", headline=True),
        _lower("mer"),
        _lower("wil"),
        _higher("wip"),  # word information preserved, 1 - wil
        *_edit_counts(""),
        _lower("sub_rate"),
        _lower("del_rate"),
        _lower("ins_rate"),
        _higher("word_acc"),  # LATTE's WordAcc, 100 - 100 * wer clamped at 0
        _of_reference("ref_words"),
    ),
)

CER = ScorerSpec(
    name="cer",
    target="metrics.scorers.text:CharErrorScorer",
    default=True,
    params=(_NORMALISER,),
    values=(_lower("cer", headline=True), *_edit_counts("char_"), _of_reference("ref_chars")),
)

PER = ScorerSpec(
    name="per",
    target="metrics.scorers.phoneme:PhonemeErrorScorer",
    # It runs the espeak-ng program: without it, "per" is unavailable (the reason says how to
    # install it), checked when the metric is first built or listed as available.
    requires="metrics.scorers.phoneme:espeak_unavailable_reason",
    study_language_param="language",
    params=(Param("language", TEXT, help="The espeak-ng voice, e.g. en-us, fr, de (blank: "
                                         "the study's language)."),),
    values=(_lower("per", headline=True), *_edit_counts("phon_"),
            _of_reference("ref_phonemes")),
)

BLEU = ScorerSpec(
    name="bleu",
    target="metrics.scorers.text:BleuScorer",
    default=True,
    params=(Param("tokenize", CHOICE, default="13a", choices=("13a", "intl", "char", "zh", "none"),
                  help="sacrebleu's tokeniser."), _normalise()),
    values=(_higher("bleu", headline=True),),
)

CHRF = ScorerSpec(
    name="chrf",
    target="metrics.scorers.text:ChrfScorer",
    default=True,
    params=(Param("word_order", INT, default=0, minimum=0, maximum=6,
                  help="Word n-grams too: 0 is chrF, 2 is chrF++."), _normalise()),
    values=(_higher("chrf", headline=True),),
)

ROUGE = ScorerSpec(
    name="rouge",
    target="metrics.scorers.text:RougeScorer",
    default=True,
    params=(Param("use_stemmer", BOOL, default=True,
                  help="Porter-stem English words before matching."), _normalise()),
    values=(
        _higher("rouge1_f", headline=True),
        _higher("rouge2_f"),
        _higher("rougeL_f", headline=True),
        _higher("rouge1_p"),
        _higher("rouge1_r"),
        _higher("rouge2_p"),
        _higher("rouge2_r"),
        _higher("rougeL_p"),
        _higher("rougeL_r"),
    ),
)

BERTSCORE = ScorerSpec(
    name="bertscore",
    target="metrics.scorers.semantic:BertScoreScorer",
    default=True,
    needs_encoder=True,
    params=(Param("idf", BOOL, default=False, help="Weight words by their inverse document "
                  "frequency over the study's references."),
            Param("layer", INT, minimum=1, maximum=100,
                  help="The encoder layer compared (blank: the last).")),
    values=(_higher("bertscore_f", headline=True), _higher("bertscore_p"),
            _higher("bertscore_r")),
)

SEMANTIC_DISTANCE = ScorerSpec(
    name="semantic_distance",
    target="metrics.scorers.semantic:SemanticDistanceScorer",
    default=True,
    needs_encoder=True,
    values=(_SD,),
)

EMBEDDING_COSINE = ScorerSpec(
    name="embedding_cosine",
    target="metrics.scorers.semantic:EmbeddingCosineScorer",
    default=True,
    needs_encoder=True,
    values=(_higher("cosine", headline=True),),
)

HEVAL = ScorerSpec(
    name="heval",
    target="metrics.scorers.heval:HevalScorer",
    default=True,
    needs_encoder=True,
    params=(Param("gamma", FLOAT, default=0.4, minimum=0.0, maximum=1.0,
                  help="Words whose normalised semantic distance to the reference is below "
                       "this are keywords."), _NORMALISER),
    values=(
        _lower("heval", headline=True),
        _SD,
        _lower("nker"),
        _of_reference("n_keywords"),
        _of_reference("n_nonkeywords"),
        _lower("wrong_keywords", count=True),
        _lower("wrong_nonkeywords", count=True),
    ),
)

# Every scorer, in the order pages show them.
SPECS: tuple[ScorerSpec, ...] = (
    WER, CER, PER, BLEU, CHRF, ROUGE, BERTSCORE, SEMANTIC_DISTANCE, EMBEDDING_COSINE, HEVAL,
)
