"""The cross-encoder's long inputs: a history cut from the LEFT (its most recent tokens kept)
and sliding windows over a long history, on a tiny randomly initialised BERT (3 layers, the
real all-MiniLM-L6-v2 tokenizer): the real tokenising, training and scoring code in seconds.
Also the pertinence paper's top-1 accuracy per history."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from proxies.learned import Example, load_artifact, save_artifact, train_proxy
from proxies.learned.cross_encoder import CrossEncoderProxy
from proxies.learned.training import top1_per_group

HISTORY = " ".join(f"turn{i} said word{i}." for i in range(60))  # several hundred tokens
COMPLETION = "and then the completion continues the conversation politely"


def loaded(path: str, **params) -> CrossEncoderProxy:
    proxy = CrossEncoderProxy(model_path=path, device="cpu", **params)
    proxy._load_weights(path)
    return proxy


def ids(proxy: CrossEncoderProxy, text: str) -> list[int]:
    return proxy.tokenizer(text, add_special_tokens=False)["input_ids"]


def parts(proxy: CrossEncoderProxy, row: dict) -> tuple[list[int], list[int]]:
    """(history ids, completion ids) of one BERT row [CLS] history [SEP] completion [SEP]."""
    tokens = row["input_ids"]
    sep = proxy.tokenizer.sep_token_id
    assert tokens[0] == proxy.tokenizer.cls_token_id and tokens[-1] == sep
    middle = tokens.index(sep)
    return tokens[1:middle], tokens[middle + 1:-1]


def test_the_pair_template_rebuilds_the_tokenizers_own_pairs(tiny_model_dir):
    """Joined by hand, a pair is what the tokenizer makes of it (ids and token types), with
    the longest_first truncation too."""
    proxy = loaded(tiny_model_dir, max_length=40)
    for history, completion in (("hello there", "general kenobi"), (HISTORY, COMPLETION),
                                ("short", HISTORY)):
        mine = proxy.encode_rows(Example(reference=history, output=completion))
        theirs = proxy.tokenizer(history, completion, truncation="longest_first",
                                 max_length=40)
        assert len(mine) == 1
        assert mine[0]["input_ids"] == theirs["input_ids"]
        assert mine[0]["token_type_ids"] == theirs["token_type_ids"]


def test_history_left_keeps_the_most_recent_tokens(tiny_model_dir):
    proxy = loaded(tiny_model_dir, max_length=64, truncation="history_left")
    history_ids, completion_ids = ids(proxy, HISTORY), ids(proxy, COMPLETION)
    assert len(history_ids) > 200
    [row] = proxy.encode_rows(Example(reference=HISTORY, output=COMPLETION))
    history, completion = parts(proxy, row)
    assert len(row["input_ids"]) == 64
    assert completion == completion_ids  # short: whole
    assert history == history_ids[-len(history):]  # the END of the history
    assert len(history) == 64 - 3 - len(completion_ids)
    # A long completion keeps its beginning and half the budget at least.
    [row] = proxy.encode_rows(Example(reference=HISTORY, output=HISTORY))
    history, completion = parts(proxy, row)
    assert completion == history_ids[:len(completion)] and len(completion) == (64 - 3) // 2
    assert history == history_ids[-len(history):]
    # What fits is kept whole.
    [row] = proxy.encode_rows(Example(reference="a short history", output=COMPLETION))
    assert parts(proxy, row) == (ids(proxy, "a short history"), completion_ids)


@pytest.mark.parametrize("stride", [None, 7, 1000])
def test_windows_cover_the_whole_history(tiny_model_dir, stride):
    proxy = loaded(tiny_model_dir, max_length=48, long_context="windows", window_stride=stride)
    history_ids, completion_ids = ids(proxy, HISTORY), ids(proxy, COMPLETION)
    rows = proxy.encode_rows(Example(reference=HISTORY, output=COMPLETION))
    width = 48 - 3 - len(completion_ids)
    step = min(stride or width // 2, width)
    covered = np.zeros(len(history_ids), dtype=bool)
    starts = []
    for row in rows:
        history, completion = parts(proxy, row)
        assert completion == completion_ids and len(row["input_ids"]) <= 48
        assert len(history) == width
        start = next(s for s in range(len(history_ids) - width + 1)
                     if history_ids[s:s + width] == history)
        starts.append(start)
        covered[start:start + width] = True
    assert covered.all()  # every token of the history is read by some window
    assert starts[0] == 0 and starts[-1] == len(history_ids) - width  # ends at the end
    assert all(b - a <= step for a, b in itertools.pairwise(starts))
    assert all(b - a == step for a, b in itertools.pairwise(starts[:-1]))
    # A history that fits is one window.
    assert len(proxy.encode_rows(Example(reference="short", output=COMPLETION))) == 1


@pytest.mark.parametrize("aggregate", ["mean", "max"])
def test_window_scores_are_aggregated(tiny_model_dir, aggregate):
    proxy = loaded(tiny_model_dir, max_length=40, long_context="windows",
                   window_aggregate=aggregate, eval_batch_size=3)
    proxy.fitted = True
    examples = [Example(reference=HISTORY, output=COMPLETION),
                Example(reference="hi", output="hello"),
                Example(reference=HISTORY[:300], output="what")]
    scores = proxy.predict_proba(examples)
    for example, score in zip(examples, scores, strict=True):
        window_probs = []
        for row in proxy.encode_rows(example):
            inputs = {k: torch.tensor([v]) for k, v in row.items()}
            with torch.inference_mode():
                logits = proxy.model(**inputs).logits
            window_probs.append(float(torch.softmax(logits, dim=-1)[0, 1]))
        expected = max(window_probs) if aggregate == "max" else np.mean(window_probs)
        assert score == pytest.approx(expected, abs=1e-5)


def long_study(n_histories: int = 12) -> list[Example]:
    """Histories of a few hundred tokens, three completions each: one pertinent."""
    examples = []
    for h in range(n_histories):
        history = " ".join(f"speaker{h % 3} says item{(h * 7 + i) % 50}." for i in range(40))
        for c, (text, label) in enumerate((("item thanks that helps", 1),
                                           ("banana tractor purple", 0),
                                           ("unrelated noise words here", 0))):
            examples.append(Example(reference=history, output=text, label=label,
                                    group=history, key=(h, c)))
    return examples


def test_training_with_windows_saves_and_reloads(tiny_model_dir, tmp_path):
    params = {"model_path": tiny_model_dir, "device": "cpu", "max_length": 48, "epochs": 1,
              "batch_size": 4, "long_context": "windows", "window_stride": 16,
              "window_aggregate": "max", "truncation": "history_left"}
    trained = train_proxy("cross_encoder", long_study(), params=params, seed=0)
    assert trained.params["long_context"] == "windows" and trained.params["window_stride"] == 16
    assert trained.report.details["history"][0]["train_loss"] > 0
    top1 = trained.metrics["top1_per_group"]["test"]
    assert top1["n_groups"] >= 1 and top1["chance"] == pytest.approx(1 / 3)
    directory = save_artifact(trained, tmp_path, "windows")
    again = load_artifact(directory)
    assert again.params["window_aggregate"] == "max"
    probe = long_study(2)
    np.testing.assert_allclose(again.predict_proba(probe), trained.predict_proba(probe),
                               atol=1e-6)


def test_bad_long_context_parameters_are_refused(tiny_model_dir):
    for params, message in (({"truncation": "right"}, "truncation"),
                            ({"long_context": "chunks"}, "long_context"),
                            ({"window_aggregate": "median"}, "window_aggregate"),
                            ({"window_stride": 0}, "window_stride")):
        with pytest.raises(ValueError, match=message):
            CrossEncoderProxy(model_path=tiny_model_dir, **params)


def test_top1_per_history():
    def ex(group, label, score=None):
        return Example(reference=group, output="x", label=label, group=group,
                       human_score=score)

    examples = [ex("h1", 1, 0.9), ex("h1", 0, 0.1), ex("h1", 1, 0.6),  # best: the first
                ex("h2", 0, 0.2), ex("h2", 1, 0.8),  # best: the second
                ex("h3", 1), ex("h3", 1),  # alike: left out
                ex("h4", 1)]  # one completion: left out
    scores = [0.2, 0.1, 0.9,  # h1: top-scored is the 0.6 one, not the best: 0
              0.5, 0.5]  # h2: tie at the top between the two: half credit
    result = top1_per_group([*scores, 0.3, 0.4, 0.5], examples)
    assert result["n_groups"] == 2 and result["accuracy"] == pytest.approx(0.25)
    assert result["groups_all_alike"] == 1 and result["groups_single_output"] == 1
    assert result["chance"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    # Without human scores, the labels rank the completions (h1: two best of three).
    plain = [Example(reference=e.reference, output="x", label=e.label, group=e.group)
             for e in examples]
    assert top1_per_group([*scores, 0.3, 0.4, 0.5], plain)["accuracy"] == pytest.approx(0.75)
