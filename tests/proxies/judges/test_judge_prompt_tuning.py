"""LATTE prompt tuning of the local judge (peft soft prompt, 5 virtual tokens), on tiny randomly
initialised models saved by the test (no downloads): training lowers the loss and learns a
separable toy task, the adapter saves in peft's format and loads (also through peft itself),
scores change after tuning, batched equals unbatched behind the soft prompt, a seed fixes the
result, and the backend refuses a soft prompt made for another model."""

import itertools
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import json  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from metrics.scorers.encoder import model_signature  # noqa: E402
from proxies.judges.backends.base import JudgeError, MemoryCache  # noqa: E402
from proxies.judges.backends.local_hf import LocalHFBackend, answer_logits  # noqa: E402
from proxies.judges.backends.registry import build_backend  # noqa: E402
from proxies.judges.methods import latte_judge, latte_prompts  # noqa: E402
from proxies.judges.prompt_tuning import (  # noqa: E402
    SoftPrompt,
    answer_token,
    latte_training_pairs,
    load_soft_prompt,
    save_soft_prompt,
    score_with_soft_prompt,
    train_soft_prompt,
)
from proxies.learned import Example  # noqa: E402
from tests.proxies.judges.test_judge_local_hf import _tokenizer  # noqa: E402
from tests.tiny_models import deterministic_torch, seeded_weights  # noqa: E402

# A separable toy task in LATTE's format: the transcription keeps "cat" (meaning preserved,
# "yes") or turns it into "dog" ("no"). A randomly initialised model knows nothing to
# generalise from, so what is measured is that the soft prompt fits these labels: the
# examples are also the dev set that picks the epoch (a real study keeps them apart).
FRAMES = ["sat on the mat", "ran in the park", "sat", "ran", "sat on a mat", "ran in a park"]


def toy_examples(frames):
    examples = []
    for frame in frames:
        for det in ("the", "a"):
            reference = f"{det} cat {frame}"
            examples.append(Example(reference, reference, 1))
            examples.append(Example(reference, f"{det} dog {frame}", 0))
    return examples


TRAIN = latte_training_pairs(toy_examples(FRAMES))
DEV = TRAIN
# The weights of a randomly initialised model are tiny by default (std 0.02): its last position
# then barely sees the rest of the prompt. A larger init gives frozen features a soft prompt
# can steer, which is what a pretrained model offers; too large (0.5, 1.0) and the features
# are chaotic: measured over model seeds 1-6, std 0.15 learns the task (dev accuracy 1.0) for
# all six, 0.5 for none. The weights come from the test's own generator (seeded_weights) and
# the training runs on one thread with deterministic kernels (deterministic_torch), so the
# model and what it learns are the same on every machine, alone or after any other test, in
# any worker: CI once drew other weights at std 0.5 and learned 0.83 < 0.85.
INIT_STD = 0.15
PARAMS = {"epochs": 30, "batch_size": 8, "learning_rate": 0.1}


def _save_llama(path, *, seed, hidden=64, init=INIT_STD):
    from transformers import AutoModelForCausalLM, LlamaConfig

    tokenizer, size = _tokenizer()
    config = LlamaConfig(vocab_size=size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, initializer_range=init, pad_token_id=0,
                         bos_token_id=2, eos_token_id=3)
    with deterministic_torch(seed):
        model = AutoModelForCausalLM.from_config(config)
    seeded_weights(model, seed=seed, std=init).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return _save_llama(tmp_path_factory.mktemp("tiny-llama-pt"), seed=2)


@pytest.fixture(scope="module")
def trained(llama_dir):
    with deterministic_torch(0):
        return train_soft_prompt(llama_dir, TRAIN, DEV, params=PARAMS, seed=0, device="cpu")


def _auc(scores, labels):
    from sklearn.metrics import roc_auc_score

    return roc_auc_score(labels, scores)


def test_training_lowers_the_loss_and_learns_the_toy_task(trained):
    soft, report = trained
    losses = [entry["train_loss"] for entry in report.history]
    assert len(losses) == PARAMS["epochs"] and report.steps == PARAMS["epochs"] * 3
    assert losses[-1] < losses[0] / 4  # measured: 4.6 -> 0.12
    assert all(b < a for a, b in itertools.pairwise(losses[:6]))  # early descent
    best = report.history[report.best_epoch - 1]
    assert best["dev_accuracy"] >= 0.85 and best["dev_auc"] >= 0.95
    assert report.best_epoch == max(
        report.history, key=lambda e: (e["dev_accuracy"], e["dev_auc"], -e["epoch"]))["epoch"]
    assert soft.num_virtual_tokens == 5 and tuple(soft.embeddings.shape) == (5, 64)
    assert soft.peft_config["peft_type"] == "PROMPT_TUNING"
    assert soft.peft_config["task_type"] == "CAUSAL_LM"
    assert soft.peft_config["num_virtual_tokens"] == 5
    assert report.device == "cpu" and report.dtype == "float32"
    assert report.n_train == report.n_dev == len(TRAIN) == 24


def test_scores_change_after_tuning(llama_dir, trained):
    soft, _report = trained
    prompts, labels = [p for p, _ in DEV], [y for _, y in DEV]
    before = [c.p_yes for c in LocalHFBackend(llama_dir, device="cpu").score_options(
        prompts, ["yes", "no"])]
    tuned_backend = LocalHFBackend(llama_dir, device="cpu", soft_prompt=soft)
    after = [c.p_yes for c in latte_judge(tuned_backend, [(e.reference, e.output)
                                                          for e in toy_examples(FRAMES)])]
    assert after == pytest.approx(score_with_soft_prompt(llama_dir, soft, prompts,
                                                         device="cpu"), abs=1e-6)
    assert _auc(before, labels) < 0.8 <= 0.95 <= _auc(after, labels)
    assert max(abs(a - b) for a, b in zip(before, after, strict=True)) > 0.2
    assert tuned_backend.usage.requests == len(prompts)


def test_the_soft_prompt_saves_in_pefts_format_and_loads(llama_dir, trained, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    soft, report = trained
    where = save_soft_prompt(soft, tmp_path / "sp", extra={"name": "toy", "version": 1})
    assert sorted(p.name for p in where.iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors", "soft_prompt.json"]
    manifest = json.loads((where / "soft_prompt.json").read_text())
    assert manifest["base_model"]["model_sha"] == model_signature(llama_dir)["model_sha"]
    assert manifest["training"]["best_epoch"] == report.best_epoch
    assert manifest["name"] == "toy" and manifest["answers"] == ["yes", "no"]
    assert manifest["libraries"]["peft"] != "unknown"
    loaded = load_soft_prompt(where)
    assert torch.equal(loaded.embeddings, soft.embeddings) and loaded.sha256 == soft.sha256
    # The same scores from the directory as from memory.
    prompts = [p for p, _ in DEV]
    from_dir = LocalHFBackend(llama_dir, device="cpu", soft_prompt=str(where))
    from_memory = LocalHFBackend(llama_dir, device="cpu", soft_prompt=soft)
    assert [c.p_yes for c in from_dir.score_options(prompts, ["yes", "no"])] == [
        c.p_yes for c in from_memory.score_options(prompts, ["yes", "no"])]
    # peft itself loads the adapter and computes what the backend computes (unpadded prompt).
    tokenizer = AutoTokenizer.from_pretrained(llama_dir)
    base = AutoModelForCausalLM.from_pretrained(llama_dir).eval()
    peft_model = PeftModel.from_pretrained(base, str(where)).eval()
    ids = tokenizer(prompts[0], return_tensors="pt")
    with torch.no_grad():
        theirs = peft_model(**ids).logits[0, -1]
        ours = answer_logits(base, ids["input_ids"], ids["attention_mask"],
                             encoder_decoder=False, accepts_position_ids=True,
                             soft_prompt=loaded.embeddings)[0]
    assert torch.allclose(theirs, ours, atol=1e-5)
    # A changed file, a missing manifest or a second save into the same directory: refused.
    with pytest.raises(FileExistsError):
        save_soft_prompt(soft, where)
    weights = where / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(ValueError, match="changed since"):
        load_soft_prompt(where)
    with pytest.raises(ValueError, match=r"holds no soft_prompt.json"):
        load_soft_prompt(tmp_path)


def test_batched_equals_unbatched_behind_a_soft_prompt(tmp_path):
    """Left padding must not move the prompt away from the soft prompt: GPT-2's absolute
    positions would notice (peft's own forward drops position ids and would shift them)."""
    from transformers import AutoModelForCausalLM, GPT2Config

    tokenizer, size = _tokenizer()
    torch.manual_seed(3)
    config = GPT2Config(vocab_size=size, n_embd=32, n_layer=2, n_head=4, n_positions=128,
                        pad_token_id=0, bos_token_id=2, eos_token_id=3)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    generator = torch.Generator().manual_seed(0)
    soft = SoftPrompt(torch.randn(5, 32, generator=generator),
                      {"task_type": "CAUSAL_LM", "peft_type": "PROMPT_TUNING"},
                      {"base_model": model_signature(str(tmp_path))})
    prompts = [p for p, _ in TRAIN[:6]] + ["the cat"]
    batched = LocalHFBackend(str(tmp_path), device="cpu", batch_size=7, soft_prompt=soft)
    single = LocalHFBackend(str(tmp_path), device="cpu", batch_size=1, soft_prompt=soft)
    plain = LocalHFBackend(str(tmp_path), device="cpu", batch_size=7)
    many = [c.p_yes for c in batched.score_options(prompts, ["yes", "no"])]
    one = [c.p_yes for c in single.score_options(prompts, ["yes", "no"])]
    assert many == pytest.approx(one, abs=1e-6)
    assert many != pytest.approx([c.p_yes for c in plain.score_options(prompts, ["yes", "no"])],
                                 abs=1e-3)


def test_a_seed_fixes_the_soft_prompt(llama_dir):
    params = {**PARAMS, "epochs": 3}
    first, report_1 = train_soft_prompt(llama_dir, TRAIN, DEV, params=params, seed=7,
                                        device="cpu")
    again, report_2 = train_soft_prompt(llama_dir, TRAIN, DEV, params=params, seed=7,
                                        device="cpu")
    other, _ = train_soft_prompt(llama_dir, TRAIN, DEV, params=params, seed=8, device="cpu")
    assert torch.equal(first.embeddings, again.embeddings)
    assert report_1.history == report_2.history
    assert not torch.equal(first.embeddings, other.embeddings)


def test_initialisation_samples_the_low_vocabulary_ids(llama_dir):
    """init "vocab": before any step, the soft prompt is made of token embeddings drawn from
    the first init_vocab ids (special tokens excluded)."""
    from transformers import AutoModelForCausalLM

    soft, report = train_soft_prompt(llama_dir, TRAIN[:2], params={
        "epochs": 1, "learning_rate": 1e-12, "warmup_ratio": 0.0, "init_vocab": 12}, seed=0,
        device="cpu")
    table = AutoModelForCausalLM.from_pretrained(llama_dir).get_input_embeddings().weight
    special = {0, 1, 2, 3}  # <pad> <unk> <s> </s>
    for row in soft.embeddings:
        distances = (table[:12] - row).norm(dim=-1).detach()
        closest = int(distances.argmin())
        assert float(distances[closest]) < 1e-4 and closest not in special
    assert report.best_epoch == 1 and report.n_dev == 0


def test_answer_tokens_are_the_words_themselves(llama_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(llama_dir)
    vocab = tokenizer.get_vocab()
    assert answer_token(tokenizer, "yes") == vocab["yes"]
    assert answer_token(tokenizer, "no") == vocab["no"]


def test_signature_and_cache_keep_tuned_and_untuned_answers_apart(llama_dir, trained):
    soft, _ = trained
    cache = MemoryCache()
    plain = LocalHFBackend(llama_dir, device="cpu", cache=cache)
    tuned = LocalHFBackend(llama_dir, device="cpu", cache=cache, soft_prompt=soft)
    prompts = [p for p, _ in DEV[:3]]
    first = plain.score_options(prompts, ["yes", "no"])
    second = tuned.score_options(prompts, ["yes", "no"])
    assert tuned.usage.cache_hits == 0 and len(cache) == 6
    assert [c.p_yes for c in first] != [c.p_yes for c in second]
    assert "soft_prompt" not in plain.signature()
    sig = tuned.signature()["soft_prompt"]
    assert sig["embeddings_sha256"] == soft.sha256[:16] and sig["num_virtual_tokens"] == 5


def test_a_soft_prompt_for_another_model_is_refused(tmp_path, trained):
    soft, _ = trained
    other = _save_llama(tmp_path / "other", seed=5)
    backend = LocalHFBackend(other, device="cpu", soft_prompt=soft)
    with pytest.raises(JudgeError, match="only works with the model it was trained on"):
        backend.score_options(["the cat"], ["yes", "no"])
    wider = _save_llama(tmp_path / "wider", seed=5, hidden=32)
    forged = SoftPrompt(soft.embeddings, soft.peft_config,
                        {"base_model": model_signature(wider)})
    with pytest.raises(JudgeError, match="64-dimensional embeddings for a model with 32"):
        LocalHFBackend(wider, device="cpu", soft_prompt=forged).score_options(["cat"],
                                                                               ["yes", "no"])


def test_a_tuned_judge_generates_no_text(llama_dir, trained):
    backend = LocalHFBackend(llama_dir, device="cpu", soft_prompt=trained[0])
    (completion,) = backend.generate(["the cat"], max_tokens=3)
    assert completion.source == "error" and "does not generate text" in completion.error


def test_the_backend_config_takes_a_soft_prompt(llama_dir, trained, tmp_path):
    where = save_soft_prompt(trained[0], tmp_path / "sp")
    backend = build_backend({"backend": "hf", "model_path": llama_dir, "device": "cpu",
                             "soft_prompt": str(where)})
    assert backend.soft_prompt_path == str(where.resolve())
    assert backend.signature()["soft_prompt"]["num_virtual_tokens"] == 5
    with pytest.raises(ValueError, match="'soft_prompt' must be str"):
        build_backend({"backend": "hf", "model_path": llama_dir, "soft_prompt": 5})


def test_seq2seq_models_are_tuned_on_the_encoder_input(tmp_path):
    from transformers import AutoModelForSeq2SeqLM, T5Config

    tokenizer, size = _tokenizer()
    torch.manual_seed(2)
    config = T5Config(vocab_size=size, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                      num_decoder_layers=2, num_heads=4, pad_token_id=0, eos_token_id=3,
                      decoder_start_token_id=0, initializer_factor=4.0)
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    soft, report = train_soft_prompt(str(tmp_path), TRAIN, DEV, params={
        "epochs": 4, "batch_size": 8, "learning_rate": 0.1}, seed=0, device="cpu")
    assert soft.peft_config["task_type"] == "SEQ_2_SEQ_LM"
    assert soft.peft_config["num_transformer_submodules"] == 1
    assert report.history[-1]["train_loss"] < report.history[0]["train_loss"]
    backend = LocalHFBackend(str(tmp_path), device="cpu", batch_size=4, soft_prompt=soft)
    scores = [c.p_yes for c in backend.score_options([p for p, _ in DEV], ["yes", "no"])]
    single = LocalHFBackend(str(tmp_path), device="cpu", batch_size=1, soft_prompt=soft)
    assert scores == pytest.approx([c.p_yes for c in single.score_options(
        [p for p, _ in DEV], ["yes", "no"])], abs=1e-5)


def test_bad_parameters_and_data_are_refused(llama_dir):
    with pytest.raises(ValueError, match="unknown prompt-tuning parameter"):
        train_soft_prompt(llama_dir, TRAIN, params={"epoch": 3})
    with pytest.raises(ValueError, match="epochs must be an integer"):
        train_soft_prompt(llama_dir, TRAIN, params={"epochs": 0})
    with pytest.raises(ValueError, match="init must be one of"):
        train_soft_prompt(llama_dir, TRAIN, params={"init": "text"})
    with pytest.raises(ValueError, match="no training examples"):
        train_soft_prompt(llama_dir, [])
    with pytest.raises(ValueError, match="label other than 0/1"):
        train_soft_prompt(llama_dir, [("a prompt", 2)])
    with pytest.raises(ValueError, match="has no 0/1 label"):
        latte_training_pairs([Example("the cat", "the cat", None)])
    assert latte_training_pairs([Example("the cat", "a cat", 1)]) == [
        (latte_prompts([("the cat", "a cat")])[0], 1)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_training_picks_the_gpu_when_there_is_one(llama_dir):
    soft, report = train_soft_prompt(llama_dir, TRAIN, DEV, params={**PARAMS, "epochs": 2})
    assert report.device == "cuda"
    assert report.dtype == ("bfloat16" if torch.cuda.is_bf16_supported() else "float32")
    assert soft.embeddings.device.type == "cpu" and soft.embeddings.dtype == torch.float32
    backend = LocalHFBackend(llama_dir, soft_prompt=soft)
    assert backend.device == "cuda"
    assert all(c.p_yes is not None for c in backend.score_options([p for p, _ in DEV],
                                                                  ["yes", "no"]))
