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
from torch.nn.utils.rnn import pad_sequence

from metrics.scorers import specs
from metrics.scorers.base import Pair, Score, Scorer
from metrics.scorers.encoder import Encoded, Encoder, get_encoder

EMPTY_REFERENCE = "empty reference: the reference has no text to compare against"


def truncation_details(*records: Encoded) -> dict[str, Any]:
    return {"truncated": True} if any(r.truncated for r in records) else {}


class EncoderScorer(Scorer):
    """Base for scorers reading the shared encoder; `model_path` (a local directory) picks the
    model, None the embedded default (all-MiniLM-L6-v2). Their specs say `needs_encoder`."""

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
# greedy_cos_idf, score), the pairs matched in padded batches (`bertscore_batched`):
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
#   of the call (Celery chunks vary; results must be reproducible) beyond float rounding: the
#   batched matrix product may sum a dot product in another order for another batch shape,
#   which moves a score by about 1e-8.
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

    spec = specs.BERTSCORE
    version = "1"

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
        n = len(pairs)
        refs, hyps = records[:n], records[n:]
        floor_p, floor_r = self._floors(refs, hyps)
        # Pairs with two non-empty texts are matched together, in a few batched operations.
        matched = [i for i in range(n) if not refs[i].empty and not hyps[i].empty]
        with torch.inference_mode(), enc.bounded_threads():
            prf = bertscore_batched(
                [hyps[i].hidden[layer] for i in matched], [hyps[i].input_ids for i in matched],
                [refs[i].hidden[layer] for i in matched], [refs[i].input_ids for i in matched],
                table,
                floor_p=[floor_p[i] for i in matched],
                floor_r=[floor_r[i] for i in matched],
            )
        values = dict(zip(matched, prf.tolist(), strict=True))
        scores: list[Score] = []
        for i in range(n):
            ref, hyp = refs[i], hyps[i]
            if ref.empty:
                scores.append(Score(error=EMPTY_REFERENCE))
                continue
            details = truncation_details(ref, hyp)
            if hyp.empty:
                p = r = f = 0.0
                details["empty_hypothesis"] = True
            else:
                p, r, f = values[i]
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


# Bound on the similarity entries (pairs x hypothesis tokens x reference tokens) of one batched
# matching operation. Pairs are sorted by length first, so a group pads little; groups this
# small keep their tensors in the processor's cache (2,000 short pairs: about 8 groups), while
# thousands of operations (several per pair) each waited for every torch thread on a busy host.
MATCH_CHUNK_ENTRIES = 1 << 14


def greedy_match(
    hyp: torch.Tensor, hyp_mask: torch.Tensor, ref: torch.Tensor, ref_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERTScore's greedy matching of a batch of padded pairs, in one operation.

    Preconditions: `hyp` [B, Lh, D] and `ref` [B, Lr, D] hold token embeddings (any norm,
    zeros at padding), `hyp_mask` [B, Lh] and `ref_mask` [B, Lr] are True at real tokens, and
    every pair has at least one real token on each side.

    Returns (best_p [B, Lh], best_r [B, Lr]): for every real hypothesis token its best cosine
    over the pair's real reference tokens, and the reverse; padded positions hold 0. A padded
    position never takes part in a max (unlike bert-score's, see the note above): where
    bert-score would let it win, the caller floors the best match at 0 instead.
    """
    # Cosines as dot products divided by the norms' outer product: the same numbers as
    # normalising the embeddings first (bert-score), with far less memory traffic.
    norm_h = torch.linalg.vector_norm(hyp, dim=-1).masked_fill(~hyp_mask, 1.0)
    norm_r = torch.linalg.vector_norm(ref, dim=-1).masked_fill(~ref_mask, 1.0)
    sim = torch.bmm(hyp, ref.transpose(1, 2))  # [B, Lh, Lr]
    sim /= norm_h.unsqueeze(2) * norm_r.unsqueeze(1)
    best_p = sim.masked_fill(~ref_mask.unsqueeze(1), -math.inf).amax(dim=2)
    best_r = sim.masked_fill(~hyp_mask.unsqueeze(2), -math.inf).amax(dim=1)
    return best_p.masked_fill(~hyp_mask, 0.0), best_r.masked_fill(~ref_mask, 0.0)


def bertscore_batched(
    hyp_embeddings: Sequence[torch.Tensor],
    hyp_ids: Sequence[Sequence[int]],
    ref_embeddings: Sequence[torch.Tensor],
    ref_ids: Sequence[Sequence[int]],
    weight_table: torch.Tensor,
    *,
    floor_p: Sequence[bool],
    floor_r: Sequence[bool],
) -> torch.Tensor:
    """(P, R, F) [N, 3] (float64) of N pairs.

    Pair i: `hyp_embeddings[i]` [n_tokens, D] (not normalised) and `hyp_ids[i]` (its n_tokens
    token ids), likewise for the reference; every text has at least one token. A token's weight
    is `weight_table[token id]`. `floor_p[i]` / `floor_r[i]`: floor pair i's best matches at 0
    for P / for R. A side whose weights sum to 0 scores 0, and F is 0 where P + R is 0 or F is
    not finite.

    The pairs, sorted by length, are matched `MATCH_CHUNK_ENTRIES` similarities at a time by
    `greedy_match`: a few operations for thousands of pairs, never several per pair.
    """
    n = len(hyp_embeddings)
    out = torch.zeros((n, 3), dtype=torch.float64)
    if n == 0:
        return out
    # A zero weight at index `pad` for the padded positions.
    pad = len(weight_table)
    table = torch.cat([weight_table.float(), torch.zeros(1)])
    order = sorted(range(n), key=lambda i: (len(hyp_ids[i]), len(ref_ids[i])))
    start = 0
    while start < n:
        stop, width_h, width_r = start, 0, 0
        while stop < n:
            new_h = max(width_h, len(hyp_ids[order[stop]]))
            new_r = max(width_r, len(ref_ids[order[stop]]))
            if stop > start and (stop - start + 1) * new_h * new_r > MATCH_CHUNK_ENTRIES:
                break
            width_h, width_r, stop = new_h, new_r, stop + 1
        chunk = order[start:stop]
        hyp, hyp_mask = _padded([hyp_embeddings[i] for i in chunk],
                                [len(hyp_ids[i]) for i in chunk])
        ref, ref_mask = _padded([ref_embeddings[i] for i in chunk],
                                [len(ref_ids[i]) for i in chunk])
        best_p, best_r = greedy_match(hyp, hyp_mask, ref, ref_mask)
        floors = torch.tensor([[floor_p[i], floor_r[i]] for i in chunk])
        best_p = torch.where(floors[:, :1], best_p.clamp_min(0), best_p)
        best_r = torch.where(floors[:, 1:], best_r.clamp_min(0), best_r)
        p = _weighted_mean(best_p, table[_padded_ids([hyp_ids[i] for i in chunk], width_h, pad)])
        r = _weighted_mean(best_r, table[_padded_ids([ref_ids[i] for i in chunk], width_r, pad)])
        f = torch.where(p + r != 0, 2 * p * r / (p + r), torch.zeros_like(p))
        f = torch.where(torch.isfinite(f), f, torch.zeros_like(f))
        out[chunk] = torch.stack([p, r, f], dim=1)
        start = stop
    return out


def _padded(tensors: list[torch.Tensor], lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded batch (zeros) and its mask (True at real positions); `lengths[i]` is
    `len(tensors[i])`."""
    batch = pad_sequence(tensors, batch_first=True)
    return batch, torch.arange(max(lengths)).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)


def _padded_ids(ids: list[Sequence[int]], width: int, pad: int) -> torch.Tensor:
    return torch.tensor([[*row, *([pad] * (width - len(row)))] for row in ids])


def _weighted_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per row sum(values * weights) / sum(weights), in float64; 0 where the weights sum to 0."""
    total = weights.sum(dim=1).double()
    weighted = (values * weights).sum(dim=1).double()
    return torch.where(total != 0, weighted / total.where(total != 0, 1.0), torch.zeros_like(total))


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

    spec = specs.SEMANTIC_DISTANCE
    version = "1"

    def _value(self, cosine: float) -> dict[str, float]:
        return {"sd": 1.0 - cosine}


class EmbeddingCosineScorer(_MeanCosineScorer):
    """cos(e_ref, e_hyp): LATTE's sentence-embedding similarity baseline."""

    spec = specs.EMBEDDING_COSINE
    version = "1"

    def _value(self, cosine: float) -> dict[str, float]:
        return {"cosine": cosine}
