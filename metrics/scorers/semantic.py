"""Embedding-based scorers: BERTScore, semantic distance (HEVAL eq. 1), embedding cosine (LATTE).

All three read the shared `Encoder` (one forward pass per distinct text, see `encoder`).

Edge cases (never exceptions; the same rules in every scorer of this module and in H_eval):
- Empty or whitespace-only REFERENCE (no token besides [CLS]/[SEP]): `Score.error`
  "empty reference: ...". There is nothing to compare against, and the pair should be fixed in
  the study data rather than scored.
- Empty or whitespace-only HYPOTHESIS (an ASR system that recognised nothing): a defined,
  worst-case value, not an error, so that empty outputs are never silently dropped from a
  system's average (dropping them would favour systems that output nothing):
  BERTScore P = R = F = 0 (what bert-score returns; rescaled by the baseline if one is given),
  cosine = 0 and SD = 1 (an empty text has no meaning: its embedding counts as orthogonal).
  `details["empty_hypothesis"] = True`.
- Texts longer than the model's maximum length (512 tokens for all-MiniLM-L6-v2, as bert-score)
  are truncated; `details["truncated"] = True` (the key is present only when true).
- Any script: texts the tokenizer cannot split (e.g. Chinese with an English vocabulary) become
  [UNK] tokens and still score.
"""

from __future__ import annotations

import csv
import hashlib
import math
from abc import abstractmethod
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from metrics.scorers.base import Pair, Score, Scorer
from metrics.scorers.encoder import Encoded, Encoder, get_encoder

EMPTY_REFERENCE = "empty reference: the reference has no text to compare against"


def truncation_details(*records: Encoded) -> dict[str, Any]:
    return {"truncated": True} if any(r.truncated for r in records) else {}


class EncoderScorer(Scorer):
    """Base for scorers reading the shared encoder; `model_path` (a local directory) picks the
    model, None the embedded default (all-MiniLM-L6-v2)."""

    needs_encoder = True

    def encoder_for(self, encoder: Encoder | None) -> Encoder:
        return encoder if encoder is not None else get_encoder(self.params.get("model_path"))

    def encoder_layers(self, encoder: Encoder) -> set[int]:
        return set()

    def signature(self, encoder: Encoder | None = None) -> dict[str, Any]:
        """Base signature plus the encoder's (model, hash, library versions, device, dtype).

        Pass the encoder that scored; without one, the process default for `model` is named.
        """
        sig = super().signature()
        sig["encoder"] = self.encoder_for(encoder).signature()
        return sig


def read_baseline_file(path: str | Path, layer: int) -> tuple[float, float, float]:
    """(P, R, F) baselines of `layer` from a bert-score rescale file.

    bert-score reads these comma-separated files (header `LAYER,P,R,F`, one row per layer) with
    pandas and takes the row at POSITION `num_layers`; so do we.
    """
    with open(path, newline="") as handle:
        rows = [row for row in csv.reader(handle) if row]
    p, r, f = (float(x) for x in rows[1:][layer][1:4])
    return p, r, f


# BERTScore as bert-score 0.3.13 computes it (bert_score/utils.py: sent_encode, get_idf_dict,
# greedy_cos_idf, score), one pair at a time (no padded batches):
# - tokens: the encoder's ids = sent_encode (stripped text, special tokens, truncation at
#   tokenizer.model_max_length); embeddings = hidden_states[layer] of the full model, which is
#   bert-score's output of the model cut to `num_layers` layers.
# - weights: without idf 1 for every token except [CLS] and [SEP] (0); with idf,
#   idf(t) = log((M + 1) / (df(t) + 1)) over the M idf sentences (tokens of a sentence counted
#   once; unseen tokens log(M + 1)); [CLS]/[SEP] occur in every sentence, so their idf is 0.
# - every token, [CLS]/[SEP] included, is a candidate in the max: P = sum_h w_h max_r cos(h, r)
#   / sum_h w_h, R likewise over reference tokens, F = 2PR / (P + R).
# - empty hypothesis (only special tokens): P = R = F = 0; F of 0/0 is 0. A non-empty text
#   whose weights sum to 0 (possible only with idf) gets 0 for its side (bert-score: NaN).
# - rescaling: x' = (x - b) / (1 - b) for P, R and F separately.
# - padding: bert-score pads each batch of `batch_size` consecutive pairs and multiplies the
#   similarity matrix by the padding mask, so a padded position has similarity exactly 0 and
#   takes part in the max. A pair whose reference is shorter (in tokens) than the longest
#   reference of its batch therefore gets max(0, best match) for every hypothesis token (P),
#   and likewise R when its hypothesis is shorter than the batch's longest hypothesis. Best
#   matches below 0 DO occur with all-MiniLM-L6-v2 (e.g. "fite"/"lamt" against "The flight is
#   about to land"), so bert-score's numbers depend on a pair's neighbours.
#   Default here: the best match is always floored at 0 (what bert-score does for every padded
#   pair, i.e. all but about one pair per batch), so a score never depends on the other pairs
#   of the call (Celery chunks vary; results must be reproducible).
#   `bert_score_batch_size=B` reproduces bert-score exactly (floor only where its batches of B
#   pairs, in the given order, would pad): for validation against the package only.
# - multiple references per hypothesis (bert-score keeps the best) are not supported: one
#   Pair, one reference.
class BertScoreScorer(EncoderScorer):
    """BERTScore F/P/R (see the notes above).

    Params: `layer` (hidden-state index, default the last = bert-score's num_layers for the
    whole model), `idf` with `idf_sentences` (required then: the study's references; M counts
    them as given, repeats included, as bert-score counts its `refs`), `idf_digest` (the
    caller's digest of those sentences for the signature; default sha256 of them joined by
    U+001F), `baseline` (P, R, F) for rescaling (`read_baseline_file` reads bert-score's
    files), `bert_score_batch_size` (validation only), `model_path`.
    """

    name = "bertscore"
    version = "1"
    direction = "higher"
    outputs = ("bertscore_f", "bertscore_p", "bertscore_r")

    def __init__(
        self,
        *,
        layer: int | None = None,
        idf: bool = False,
        idf_sentences: Sequence[str] | None = None,
        baseline: Sequence[float] | None = None,
        model_path: str | None = None,
        bert_score_batch_size: int | None = None,
        idf_digest: str | None = None,
    ):
        if idf and not idf_sentences:
            raise ValueError("bertscore with idf=True needs idf_sentences (the study's references)")
        if baseline is not None:
            baseline = tuple(float(x) for x in baseline)
            if len(baseline) != 3 or any(b >= 1 for b in baseline):
                raise ValueError("baseline must be three numbers below 1: (P, R, F)")
        super().__init__(
            layer=layer, idf=bool(idf), idf_sentences=list(idf_sentences or []) if idf else None,
            baseline=baseline, model_path=model_path,
            bert_score_batch_size=bert_score_batch_size, idf_digest=idf_digest,
        )
        self._idf_tables: dict[str, torch.Tensor] = {}

    def signature(self, encoder: Encoder | None = None) -> dict[str, Any]:
        sig = super().signature(encoder)
        params = dict(sig["params"])
        sentences = params.pop("idf_sentences")
        if sentences is not None:  # thousands of sentences: store their count and a hash
            digest = params["idf_digest"] or hashlib.sha256(
                "\x1f".join(sentences).encode()
            ).hexdigest()[:16]
            params["idf_sentences"] = {"n": len(sentences), "sha256": digest}
        params["layer"] = self.layer_for(self.encoder_for(encoder))
        sig["params"] = params
        return sig

    def layer_for(self, encoder: Encoder) -> int:
        layer = self.params["layer"]
        return encoder.num_layers if layer is None else encoder.layer_index(int(layer))

    def encoder_layers(self, encoder: Encoder) -> set[int]:
        return {self.layer_for(encoder)}

    def _weight_table(self, encoder: Encoder) -> torch.Tensor:
        """Weight of every token id (bert-score's idf_dict as a dense table)."""
        table = self._idf_tables.get(encoder.model_path)
        if table is not None:
            return table
        tokenizer = encoder.tokenizer
        size = len(tokenizer)
        if self.params["idf"]:
            sentences = self.params["idf_sentences"]
            df: Counter[int] = Counter()
            for token_ids, _ in encoder.tokenize(sentences):
                df.update(set(token_ids))
            m = len(sentences)
            size = max(size, max(df, default=0) + 1)
            table = torch.full((size,), math.log(m + 1), dtype=torch.float64)
            ids = torch.tensor(list(df.keys()), dtype=torch.long)
            counts = torch.tensor(list(df.values()), dtype=torch.float64)
            table[ids] = torch.log((m + 1) / (counts + 1))
            table = table.float()
        else:
            table = torch.ones(size, dtype=torch.float32)
            for special in (tokenizer.cls_token_id, tokenizer.sep_token_id):
                if special is not None:
                    table[special] = 0.0
        self._idf_tables[encoder.model_path] = table
        return table

    def score(self, pairs: Sequence[Pair], *, encoder: Encoder | None = None) -> list[Score]:
        enc = self.encoder_for(encoder)
        layer = self.layer_for(enc)
        table = self._weight_table(enc)
        baseline = self.params["baseline"]
        texts = [p.reference for p in pairs] + [p.hypothesis for p in pairs]
        records = enc.encode(texts, layers=[layer])
        by_text = dict(zip(texts, records, strict=True))
        prepared: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

        def prepare(record: Encoded) -> tuple[torch.Tensor, torch.Tensor]:
            item = prepared.get(record.text)
            if item is None:
                emb = record.hidden[layer]
                emb = emb / emb.norm(dim=-1, keepdim=True)
                ids = torch.tensor(record.input_ids, dtype=torch.long)
                item = prepared[record.text] = (emb, table[ids])
            return item

        floor_p, floor_r = self._floors([by_text[p.reference] for p in pairs],
                                        [by_text[p.hypothesis] for p in pairs])
        scores: list[Score] = []
        with torch.inference_mode():
            for i, pair in enumerate(pairs):
                ref, hyp = by_text[pair.reference], by_text[pair.hypothesis]
                if ref.empty:
                    scores.append(Score(error=EMPTY_REFERENCE))
                    continue
                details = truncation_details(ref, hyp)
                if hyp.empty:
                    p = r = f = 0.0
                    details["empty_hypothesis"] = True
                else:
                    ref_emb, ref_w = prepare(ref)
                    hyp_emb, hyp_w = prepare(hyp)
                    sim = hyp_emb @ ref_emb.T  # [hyp tokens, ref tokens]
                    best_p, best_r = sim.max(dim=1).values, sim.max(dim=0).values
                    p = _weighted(best_p.clamp_min(0) if floor_p[i] else best_p, hyp_w)
                    r = _weighted(best_r.clamp_min(0) if floor_r[i] else best_r, ref_w)
                    f = 2 * p * r / (p + r) if p + r != 0 else 0.0
                    if not math.isfinite(f):
                        f = 0.0
                if baseline is not None:
                    bp, br, bf = baseline
                    p, r, f = (p - bp) / (1 - bp), (r - br) / (1 - br), (f - bf) / (1 - bf)
                scores.append(Score(
                    values={"bertscore_f": f, "bertscore_p": p, "bertscore_r": r},
                    details=details,
                ))
        return scores

    def _floors(self, refs: list[Encoded], hyps: list[Encoded]) -> tuple[list[bool], list[bool]]:
        """Per pair: floor the best matches of P / of R at 0? (see the padding note above)"""
        size = self.params["bert_score_batch_size"]
        if not size:
            return [True] * len(refs), [True] * len(hyps)
        floor_p, floor_r = [], []
        for start in range(0, len(refs), size):
            ref_lens = [r.n_tokens for r in refs[start:start + size]]
            hyp_lens = [h.n_tokens for h in hyps[start:start + size]]
            floor_p += [n < max(ref_lens) for n in ref_lens]
            floor_r += [n < max(hyp_lens) for n in hyp_lens]
        return floor_p, floor_r


def _weighted(values: torch.Tensor, weights: torch.Tensor) -> float:
    total = float(weights.sum())
    if total == 0.0:
        return 0.0
    return float((values * weights).sum()) / total


class _MeanCosineScorer(EncoderScorer):
    """Cosine of the mean-pooled sentence embeddings of reference and hypothesis."""

    def __init__(self, *, model_path: str | None = None):
        super().__init__(model_path=model_path)

    @abstractmethod
    def _value(self, cosine: float) -> dict[str, float]:
        """Implemented by each concrete scorer."""

    def score(self, pairs: Sequence[Pair], *, encoder: Encoder | None = None) -> list[Score]:
        if not pairs:
            return []
        enc = self.encoder_for(encoder)
        n = len(pairs)
        records = enc.encode([p.reference for p in pairs] + [p.hypothesis for p in pairs])
        refs, hyps = records[:n], records[n:]
        with torch.inference_mode():
            cosines = F.cosine_similarity(
                torch.stack([r.mean for r in refs]), torch.stack([h.mean for h in hyps]), dim=1
            ).tolist()
        scores = []
        for ref, hyp, cosine in zip(refs, hyps, cosines, strict=True):
            if ref.empty:
                scores.append(Score(error=EMPTY_REFERENCE))
                continue
            details = truncation_details(ref, hyp)
            if hyp.empty:
                cosine = 0.0
                details["empty_hypothesis"] = True
            scores.append(Score(values=self._value(cosine), details=details))
        return scores


class SemanticDistanceScorer(_MeanCosineScorer):
    """SD = 1 - cos(e_ref, e_hyp) of mean-pooled sentence embeddings (HEVAL eq. 1)."""

    name = "semantic_distance"
    version = "1"
    direction = "lower"
    outputs = ("sd",)

    def _value(self, cosine: float) -> dict[str, float]:
        return {"sd": 1.0 - cosine}


class EmbeddingCosineScorer(_MeanCosineScorer):
    """cos(e_ref, e_hyp): LATTE's sentence-embedding similarity baseline."""

    name = "embedding_cosine"
    version = "1"
    direction = "higher"
    outputs = ("cosine",)

    def _value(self, cosine: float) -> dict[str, float]:
        return {"cosine": cosine}
