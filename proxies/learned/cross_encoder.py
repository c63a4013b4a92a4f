"""A fine-tuned cross-encoder: the pertinence paper's learned metric (no Django here).

A sequence-pair classifier (`transformers.AutoModelForSequenceClassification`, 2 labels) is
initialised from the configured encoder directory (default all-MiniLM-L6-v2; its classification
head starts random) and fine-tuned on ("[CLS] reference [SEP] output [SEP]", label) with a plain
torch loop: AdamW, linear warm-up then linear decay, cross-entropy, `epochs` passes over the
shuffled training pairs. After every epoch the dev AUC is computed and the weights of the best
epoch so far are kept (ties keep the earlier epoch); those are the proxy's weights at the end.
The proxy's score is softmax(logits)[1] = P(pertinent / meaning preserved).

Reproducibility: `seed` seeds torch (the head's initialisation, dropout) and the shuffling; on
the CPU two runs with the same data, params and thread count give the same weights. On a GPU
(used when available, unless `device` says otherwise) training runs in float32 and scores
agree with the CPU's to about 1e-5, not bit for bit.

Scoring pads each batch to its longest pair; the attention mask keeps padding out of the
result, so a pair's probability does not depend on its batch beyond float rounding (~1e-7).

Long inputs (`max_length` tokens per pair, special tokens included):

- `truncation="longest_first"` (the default, as before): the longer side loses tokens first,
  from its end. For a reference and an ASR output that is fair to both.
- `truncation="history_left"`, for pertinence-style inputs (a conversation history and the
  completion that continues it): the history is cut from the LEFT, so the most recent
  tokens, the ones the completion continues, are kept. The completion keeps its beginning,
  at least half the budget when both do not fit (all of it when the history is shorter).
- `long_context="windows"`: the history is read in windows of the tokens the completion
  leaves (`max_length` - special tokens - the completion's kept tokens, the completion
  keeping at most half the budget), each window paired with the completion; windows start
  every `window_stride` tokens (default half a window; at most a window, so no token is
  skipped) and the last one ends at the history's end, so together they cover every token.
  A pair's score aggregates its windows' P(label = 1): `window_aggregate="mean"` (the
  default: every part of the history counts, one window's fluke does not decide) or "max"
  (pertinent if pertinent to some part). In training every window is a row carrying the
  pair's label, weighted 1 / (the pair's windows) so that each pair weighs the same; a batch
  holds `batch_size` pairs, however many windows they make.

Every proxy trained before these options existed has the defaults, and scores as before.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from proxies.learned.base import Proxy, TrainingReport, library_versions
from proxies.learned.data import Example, check_labels, check_texts

MODEL_DIR = "model"
PARAMS_FILE = "cross_encoder.json"


def _quiet_transformers():
    """Silence the 'newly initialized weights' report and the loading progress bar: the new
    classification head is the point of fine-tuning, not a problem to warn about."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


class CrossEncoderProxy(Proxy):
    """Fine-tuned (reference, output) pair classifier from the configured encoder."""

    kind = "cross_encoder"
    version = "1"
    uses_external_encoder = False
    defaults: ClassVar[dict[str, Any]] = {
        "model_path": None,  # base encoder directory; None: the embedded all-MiniLM-L6-v2
        "device": None,  # None: cuda when available, else cpu
        "max_length": 128,  # tokens per (reference, output) pair
        "epochs": 3,
        "batch_size": 16,
        "learning_rate": 1e-4,  # MiniLM-sized encoders on a few thousand pairs
        "weight_decay": 0.01,
        "warmup_ratio": 0.1,  # share of the optimiser steps spent warming up
        "eval_batch_size": 64,
        "seed": 0,
        "truncation": "longest_first",  # or "history_left" (keep the history's last tokens)
        "long_context": "truncate",  # or "windows" (sliding windows over the history)
        "window_stride": None,  # tokens between window starts; None: half a window
        "window_aggregate": "mean",  # or "max": how a pair's window scores combine
    }
    TRUNCATIONS = ("longest_first", "history_left")
    LONG_CONTEXTS = ("truncate", "windows")
    AGGREGATES = ("mean", "max")

    def __init__(self, **params: Any):
        super().__init__(**params)
        for name in ("max_length", "epochs", "batch_size", "eval_batch_size"):
            value = self.params[name]
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if not float(self.params["learning_rate"]) > 0:
            raise ValueError("learning_rate must be positive")
        if not 0 <= float(self.params["warmup_ratio"]) < 1:
            raise ValueError("warmup_ratio must lie in [0, 1)")
        for name, allowed in (("truncation", self.TRUNCATIONS),
                              ("long_context", self.LONG_CONTEXTS),
                              ("window_aggregate", self.AGGREGATES)):
            if self.params[name] not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not "
                                 f"{self.params[name]!r}")
        stride = self.params["window_stride"]
        if stride is not None and (not isinstance(stride, int) or isinstance(stride, bool)
                                   or stride < 1):
            raise ValueError(f"window_stride must be a positive integer, not {stride!r}")
        if self.params["max_length"] < 8 and self.params["long_context"] == "windows":
            raise ValueError("long_context='windows' needs max_length of at least 8")
        # transformers objects, loaded lazily (`_load_weights`): None until then.
        self.model: Any = None
        self.tokenizer: Any = None
        self._device: str | None = None
        # Where the weights came from: the base encoder (before fit) or a saved checkpoint.
        self.base_fingerprint: str | None = None
        # (prefix, middle, suffix) special tokens of a pair, with their token type ids.
        self._template: dict[str, Any] | None = None

    @property
    def device(self) -> str:
        if self._device is None:
            from metrics.scorers.encoder import resolve_device

            self._device = resolve_device(self.params["device"])
        return self._device

    def feature_names(self) -> list[str]:
        return []

    def signature(self) -> dict[str, Any]:
        """As `Proxy.signature`, but the encoder is named by the fingerprint of the base
        weights that fine-tuning started from (the base directory need not exist here)."""
        from metrics.scorers.encoder import display_name

        sig: dict[str, Any] = {
            "proxy": self.kind, "version": self.version, "params": self.public_params(),
            "features": [], "libraries": self.libraries(),
        }
        sig["encoder"] = {
            "model": display_name(self.encoder_path()),
            "model_sha": self.base_fingerprint or self.encoder_fingerprint(),
            "fine_tuned": self.fitted,
        }
        return sig

    def libraries(self) -> dict[str, str]:
        return library_versions("numpy", "scikit-learn", "torch", "transformers", "tokenizers")

    def _load_weights(self, path: str) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        _quiet_transformers()
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=2, local_files_only=True
        ).to(self.device)

    @property
    def _default_inputs(self) -> bool:
        """True when pairs are read as before these options: `_batch`, bit for bit."""
        return (self.params["truncation"] == "longest_first"
                and self.params["long_context"] == "truncate")

    # -- long inputs: history from the left, sliding windows --------------------------------
    def _pair_template(self) -> dict[str, Any]:
        """Where the tokenizer puts its special tokens around a pair (prefix A middle B
        suffix), learnt from one encoded pair: works for BERT-, RoBERTa- and
        SentencePiece-style tokenizers alike."""
        if self._template is not None:
            return self._template
        tok = self.tokenizer
        first, second = "alpha", "omega"
        ids_a = tok(first, add_special_tokens=False)["input_ids"]
        ids_b = tok(second, add_special_tokens=False)["input_ids"]
        full = tok(first, second)
        ids = list(full["input_ids"])
        types = list(full.get("token_type_ids") or [0] * len(ids))

        def find(part: list[int], start: int) -> int:
            for i in range(start, len(ids) - len(part) + 1):
                if ids[i:i + len(part)] == part:
                    return i
            raise ValueError("cannot locate the pair's parts in the tokenizer's output")

        at_a = find(ids_a, 0)
        at_b = find(ids_b, at_a + len(ids_a))
        end_a, end_b = at_a + len(ids_a), at_b + len(ids_b)
        self._template = {
            "prefix": (ids[:at_a], types[:at_a]), "middle": (ids[end_a:at_b], types[end_a:at_b]),
            "suffix": (ids[end_b:], types[end_b:]),
            "type_a": types[at_a] if ids_a else 0, "type_b": types[at_b] if ids_b else 1,
            "specials": len(ids) - len(ids_a) - len(ids_b),
            "token_types": "token_type_ids" in tok.model_input_names,
        }
        return self._template

    def _join(self, history: list[int], completion: list[int]) -> dict[str, list[int]]:
        t = self._pair_template()
        (pre, pre_t), (mid, mid_t), (suf, suf_t) = t["prefix"], t["middle"], t["suffix"]
        row = {"input_ids": [*pre, *history, *mid, *completion, *suf]}
        if t["token_types"]:
            row["token_type_ids"] = [*pre_t, *[t["type_a"]] * len(history), *mid_t,
                                     *[t["type_b"]] * len(completion), *suf_t]
        return row

    def _budget(self) -> int:
        budget = self.params["max_length"] - self._pair_template()["specials"]
        if budget < 2:
            raise ValueError(f"max_length {self.params['max_length']} leaves no room for the "
                             "texts beside the special tokens")
        return budget

    def encode_rows(self, example: Example) -> list[dict[str, list[int]]]:
        """The model inputs of one pair under the long-input settings: one row, or one per
        window (see the module docstring). Token lists, unpadded."""
        tok = self.tokenizer
        history = tok(example.reference.strip(), add_special_tokens=False)["input_ids"]
        completion = tok(example.output.strip(), add_special_tokens=False)["input_ids"]
        budget = self._budget()
        if self.params["long_context"] == "windows":
            keep_out = min(len(completion), budget // 2)
            width = budget - keep_out
            completion = completion[:keep_out]
            stride = min(self.params["window_stride"] or max(width // 2, 1), width)
            if len(history) <= width:
                return [self._join(history, completion)]
            starts = list(range(0, len(history) - width + 1, stride))
            if starts[-1] != len(history) - width:
                starts.append(len(history) - width)  # the last window ends at the end
            return [self._join(history[s:s + width], completion) for s in starts]
        if len(history) + len(completion) > budget:
            if self.params["truncation"] == "history_left":
                keep_out = min(len(completion), max(budget // 2, budget - len(history)))
                completion = completion[:keep_out]
                history = history[len(history) - (budget - keep_out):]
            else:  # longest_first, as the tokenizer does it
                while len(history) + len(completion) > budget:
                    if len(history) > len(completion):
                        history = history[:-1]
                    else:
                        completion = completion[:-1]
        return [self._join(history, completion)]

    def _rows(self, examples: Sequence[Example]) -> tuple[Any, list[int]]:
        """(padded inputs of every row, the example index of each row)."""
        rows, owners = [], []
        for index, example in enumerate(examples):
            for row in self.encode_rows(example):
                rows.append(row)
                owners.append(index)
        padded = self.tokenizer.pad(rows, return_tensors="pt")
        return {k: v.to(self.device) for k, v in padded.items()}, owners

    def _batch(self, examples: Sequence[Example]):
        encoded = self.tokenizer(
            [e.reference.strip() for e in examples],
            [e.output.strip() for e in examples],
            truncation="longest_first",
            max_length=self.params["max_length"],
            padding=True,
            return_tensors="pt",
        )
        return {k: v.to(self.device) for k, v in encoded.items()}

    # -- training ------------------------------------------------------------------------
    def fit(self, train: Sequence[Example], dev: Sequence[Example]) -> TrainingReport:
        """Fine-tune from the base encoder; keeps the epoch with the best dev AUC.

        Precondition: both splits labelled with both classes. Always starts from the base
        encoder's weights (calling fit twice does not continue training).
        """
        import torch
        from sklearn.metrics import roc_auc_score
        from transformers import get_linear_schedule_with_warmup

        started = time.perf_counter()
        self.fitted = False  # a failed refit must not leave a half-trained model usable
        base = self.require_encoder()
        y_train = check_labels(train, "training")
        y_dev = check_labels(dev, "the dev split")
        for name, y in (("train", y_train), ("dev", y_dev)):
            if len(set(y.tolist())) < 2:
                raise ValueError(f"the {name} split needs both labels; it has only {set(y)}")
        p = self.params
        torch.manual_seed(p["seed"])  # the new head's initialisation and dropout
        self._load_weights(base)
        self.base_fingerprint = self.encoder_fingerprint()
        model = self.model
        assert model is not None
        no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight")
        groups = [
            {"params": [w for n, w in model.named_parameters() if not n.endswith(no_decay)],
             "weight_decay": float(p["weight_decay"])},
            {"params": [w for n, w in model.named_parameters() if n.endswith(no_decay)],
             "weight_decay": 0.0},
        ]
        optimiser = torch.optim.AdamW(groups, lr=float(p["learning_rate"]))
        steps_per_epoch = -(-len(train) // p["batch_size"])
        total_steps = steps_per_epoch * p["epochs"]
        scheduler = get_linear_schedule_with_warmup(
            optimiser, int(round(float(p["warmup_ratio"]) * total_steps)), total_steps
        )
        labels = torch.tensor(y_train, dtype=torch.long)
        shuffler = torch.Generator().manual_seed(p["seed"])
        history = []
        best_auc, best_epoch, best_state = -1.0, 0, None
        for epoch in range(1, p["epochs"] + 1):
            epoch_started = time.perf_counter()
            model.train()
            order = torch.randperm(len(train), generator=shuffler).tolist()
            losses = []
            for start in range(0, len(order), p["batch_size"]):
                batch = order[start:start + p["batch_size"]]
                if self._default_inputs:
                    inputs = self._batch([train[i] for i in batch])
                    out = model(**inputs, labels=labels[batch].to(self.device))
                    loss = out.loss
                else:
                    loss = self._rows_loss(model, [train[i] for i in batch], labels[batch])
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimiser.step()
                scheduler.step()
                optimiser.zero_grad(set_to_none=True)
                losses.append(float(loss.detach()))
            dev_auc = float(roc_auc_score(y_dev, self._predict(dev)))
            history.append({
                "epoch": epoch, "train_loss": float(np.mean(losses)), "dev_auc": dev_auc,
                "seconds": time.perf_counter() - epoch_started,
            })
            if dev_auc > best_auc + 1e-12:
                best_auc, best_epoch = dev_auc, epoch
                best_state = {k: v.detach().to("cpu", copy=True)
                              for k, v in model.state_dict().items()}
        assert best_state is not None
        model.load_state_dict(best_state)
        model.eval()
        self.fitted = True
        return TrainingReport(
            kind=self.kind, n_train=len(train), n_dev=len(dev),
            seconds=time.perf_counter() - started, dev_auc=best_auc,
            details={"best_epoch": best_epoch, "history": history, "device": self.device,
                     "steps": total_steps},
        )

    def _rows_loss(self, model: Any, examples: Sequence[Example], labels: Any) -> Any:
        """Cross-entropy over every row of `examples` (windows), each row weighted
        1 / its pair's rows, averaged over the pairs."""
        import torch

        inputs, owners = self._rows(examples)
        counts = torch.bincount(torch.tensor(owners), minlength=len(examples)).float()
        owner = torch.tensor(owners)
        weights = (1.0 / counts[owner]).to(self.device)
        logits = model(**inputs).logits
        losses = torch.nn.functional.cross_entropy(
            logits.float(), labels[owner].to(self.device), reduction="none")
        return (losses * weights).sum() / len(examples)

    # -- scoring -------------------------------------------------------------------------
    def _predict(self, examples: Sequence[Example]) -> np.ndarray:
        import torch

        model = self.model
        assert model is not None
        model.eval()
        size = self.params["eval_batch_size"]
        if not self._default_inputs:
            return self._predict_rows(examples)
        # Length-sorted batches pad less; results go back to the caller's order.
        order = sorted(range(len(examples)),
                       key=lambda i: len(examples[i].reference) + len(examples[i].output))
        result = np.empty(len(examples), dtype=np.float64)
        with torch.inference_mode():
            for start in range(0, len(order), size):
                batch = order[start:start + size]
                logits = model(**self._batch([examples[i] for i in batch])).logits
                probs = torch.softmax(logits.float(), dim=-1)[:, 1]
                result[batch] = probs.cpu().numpy().astype(np.float64)
        return result

    def _predict_rows(self, examples: Sequence[Example]) -> np.ndarray:
        """P(label = 1) per example from its rows (one, or its windows aggregated)."""
        import torch

        model = self.model
        size = self.params["eval_batch_size"]
        aggregate = np.max if self.params["window_aggregate"] == "max" else np.mean
        result = np.empty(len(examples), dtype=np.float64)
        with torch.inference_mode():
            for start in range(0, len(examples), size):
                part = examples[start:start + size]
                inputs, owners = self._rows(part)
                probs = np.empty(len(owners), dtype=np.float64)
                for low in range(0, len(owners), size):  # windows may outnumber pairs
                    chunk = {k: v[low:low + size] for k, v in inputs.items()}
                    logits = model(**chunk).logits
                    probs[low:low + size] = torch.softmax(logits.float(), dim=-1)[:, 1].cpu(
                    ).numpy()
                owner = np.asarray(owners)
                for index in range(len(part)):
                    result[start + index] = float(aggregate(probs[owner == index]))
        return result

    def predict_proba(self, examples: Sequence[Example]) -> np.ndarray:
        self._require_fitted()
        check_texts(examples)
        if not examples:
            return np.zeros(0)
        return self._predict(examples)

    # -- persistence ---------------------------------------------------------------------
    def save(self, directory: str | os.PathLike[str]) -> list[str]:
        """`model/` (weights, config, tokenizer: a transformers checkpoint) + the params."""
        self._require_fitted()
        root = Path(directory)
        self.model.save_pretrained(root / MODEL_DIR)
        self.tokenizer.save_pretrained(root / MODEL_DIR)
        (root / PARAMS_FILE).write_text(json.dumps({
            "kind": self.kind, "version": self.version, "params": self.public_params(),
            "base_fingerprint": self.base_fingerprint,
        }, indent=1))
        files = sorted(p.relative_to(root).as_posix()
                       for p in (root / MODEL_DIR).rglob("*") if p.is_file())
        return [PARAMS_FILE, *files]

    @classmethod
    def load(cls, directory: str | os.PathLike[str], **overrides: Any) -> CrossEncoderProxy:
        root = Path(directory)
        params_path = root / PARAMS_FILE
        if not params_path.is_file():
            raise FileNotFoundError(f"{params_path}: the cross-encoder parameter file is missing")
        if not (root / MODEL_DIR / "config.json").is_file():
            raise FileNotFoundError(f"{root / MODEL_DIR}: the fine-tuned checkpoint is missing "
                                    "(no config.json)")
        try:
            data = json.loads(params_path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{params_path}: not valid JSON ({exc})") from exc
        if data.get("kind") != cls.kind:
            raise ValueError(f"{params_path}: holds a {data.get('kind')!r} model, "
                             f"not {cls.kind!r}")
        proxy = cls(**{**data["params"], **overrides})
        proxy.base_fingerprint = data.get("base_fingerprint")
        proxy._load_weights(str(root / MODEL_DIR))
        proxy.model.eval()
        proxy.fitted = True
        return proxy
