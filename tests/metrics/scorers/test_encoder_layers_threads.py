"""The encoder asks the model for the one layer it needs, and keeps torch within its thread bound.

A tiny randomly initialised BERT (3 layers, built from a config and saved with the real
all-MiniLM-L6-v2 tokenizer) goes through the real loading and encoding code in milliseconds.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from metrics.scorers.base import Pair  # noqa: E402
from metrics.scorers.encoder import (  # noqa: E402
    Encoder,
    configured_threads,
    embedded_encoder,
    prepare_shared,
)
from metrics.scorers.heval import HevalScorer  # noqa: E402
from metrics.scorers.semantic import (  # noqa: E402
    BertScoreScorer,
    EmbeddingCosineScorer,
    SemanticDistanceScorer,
)

TEXTS = ["The flight is about to land", "te flight s about to lamt", "Hello", "",
         "Please call Stella and ask her to bring these things with her from the store"]


class ForwardSpy:
    """Wraps a model's forward: the keyword arguments and torch's thread count of every call."""

    def __init__(self, model, monkeypatch):
        self.calls: list[dict] = []
        self.threads: list[int] = []
        original = model.forward

        def spy(*args, **kwargs):
            self.calls.append(kwargs)
            self.threads.append(torch.get_num_threads())
            return original(*args, **kwargs)

        monkeypatch.setattr(model, "forward", spy)


def encoder_with_spy(path, monkeypatch, **kwargs):
    encoder = Encoder(path, "cpu", **kwargs)
    return encoder, ForwardSpy(encoder.model, monkeypatch)


def test_default_encoding_asks_only_for_the_last_hidden_state(tiny_model_dir, monkeypatch):
    encoder, spy = encoder_with_spy(tiny_model_dir, monkeypatch)
    records = encoder.encode(TEXTS)
    assert spy.calls and all(call["output_hidden_states"] is False for call in spy.calls)
    model = encoder.model
    for record in records:
        assert set(record.hidden) == {3} == set(encoder.keep_layers)
        ids = torch.tensor([record.input_ids])
        with torch.inference_mode():
            direct = model(input_ids=ids, output_hidden_states=True)
        torch.testing.assert_close(record.hidden[3], direct.hidden_states[3][0])
        torch.testing.assert_close(record.mean, direct.hidden_states[3][0].mean(dim=0))


def test_an_intermediate_layer_is_requested_only_when_a_scorer_reads_it(tiny_model_dir,
                                                                        monkeypatch):
    encoder, spy = encoder_with_spy(tiny_model_dir, monkeypatch)
    (record,) = encoder.encode(["The cat sat on the mat."], layers=[1])
    assert [call["output_hidden_states"] for call in spy.calls] == [True]
    assert set(record.hidden) == {1, 3}
    with torch.inference_mode():
        direct = encoder.model(input_ids=torch.tensor([record.input_ids]),
                               output_hidden_states=True)
    torch.testing.assert_close(record.hidden[1], direct.hidden_states[1][0])


def test_the_default_model_backed_scorers_never_request_hidden_states(tiny_model_dir,
                                                                      monkeypatch):
    encoder, spy = encoder_with_spy(tiny_model_dir, monkeypatch)
    pairs = [Pair(i, TEXTS[0], hyp) for i, hyp in enumerate(TEXTS)]
    scorers = [BertScoreScorer(), SemanticDistanceScorer(), EmbeddingCosineScorer(),
               HevalScorer()]
    prepare_shared(encoder, scorers, pairs)
    for scorer in scorers:
        scorer.score(pairs, encoder=encoder)
    assert len(spy.calls) == 1  # texts and H_eval's words in one pass, nothing afterwards
    assert spy.calls[0]["output_hidden_states"] is False


def test_forward_runs_within_the_thread_bound_and_restores_it(tiny_model_dir, monkeypatch):
    if torch.get_num_threads() < 2:
        pytest.skip("needs a process allowed at least 2 torch threads")
    before = torch.get_num_threads()
    encoder, spy = encoder_with_spy(tiny_model_dir, monkeypatch, num_threads=1)
    encoder.encode(TEXTS)
    assert spy.threads and set(spy.threads) == {1}
    assert torch.get_num_threads() == before


def test_the_bound_never_raises_the_processs_own_thread_count(tiny_model_dir, monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        encoder, spy = encoder_with_spy(tiny_model_dir, monkeypatch, num_threads=8)
        encoder.encode(TEXTS)
        assert set(spy.threads) == {1}
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_unbounded_encoder_leaves_torchs_setting_alone(tiny_model_dir, monkeypatch):
    monkeypatch.delenv("EVALSTUDY_TORCH_THREADS", raising=False)
    encoder, spy = encoder_with_spy(tiny_model_dir, monkeypatch)
    assert encoder.num_threads is None
    encoder.encode(TEXTS)
    assert set(spy.threads) == {torch.get_num_threads()}


def test_thread_bound_setting(monkeypatch, settings):
    monkeypatch.delenv("EVALSTUDY_TORCH_THREADS", raising=False)
    assert configured_threads() is None
    monkeypatch.setenv("EVALSTUDY_TORCH_THREADS", "3")
    assert configured_threads() == 3
    assert Encoder(embedded_encoder(), "cpu").num_threads == 3
    assert Encoder(embedded_encoder(), "cpu", num_threads=2).num_threads == 2
    settings.EVALSTUDY_TORCH_THREADS = 1  # where Django runs, its setting comes first
    assert configured_threads() == 1
    del settings.EVALSTUDY_TORCH_THREADS
    for bad in ("0", "-2", "two"):
        monkeypatch.setenv("EVALSTUDY_TORCH_THREADS", bad)
        with pytest.raises(ValueError, match="EVALSTUDY_TORCH_THREADS"):
            configured_threads()
    with pytest.raises(ValueError):
        Encoder(embedded_encoder(), "cpu", num_threads=0)
