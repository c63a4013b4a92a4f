"""LATTE prompt tuning through Django: a soft prompt trained on a study's human labels (the
learned proxies' training data and splits), saved under EVALSTUDY_PROXY_DIR/soft-prompts/, then
used by a LATTE run of the local judge on that study, and nowhere else."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import json  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from django.core.exceptions import ValidationError  # noqa: E402

from annotation.models import Judgment  # noqa: E402
from evalstudy.models import AuditEvent  # noqa: E402
from proxies.judges.methods import latte_prompts  # noqa: E402
from proxies.judges.prompt_tuning import load_soft_prompt, score_with_soft_prompt  # noqa: E402
from proxies.models import ProxyRun  # noqa: E402
from proxies.runs import proxy_run_start, soft_prompt_check  # noqa: E402
from proxies.training import soft_prompt_train  # noqa: E402
from tests.proxies.test_learned_proxy_runs import synthetic_study  # noqa: E402
from tests.proxies.test_proxy_runs import run_here  # noqa: E402

# Trained proxies go to a fresh directory per test (tests/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("proxy_dir_in_tmp")]

PARAMS = {"epochs": 2, "batch_size": 32, "seed": 0}


@pytest.fixture
def toy_study():
    return synthetic_study("soft-prompt-study", seed=3, n_references=24)


@pytest.fixture
def model_dir(toy_study, tmp_path_factory, allow_tmp_model_dirs):
    """A tiny random Llama whose word-level vocabulary covers the study's texts."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    from evalstudy.models import Output

    study, _labels = toy_study
    texts = latte_prompts(Output.objects.filter(item__study=study).values_list(
        "item__reference", "text"))
    words = ["<pad>", "<unk>", "<s>", "</s>", "yes", "no"]
    for text in texts:
        words += re.findall(r"\w+|[^\w\s]", text)
    vocab = {word: index for index, word in enumerate(dict.fromkeys(words))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>",
                                        unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    path = tmp_path_factory.mktemp("tiny-llama-study")
    torch.manual_seed(4)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, initializer_range=0.3, pad_token_id=0,
                         bos_token_id=2, eos_token_id=3)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def _backend(model_dir, **extra):
    return {"backend": "hf", "model_path": model_dir, "device": "cpu", **extra}


def test_train_on_the_study_then_judge_it_with_the_soft_prompt(toy_study, model_dir, settings):
    study, _labels = toy_study
    report = soft_prompt_train(study=study, criterion_key="usable", backend=_backend(model_dir),
                               params=PARAMS)
    path = Path(report["path"])
    assert path == (Path(settings.EVALSTUDY_PROXY_DIR) / "soft-prompts" / f"study-{study.pk}"
                    / "usable-latte" / "v1")
    manifest = json.loads((path / "soft_prompt.json").read_text())
    assert manifest["study"] == {"id": study.pk, "slug": study.slug}
    assert manifest["criterion"] == "usable" and manifest["num_virtual_tokens"] == 5
    keys = manifest["split_keys"]
    train, dev, test = (set(keys[part]) for part in ("train", "dev", "test"))
    assert not (train & dev or train & test or dev & test)
    assert sum(map(len, keys.values())) == 72 == sum(manifest["split_sizes"].values())
    assert manifest["training"]["best_epoch"] in (1, 2)
    assert set(manifest["metrics"]["auc"]) == {"dev", "test"} and 0 <= manifest["threshold"] <= 1
    event = AuditEvent.objects.get(study=study, action=AuditEvent.Action.START)
    assert event.changes["path"] == str(path) and event.changes["examples"] == 72
    # A second training of the same name is the next version.
    again = soft_prompt_train(study=study, criterion_key="usable", backend=_backend(model_dir),
                              params=PARAMS)
    assert again["path"].endswith("/v2") and again["version"] == 2

    run = proxy_run_start(study=study, method="latte", criteria=["usable"],
                          backend=_backend(model_dir, soft_prompt=str(path)), enqueue=False)
    signature = run.rater.metadata["backend"]["soft_prompt"]
    assert signature["num_virtual_tokens"] == 5 and signature["version"] == 1
    assert signature["embeddings_sha256"] == manifest["embeddings_sha256"][:16]
    run = run_here(run)
    assert run.status == ProxyRun.Status.DONE and run.done == 72 and run.failed == 0
    judgment = Judgment.objects.filter(rater=run.rater).select_related(
        "slot__output__item").first()
    prompt = latte_prompts([(judgment.slot.output.item.reference, judgment.slot.output.text)])
    expected = score_with_soft_prompt(model_dir, load_soft_prompt(path), prompt, device="cpu")
    assert judgment.numeric_value == pytest.approx(expected[0], abs=1e-6)
    # The untuned judge is another rater with other scores.
    plain = run_here(proxy_run_start(study=study, method="latte", criteria=["usable"],
                                     backend=_backend(model_dir), enqueue=False))
    assert plain.rater != run.rater


def test_a_soft_prompt_stays_with_its_study(toy_study, model_dir):
    study, _labels = toy_study
    path = soft_prompt_train(study=study, criterion_key="usable", backend=_backend(model_dir),
                             params=PARAMS)["path"]
    other, _ = synthetic_study("another-study", seed=5, n_references=8)
    run = proxy_run_start(study=other, method="latte", criteria=["usable"],
                          backend=_backend(model_dir, soft_prompt=path), enqueue=False)
    with pytest.raises(ValidationError, match="trained on another study"):
        run_here(run)
    assert not Judgment.objects.filter(rater=run.rater).exists()
    assert soft_prompt_check(path, study=study) == path


def test_only_soft_prompts_trained_here_are_loaded(toy_study, model_dir, settings, tmp_path):
    study, _labels = toy_study
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "soft_prompt.json").write_text('{"format": 1}')
    learned = Path(settings.EVALSTUDY_PROXY_DIR) / "some-learned-proxy" / "v1"
    learned.mkdir(parents=True)
    root = Path(settings.EVALSTUDY_PROXY_DIR) / "soft-prompts"
    empty = root / "study-1" / "nothing" / "v1"
    empty.mkdir(parents=True)
    for path, message in [
        (str(outside), "not a soft prompt trained here"),
        (str(learned), "not a soft prompt trained here"),
        (str(root), "not a soft prompt trained here"),
        (str(root / "study-1" / ".." / ".." / ".." / "elsewhere"), "not a soft prompt trained"),
        ("relative/dir", "must be an absolute path"),
        (str(root / "missing"), "does not exist"),
        (str(empty), "holds no soft prompt"),
        (5, "must name a soft prompt directory"),
    ]:
        with pytest.raises(ValidationError, match=message):
            proxy_run_start(study=study, method="latte", criteria=["usable"],
                            backend=_backend(model_dir, soft_prompt=path), enqueue=False)
    with pytest.raises(ValidationError, match="for a local Hugging Face judge"):
        proxy_run_start(study=study, method="latte", criteria=["usable"],
                        backend={"base_url": "https://judge.example/v1", "model": "m",
                                 "soft_prompt": str(empty)}, enqueue=False)


def test_training_requests_are_checked(toy_study, model_dir):
    study, _labels = toy_study
    for params, message in [({"epochs": 51}, "epochs must be a number above 0 and at most 50"),
                            ({"epoch": 2}, "not understood by prompt tuning"),
                            ({"seed": -1}, "seed must be an integer"),
                            ({"target_precision": 0}, "target_precision must lie in")]:
        with pytest.raises(ValidationError, match=message):
            soft_prompt_train(study=study, criterion_key="usable", backend=_backend(model_dir),
                              params=params)
    with pytest.raises(ValidationError, match="needs a local Hugging Face judge"):
        soft_prompt_train(study=study, criterion_key="usable",
                          backend={"base_url": "https://judge.example/v1", "model": "m"})
    with pytest.raises(ValidationError, match="is not a criterion"):
        soft_prompt_train(study=study, criterion_key="nope", backend=_backend(model_dir))
    with pytest.raises(ValidationError, match="name: "):
        soft_prompt_train(study=study, criterion_key="usable", backend=_backend(model_dir),
                          name="../up")
    with pytest.raises(ValidationError, match="template"):
        soft_prompt_train(study=study, criterion_key="usable", backend=_backend(model_dir),
                          template="{nothing}")


def test_drpe_options_are_checked_before_a_worker_sees_them():
    """DRPE's paper options (role prompts, eq. 4 aggregation) as run parameters: checked by
    limits_check like the other DRPE parameters."""
    from proxies.runs import limits_check

    limits_check({}, {"role_prompts": "both", "aggregation": "sum"})
    with pytest.raises(ValidationError) as refused:
        limits_check({}, {"role_prompts": "medium", "aggregation": "mean"})
    assert refused.value.messages == [
        "params: role_prompts must be one of ['both', 'coarse', 'fine', 'mixed'], got 'medium'",
        "params: aggregation must be one of ['share', 'sum'], got 'mean'"]
