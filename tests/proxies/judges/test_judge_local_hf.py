"""LocalHFBackend end to end on tiny randomly initialised models saved to disk by the test
(a Llama-style causal model and a T5 seq2seq model, a WordLevel tokenizer; no downloads)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from proxies.judges.backends.local_hf import LocalHFBackend, load_hf_model  # noqa: E402
from proxies.judges.methods import LATTE_TEMPLATE, latte_judge, render_template  # noqa: E402

_VOCABULARY = (
    "<pad> <unk> <s> </s> yes no Yes No YES NO ground truth Ground Transcription Transcript "
    "transcription preserves the meaning of : . { } , ? the cat sat on a mat dog ran in park "
    "how large is that file funnel I would be fascinated to know your answers will"
)
WORDS = _VOCABULARY.split()
YES_NO = ["yes", "no"]
PAIRS = [
    ("the cat sat on the mat", "the cat sat on a mat"),
    ("how large is that file ?", "how large is a funnel ?"),
    ("I would be fascinated to know your answers .", "I will be fascinated to know answers"),
    ("the dog ran in the park", "the dog ran"),
    ("the cat sat", "the cat sat"),
]


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: index for index, word in enumerate(dict.fromkeys(WORDS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>"), len(vocab)


@pytest.fixture(scope="module")
def causal_dir(tmp_path_factory):
    from transformers import AutoModelForCausalLM, LlamaConfig

    path = tmp_path_factory.mktemp("tiny-llama")
    tokenizer, size = _tokenizer()
    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=size, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, pad_token_id=0, bos_token_id=2,
                         eos_token_id=3)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """Absolute position embeddings: left padding must not shift them (Llama's rotary
    embeddings would not notice)."""
    from transformers import AutoModelForCausalLM, GPT2Config

    path = tmp_path_factory.mktemp("tiny-gpt2")
    tokenizer, size = _tokenizer()
    torch.manual_seed(3)
    config = GPT2Config(vocab_size=size, n_embd=32, n_layer=2, n_head=4, n_positions=128,
                        pad_token_id=0, bos_token_id=2, eos_token_id=3)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def seq2seq_dir(tmp_path_factory):
    from transformers import AutoModelForSeq2SeqLM, T5Config

    path = tmp_path_factory.mktemp("tiny-t5")
    tokenizer, size = _tokenizer()
    torch.manual_seed(2)
    config = T5Config(vocab_size=size, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                      num_decoder_layers=2, num_heads=4, pad_token_id=0, eos_token_id=3,
                      decoder_start_token_id=0)
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def _reference_p_yes(path, prompt, encoder_decoder):
    """P(yes) computed here, independently of the backend: one prompt, no padding."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    loader = AutoModelForSeq2SeqLM if encoder_decoder else AutoModelForCausalLM
    model = loader.from_pretrained(path).eval()
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        if encoder_decoder:
            logits = model(input_ids=ids, decoder_input_ids=torch.tensor([[0]])).logits[0, 0]
        else:
            logits = model(input_ids=ids).logits[0, -1]
    probs = logits.softmax(-1)
    vocab = tokenizer.get_vocab()
    yes = sum(probs[vocab[w]] for w in ("yes", "Yes", "YES"))
    no = sum(probs[vocab[w]] for w in ("no", "No", "NO"))
    return float(yes / (yes + no))


@pytest.mark.parametrize("kind", ["causal", "gpt2", "seq2seq"])
def test_latte_p_yes_batched_equals_unbatched_and_reference(kind, request):
    path = request.getfixturevalue(f"{'causal' if kind == 'causal' else kind}_dir")
    batched = LocalHFBackend(path, device="cpu", batch_size=4)
    single = LocalHFBackend(path, device="cpu", batch_size=1)
    many = latte_judge(batched, PAIRS)
    one_by_one = latte_judge(single, PAIRS)
    for a, b in zip(many, one_by_one, strict=True):
        assert a.source == b.source == "logits"
        assert sum(a.option_probs.values()) == pytest.approx(1.0, abs=1e-6)
        assert a.p_yes == pytest.approx(b.p_yes, abs=1e-5)
        assert a.tokens_in > 0
    assert len({round(c.p_yes, 6) for c in many}) > 1  # the prompts do change the answer
    prompts = [render_template(LATTE_TEMPLATE, reference=r, output=o) for r, o in PAIRS]
    for prompt, completion in zip(prompts, many, strict=True):
        expected = _reference_p_yes(path, prompt, kind == "seq2seq")
        assert completion.p_yes == pytest.approx(expected, abs=1e-5)
    assert batched.usage.requests == len(PAIRS)


def test_model_loads_once_per_path_and_device(causal_dir):
    first = LocalHFBackend(causal_dir, device="cpu")
    second = LocalHFBackend(causal_dir, device="cpu", batch_size=2)
    first.score_options(["the cat"], YES_NO)
    assert first.loaded is second.loaded is load_hf_model(first.model_path, "cpu")
    assert first.loaded.tokenizer.padding_side == "left"


def test_options_sharing_a_first_token_are_refused(causal_dir):
    backend = LocalHFBackend(causal_dir, device="cpu")
    with pytest.raises(ValueError, match="same token"):
        backend.score_options(["the cat"], ["yes", "Yes please"])
    with pytest.raises(ValueError, match="no token"):
        backend.score_options(["the cat"], ["yes", "zebra"])


def test_long_prompt_loses_its_start_not_its_end(causal_dir):
    backend = LocalHFBackend(causal_dir, device="cpu", max_length=8)
    long = "the cat sat on the mat " * 10 + "dog ran"
    tail = " ".join(long.split()[-8:])  # the tokenizer adds no special tokens
    result, expected = backend.score_options([long, tail], YES_NO)
    assert result.source == "logits" and result.tokens_in == 8
    assert result.p_yes == pytest.approx(expected.p_yes, abs=1e-6)


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_greedy_generation_matches_transformers(kind, causal_dir, seq2seq_dir):
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    path = causal_dir if kind == "causal" else seq2seq_dir
    backend = LocalHFBackend(path, device="cpu", batch_size=3)
    prompts = ["the cat sat on", "how large is that file ?", "the dog"]
    results = backend.generate(prompts, max_tokens=5)
    tokenizer = AutoTokenizer.from_pretrained(path)
    loader = AutoModelForSeq2SeqLM if kind == "seq2seq" else AutoModelForCausalLM
    model = loader.from_pretrained(path).eval()
    for prompt, completion in zip(prompts, results, strict=True):
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=5, do_sample=False, pad_token_id=0,
                             eos_token_id=3)
        new = out[0, 1:] if kind == "seq2seq" else out[0, ids.shape[1]:]
        new = new.tolist()
        new = new[: new.index(3)] if 3 in new else new  # up to the eos token
        assert completion.source == "generated"
        assert completion.text == tokenizer.decode(new, skip_special_tokens=True)
        assert 1 <= completion.tokens_out <= 5
        assert completion.logprob_mean is not None and completion.logprob_mean <= 0
        assert len(completion.token_logprobs) == completion.tokens_out
