"""BERTScore's greedy matching runs batched: equal to the pair-by-pair computation, in a few
operations whatever the number of pairs, with the encoder's thread bound.

The pair-by-pair oracle below is the computation the scorer used to run, one pair at a time
(normalise, similarity matrix, best match per token, floor, weighted mean, F). Running it once
per pair made thousands of tiny torch operations, each waiting for every torch thread: on a busy
host that took 64 s of a 77 s suite.
"""

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from metrics.scorers import semantic  # noqa: E402
from metrics.scorers.base import Pair  # noqa: E402
from metrics.scorers.encoder import Encoder  # noqa: E402
from metrics.scorers.semantic import BertScoreScorer, bertscore_batched  # noqa: E402


def pair_by_pair(hyp_emb, hyp_w, ref_emb, ref_w, floor_p, floor_r):
    """(P, R, F) of one pair, as the scorer computed it one pair at a time."""
    hyp = hyp_emb / hyp_emb.norm(dim=-1, keepdim=True)
    ref = ref_emb / ref_emb.norm(dim=-1, keepdim=True)
    sim = hyp @ ref.T
    best_p, best_r = sim.max(dim=1).values, sim.max(dim=0).values
    if floor_p:
        best_p = best_p.clamp_min(0)
    if floor_r:
        best_r = best_r.clamp_min(0)

    def weighted(values, weights):
        total = float(weights.sum())
        return 0.0 if total == 0.0 else float((values * weights).sum()) / total

    p, r = weighted(best_p, hyp_w), weighted(best_r, ref_w)
    f = 2 * p * r / (p + r) if p + r != 0 else 0.0
    return p, r, (f if math.isfinite(f) else 0.0)


@st.composite
def matching_problems(draw):
    """Texts of 1-9 tokens (padding from none to most of a row), pairs sharing texts, weights
    with zeros (a side whose weights sum to 0), floors on and off, chunk bounds from one pair
    per operation to all pairs in one."""
    dim = draw(st.integers(1, 6))
    n_texts = draw(st.integers(1, 8))
    lengths = draw(st.lists(st.integers(1, 9), min_size=n_texts, max_size=n_texts))
    seed = draw(st.integers(0, 2**31 - 1))
    generator = torch.Generator().manual_seed(seed)
    embeddings = [torch.randn((n, dim), generator=generator) for n in lengths]
    vocabulary = draw(st.integers(1, 5))
    ids = [draw(st.lists(st.integers(0, vocabulary - 1), min_size=n, max_size=n))
           for n in lengths]
    table = torch.tensor(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5]),
                                       min_size=vocabulary, max_size=vocabulary)))
    n_pairs = draw(st.integers(1, 12))
    pairs = draw(st.lists(st.tuples(st.integers(0, n_texts - 1), st.integers(0, n_texts - 1)),
                          min_size=n_pairs, max_size=n_pairs))
    floors = draw(st.lists(st.tuples(st.booleans(), st.booleans()),
                           min_size=n_pairs, max_size=n_pairs))
    chunk = draw(st.sampled_from([1, 7, 64, 1 << 14]))
    return embeddings, ids, table, pairs, floors, chunk


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(matching_problems())
def test_batched_matching_equals_pair_by_pair(problem):
    embeddings, ids, table, pairs, floors, chunk = problem
    old_chunk = semantic.MATCH_CHUNK_ENTRIES
    semantic.MATCH_CHUNK_ENTRIES = chunk
    try:
        got = bertscore_batched(
            [embeddings[h] for h, _ in pairs], [ids[h] for h, _ in pairs],
            [embeddings[r] for _, r in pairs], [ids[r] for _, r in pairs],
            table, floor_p=[p for p, _ in floors], floor_r=[r for _, r in floors],
        )
    finally:
        semantic.MATCH_CHUNK_ENTRIES = old_chunk
    assert got.shape == (len(pairs), 3) and got.dtype == torch.float64
    for i, ((h, r), (fp, fr)) in enumerate(zip(pairs, floors, strict=True)):
        p, r_, f = pair_by_pair(embeddings[h], table[torch.tensor(ids[h])],
                                embeddings[r], table[torch.tensor(ids[r])], fp, fr)
        got_p, got_r, got_f = got[i].tolist()
        assert (got_p, got_r) == pytest.approx((p, r_), abs=1e-5), (i, pairs[i])
        # F = 2PR / (P + R) is ill-conditioned where P + R is near 0 (random embeddings have
        # negative cosines): check it against the batched P and R, and the oracle's F elsewhere
        expected_f = 2 * got_p * got_r / (got_p + got_r) if got_p + got_r != 0 else 0.0
        assert got_f == pytest.approx(expected_f, rel=1e-9, abs=1e-12)
        if abs(p + r_) > 0.1:
            assert got_f == pytest.approx(f, abs=1e-4)


def test_no_pairs():
    out = bertscore_batched([], [], [], [], torch.ones(3), floor_p=[], floor_r=[])
    assert out.shape == (0, 3)


class _Products(TorchFunctionMode):
    """Counts the matrix products (similarity computations) and all torch calls."""

    PRODUCTS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "baddbmm", "einsum",
                "tensordot", "inner", "linear"}

    def __init__(self):
        super().__init__()
        self.products = 0
        self.calls = 0
        self.threads: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        self.calls += 1
        if name in self.PRODUCTS:
            self.products += 1
            self.threads.append(torch.get_num_threads())
        return func(*args, **(kwargs or {}))


def short_pairs(n):
    words = ["the", "flight", "is", "about", "to", "land", "now", "please", "sit", "down"]
    pairs = []
    for i in range(n):
        ref = " ".join(words[(i + k) % len(words)] for k in range(3 + i % 5))
        hyp = " ".join(reversed(ref.split()[: 2 + i % 4])) + (" uh" if i % 3 else "")
        pairs.append(Pair(i, ref, hyp))
    return pairs


def test_greedy_matching_is_one_batched_product_not_one_per_pair(cpu_encoder):
    pairs = short_pairs(60)
    scorer = BertScoreScorer()
    scorer.score(pairs, encoder=cpu_encoder)  # every text encoded and cached: no model call below
    with _Products() as mode:
        scores = scorer.score(pairs, encoder=cpu_encoder)
    assert all(s.error is None for s in scores)
    assert mode.products == 1  # 60 short pairs: one similarity product for all of them


def test_torch_calls_do_not_grow_with_the_number_of_pairs(cpu_encoder):
    scorer = BertScoreScorer()
    few, many = short_pairs(6), short_pairs(120)
    scorer.score(many, encoder=cpu_encoder)
    with _Products() as small:
        scorer.score(few, encoder=cpu_encoder)
    with _Products() as large:
        scorer.score(many, encoder=cpu_encoder)
    # pair by pair, 20x the pairs made about 20x the operations; batched, about the same
    assert large.calls < 2 * small.calls


def test_matching_runs_within_the_encoders_thread_bound(cpu_encoder):
    if torch.get_num_threads() < 2:
        pytest.skip("needs a process allowed at least 2 torch threads")
    bounded = Encoder(cpu_encoder.model_path, "cpu", num_threads=1)
    bounded._model, bounded._tokenizer = cpu_encoder.model, cpu_encoder.tokenizer
    pairs = short_pairs(10)
    scorer = BertScoreScorer()
    scorer.score(pairs, encoder=bounded)
    before = torch.get_num_threads()
    with _Products() as mode:
        scorer.score(pairs, encoder=bounded)
    assert mode.threads and set(mode.threads) == {1}
    assert torch.get_num_threads() == before  # restored
