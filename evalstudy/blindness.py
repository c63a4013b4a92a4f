"""Blindness audit: text in the outputs that would tell a rater which system wrote them.

Raters judge outputs without knowing their systems; an output that says "As an AI language
model developed by OpenAI", ends with a product's signature or always opens with the same
greeting unblinds them. `blindness_audit` scans every output for

- terms: the systems' own names and aliases (`System.metadata["aliases"]`), the study's
  identity terms (`Study.identity_terms`) and a built-in list of model and vendor names and
  self-descriptions (`BUILT_IN_TERMS`);
- boilerplate: word n-grams that occur in a large share of one system's outputs and (almost)
  never in the other systems' outputs, found statistically (`boilerplate_find`), which leak a
  system's identity without naming it.

Matching (terms): text and terms are compared Unicode-normalised (NFKC, then case-folded,
invisible format characters such as zero-width spaces and soft hyphens removed), so
ChatGPT in full-width letters, "CHATGPT" and "Chat<zero-width space>GPT" all match
"ChatGPT". A term matches whole words: "Bard" does not match "Bombarded", "GPT-4" does not
match "GPT-40"; white space inside a term matches any
run of white space. A term marked as a phrase matches its words in order with any white space
or punctuation between them ("as an AI language model" also matches "As an AI-language
model,").

What is never matched, to keep ordinary text from flooding the list:
- a system name or alias shorter than 3 characters, made of digits only, or of ordinary words
  only ("base", "baseline", "system A", "v2"): listed in `Audit.skipped` with the reason (add
  a distinctive alias or a study term instead);
- built-in vendor and model names that are also ordinary words ("Google", "Claude", "Gemini",
  "Llama", "Whisper", "Meta", "Mistral", "Bard") are matched only in phrases that name the
  model ("trained by Google", "Llama 2", "OpenAI Whisper"); a study that wants the bare word
  adds it to its identity terms.

No Django here: plain data in, plain data out (the study's selector reads the database).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

SYSTEM_NAME = "system name"
ALIAS = "alias"
STUDY_TERM = "study term"
BUILT_IN = "built-in"
BOILERPLATE = "boilerplate"
KINDS = (SYSTEM_NAME, ALIAS, STUDY_TERM, BUILT_IN, BOILERPLATE)
# When two sources give the same term, the hit is reported under the first of these.
_PRIORITY = {SYSTEM_NAME: 0, ALIAS: 1, STUDY_TERM: 2, BUILT_IN: 3}

#: Limits on a study's identity terms (Study.identity_terms).
MAX_TERMS = 500
MAX_TERM_CHARS = 200
#: Characters of context on either side of a hit in its snippet.
SNIPPET_CHARS = 60

# (text, phrase): model and vendor names unlikely in ordinary text, matched as words; the
# names that are also ordinary words only inside phrases naming the model; and the
# self-descriptions chat models write.
BUILT_IN_TERMS: tuple[tuple[str, bool], ...] = (
    ("ChatGPT", False), ("GPT", False), ("GPT-3", False), ("GPT-3.5", False),
    ("GPT-4", False), ("GPT-4o", False), ("OpenAI", False), ("Anthropic", False),
    ("Qwen", False), ("DeepSeek", False), ("Mixtral", False),
    ("Vicuna-13B", False), ("Bing Chat", False), ("Microsoft Copilot", False),
    # Ordinary words (a search engine, a first name, a star sign, an animal, a verb, ...):
    # only where they name a model.
    ("trained by Google", True), ("developed by Google", True), ("Google DeepMind", True),
    ("Google AI", True), ("Google Bard", True), ("Google Gemini", True),
    ("Google's Gemini", True), ("I am Bard", True), ("I'm Bard", True),
    ("I am Claude", True), ("I'm Claude", True), ("Claude AI", True), ("Claude 2", True),
    ("Claude 3", True), ("Claude Instant", True), ("Claude Sonnet", True),
    ("Claude Opus", True), ("Claude Haiku", True),
    ("I am Gemini", True), ("I'm Gemini", True), ("Gemini Pro", True), ("Gemini Ultra", True),
    ("Gemini Flash", True), ("Gemini Nano", True),
    ("Llama 2", True), ("Llama 3", True), ("Code Llama", True), ("Meta Llama", True),
    ("Meta AI", True), ("trained by Meta", True), ("developed by Meta", True),
    ("Mistral AI", True), ("Mistral 7B", True), ("OpenAI Whisper", True),
    ("Whisper large", True), ("Whisper model", True),
    # Self-descriptions.
    ("as an AI language model", True), ("as an AI model", True),
    ("as an AI assistant", True), ("as a large language model", True),
    ("I am an AI language model", True), ("I'm an AI language model", True),
    ("I am a large language model", True), ("I'm a large language model", True),
    ("a large language model trained by", True), ("language model developed by", True),
    ("my knowledge cutoff", True), ("my training data", True),
)

# Words a system is often named with that ordinary text also uses: a name made only of these
# (or of tokens shorter than 3 characters, or digits) is not searched for.
_COMMON = """
a an the and or of in on at to for by with from as is it this that these those be been
base baseline baselines model models system systems default control reference ref human
humans gold oracle ours our mine new old best better worse good bad test tests trial final
draft standard simple plain raw clean full short long first second third one two three four
five left right top main alpha beta gamma delta proposed original source target output
outputs answer answers summary summaries transcript text auto automatic manual expert
experts crowd random greedy sample samples sampling chat instruct pro plus ultra lite light
edge core prime max turbo flash nano open free online offline local cloud live real true
false yes none all any other large small medium big mini tiny fast slow high low tuned
fine finetuned pretrained trained zero few shot large standard version variant variants
condition conditions group treatment ablation ensemble hybrid neural rule rules based
retrieval generation generator rag agent assistant bot bots machine machines translation
speech recognition asr tts mt llm lm nlp
"""
COMMON_WORDS = frozenset(_COMMON.split())

_WORD = re.compile(r"\w+")
_SPACE = re.compile(r"\s+")
# Token markers of an output's start and end in the boilerplate n-grams (never \w text).
_START, _END = "\x02", "\x03"


# --- normalisation -----------------------------------------------------------------------------
@lru_cache(maxsize=65536)
def _fold_char(char: str) -> str:
    if unicodedata.category(char) == "Cf":  # zero-width spaces, joiners, soft hyphens, marks
        return ""
    return unicodedata.normalize("NFKC", char.casefold())


@dataclass(frozen=True)
class Folded:
    """A text normalised for matching: `shown` is the NFKC form (what snippets quote),
    `text` its case-folded form without format characters, `origin[i]` the index in `shown`
    of `text[i]` (None: the same index, for ASCII text)."""

    shown: str
    text: str
    origin: tuple[int, ...] | None

    def span(self, start: int, end: int) -> tuple[int, int]:
        """(start, end) in `shown` of text[start:end]."""
        if self.origin is None:
            return start, end
        return self.origin[start], self.origin[end - 1] + 1


def fold(text: str) -> Folded:
    shown = unicodedata.normalize("NFKC", text)
    if shown.isascii():
        return Folded(shown, shown.lower(), None)
    pieces: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(shown):
        folded = _fold_char(char)
        pieces.append(folded)
        origin.extend([index] * len(folded))
    return Folded(shown, "".join(pieces), tuple(origin))


def fold_text(text: str) -> str:
    return fold(text).text


# --- terms -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Term:
    """A term searched for: `text` as written, `kind` (one of KINDS but boilerplate), and for
    system names and aliases the system it names."""

    text: str
    kind: str
    phrase: bool = False
    names_system: str | None = None


@dataclass(frozen=True)
class Skipped:
    term: str
    kind: str
    system: str | None
    reason: str


def _term_pattern(folded: str, phrase: bool) -> re.Pattern[str]:
    if phrase:
        body = r"\W+".join(re.escape(token) for token in _WORD.findall(folded))
        return re.compile(rf"(?<!\w){body}(?!\w)")
    body = r"\s+".join(re.escape(piece) for piece in folded.split())
    before = r"(?<!\w)" if re.match(r"\w", folded) else ""
    after = r"(?!\w)" if re.search(r"\w$", folded) else ""
    return re.compile(before + body + after)


def name_skip_reason(name: str) -> str | None:
    """Why a system name or alias is not searched for (None: it is)."""
    folded = fold_text(name).strip()
    tokens = _WORD.findall(folded)
    if not tokens:
        return "has no letters or digits"
    if len(folded) < 3:
        return ("shorter than 3 characters: it would match ordinary words and "
                "abbreviations")
    if all(token.isdigit() for token in tokens):
        return "only digits: it would match ordinary numbers"
    if folded in COMMON_WORDS:
        return "an ordinary word: it would match ordinary text"
    # Words apart ("system A") each match ordinary text; joined by punctuation ("zx-chat",
    # "base-v2") they rarely do, unless every piece is a short token or a number ("v1.0").
    short = [t for t in tokens if len(t) < 3 or t.isdigit()]
    ordinary = [t for t in tokens if t in COMMON_WORDS or len(t) < 3 or t.isdigit()]
    if len(short) == len(tokens) or (re.search(r"\s", folded) and len(ordinary) == len(tokens)):
        return "only ordinary words and short tokens: it would match ordinary text"
    return None


def identity_terms_clean(value: Any) -> list[str | dict[str, Any]]:
    """A study's identity terms as stored: a list whose entries are a word or name (text,
    matched as whole words) or {"term": text, "phrase": true} (matched word by word across
    punctuation). Surrounding spaces are removed; {"phrase": false} is stored as the plain
    text. Raises ValueError naming the entry and why."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError("expected a list of words or phrases")
    if len(value) > MAX_TERMS:
        raise ValueError(f"{len(value)} terms; at most {MAX_TERMS}")
    cleaned: list[str | dict[str, Any]] = []
    seen: dict[tuple[str, bool], int] = {}
    for number, entry in enumerate(value, start=1):
        where = f"term {number}"
        phrase = False
        if isinstance(entry, Mapping):
            unknown = set(entry) - {"term", "phrase"}
            if unknown or "term" not in entry:
                raise ValueError(f'{where}: write a word, or {{"term": "...", "phrase": true}}'
                                 f" (keys {sorted(map(str, entry))})")
            phrase = entry.get("phrase", False)
            if not isinstance(phrase, bool):
                raise ValueError(f"{where}: phrase must be true or false, got {phrase!r}")
            entry = entry["term"]
        if not isinstance(entry, str):
            raise ValueError(f"{where}: expected text, got {type(entry).__name__}")
        text = entry.strip()
        if not text:
            raise ValueError(f"{where}: blank")
        if len(text) > MAX_TERM_CHARS:
            raise ValueError(f"{where}: longer than {MAX_TERM_CHARS} characters")
        if not _WORD.search(fold_text(text)):
            raise ValueError(f"{where}: {text!r} has no letter or digit; it would match "
                             "ordinary punctuation")
        key = (fold_text(text), phrase)
        if key in seen:
            raise ValueError(f"{where}: {text!r} is the same as term {seen[key]}")
        seen[key] = number
        cleaned.append({"term": text, "phrase": True} if phrase else text)
    return cleaned


def study_terms(value: Any) -> list[Term]:
    """The stored identity terms as Terms (entries that do not read are left out: what was
    stored was checked on the way in)."""
    terms = []
    for entry in value or []:
        if isinstance(entry, str) and entry.strip():
            terms.append(Term(entry.strip(), STUDY_TERM))
        elif isinstance(entry, Mapping) and isinstance(entry.get("term"), str):
            terms.append(Term(entry["term"].strip(), STUDY_TERM,
                              phrase=entry.get("phrase") is True))
    return terms


def aliases_of(metadata: Any) -> tuple[list[str], str | None]:
    """(aliases, problem) from a system's metadata: `aliases` is a list of text (one text is
    taken as one alias); anything else is a problem to report."""
    if not isinstance(metadata, Mapping) or metadata.get("aliases") in (None, "", []):
        return [], None
    aliases = metadata["aliases"]
    if isinstance(aliases, str):
        return [aliases], None
    if isinstance(aliases, list) and all(isinstance(a, str) for a in aliases):
        return [a for a in aliases if a.strip()], None
    return [], "metadata aliases is not a list of text: not searched for"


@dataclass(frozen=True)
class SystemNames:
    name: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class OutputText:
    id: int
    system: str
    text: str
    item: str = ""


# --- hits --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hit:
    """One place in one output that may reveal a system. The snippet is plain text in three
    parts (the matched text in `match`), in the output's NFKC form; whoever shows it escapes
    it."""

    output: int
    item: str
    system: str
    term: str
    kind: str
    before: str
    match: str
    after: str
    names_system: str | None = None
    # Boilerplate: the share of each system's outputs that contain the phrase.
    shares: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def snippet(self) -> str:
        return f"{self.before}{self.match}{self.after}"


@dataclass(frozen=True)
class Boilerplate:
    """A phrase typical of one system: in `count` of its outputs (`share`), and in each
    system's outputs the share in `shares`."""

    system: str
    phrase: str
    count: int
    share: float
    shares: dict[str, float]


@dataclass
class Audit:
    hits: list[Hit]
    skipped: list[Skipped]
    boilerplate: list[Boilerplate]
    terms: list[Term]
    outputs_per_system: dict[str, int]
    # Outputs with no text (e.g. media only) are counted but cannot be read.
    empty_outputs: int = 0

    @property
    def flagged_outputs(self) -> set[int]:
        return {hit.output for hit in self.hits}

    def flagged_per_system(self) -> dict[str, int]:
        flagged: dict[str, set[int]] = defaultdict(set)
        for hit in self.hits:
            flagged[hit.system].add(hit.output)
        return {system: len(flagged.get(system, ())) for system in self.outputs_per_system}

    def by_term(self) -> list[dict[str, Any]]:
        """Per (system of the output, term, kind): outputs hit and their share, most first."""
        outputs: dict[tuple[str, str, str], set[int]] = defaultdict(set)
        named: dict[tuple[str, str, str], str | None] = {}
        for hit in self.hits:
            key = (hit.system, hit.term, hit.kind)
            outputs[key].add(hit.output)
            named[key] = hit.names_system
        rows = []
        for (system, term, kind), ids in outputs.items():
            total = self.outputs_per_system.get(system, 0)
            rows.append({"system": system, "term": term, "kind": kind,
                         "names_system": named[(system, term, kind)], "outputs": len(ids),
                         "share": len(ids) / total if total else None})
        rows.sort(key=lambda row: (str(row["system"]), -int(row["outputs"] or 0),
                                   str(row["term"])))
        return rows

    def summary(self) -> dict[str, Any]:
        flagged = self.flagged_per_system()
        return {
            "outputs": sum(self.outputs_per_system.values()),
            "flagged_outputs": len(self.flagged_outputs),
            "empty_outputs": self.empty_outputs,
            "systems": [
                {"system": system, "outputs": total, "flagged_outputs": flagged[system],
                 "share": flagged[system] / total if total else None}
                for system, total in self.outputs_per_system.items()],
            "terms": self.by_term(),
            "skipped": [asdict(skip) for skip in self.skipped],
            "boilerplate": [asdict(found) for found in self.boilerplate],
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "hits": [hit_dict(hit) for hit in self.hits]}


def hit_dict(hit: Hit) -> dict[str, Any]:
    return {**asdict(hit), "snippet": hit.snippet}


def _snippet(folded: Folded, start: int, end: int) -> tuple[str, str, str]:
    shown_start, shown_end = folded.span(start, end)
    shown = folded.shown
    before = shown[max(0, shown_start - SNIPPET_CHARS):shown_start]
    after = shown[shown_end:shown_end + SNIPPET_CHARS]
    before = ("…" if shown_start > SNIPPET_CHARS else "") + _SPACE.sub(" ", before).lstrip()
    after = _SPACE.sub(" ", after).rstrip() + ("…" if shown_end + SNIPPET_CHARS < len(shown)
                                                else "")
    return before, _SPACE.sub(" ", shown[shown_start:shown_end]), after


def search_terms(systems: Sequence[SystemNames], study: Iterable[Term] = (),
                 built_in: bool = True) -> tuple[list[Term], list[Skipped]]:
    """The terms to search for, each normalised form once (a system's name before an alias
    before a study term before a built-in), and the names left out with why."""
    candidates: list[Term] = []
    skipped: list[Skipped] = []
    for system in systems:
        for text, kind in [(system.name, SYSTEM_NAME), *((a, ALIAS) for a in system.aliases)]:
            reason = name_skip_reason(text)
            if reason:
                skipped.append(Skipped(text, kind, system.name, reason))
            else:
                candidates.append(Term(text.strip(), kind, names_system=system.name))
    candidates += list(study)
    if built_in:
        candidates += [Term(text, BUILT_IN, phrase=phrase) for text, phrase in BUILT_IN_TERMS]
    chosen: dict[tuple[str, bool], Term] = {}
    for term in sorted(candidates, key=lambda t: _PRIORITY[t.kind]):
        key = (fold_text(term.text).strip(), term.phrase)
        if key not in chosen:
            chosen[key] = term
        elif chosen[key].names_system not in (None, term.names_system) and term.kind in (
                SYSTEM_NAME, ALIAS):
            # Two systems share a name or alias: a hit would not say which one it reveals.
            skipped.append(Skipped(term.text, term.kind, term.names_system,
                                   f"also a name of {chosen[key].names_system!r}; reported "
                                   "under that system"))
    return list(chosen.values()), skipped


@dataclass(frozen=True)
class _Compiled:
    term: Term
    pattern: re.Pattern[str]
    tokens: frozenset[str]


def _compile(terms: Iterable[Term]) -> list[_Compiled]:
    compiled = []
    for term in terms:
        folded = fold_text(term.text).strip()
        compiled.append(_Compiled(term, _term_pattern(folded, term.phrase),
                                  frozenset(_WORD.findall(folded))))
    return compiled


def _term_hits(output: OutputText, folded: Folded, tokens: set[str],
               compiled: Sequence[_Compiled]) -> list[Hit]:
    found: list[tuple[int, int, Term]] = []
    for entry in compiled:
        # Every word of a term is a whole word of a text it matches: a cheap test first.
        if not entry.tokens <= tokens:
            continue
        found += [(m.start(), m.end(), entry.term) for m in entry.pattern.finditer(folded.text)]
    # Overlapping matches ("GPT" inside "GPT-4", an alias inside a name) count once: the
    # leftmost, then the longest.
    found.sort(key=lambda match: (match[0], match[0] - match[1]))
    hits, reached = [], -1
    for start, end, term in found:
        if start < reached:
            continue
        reached = end
        before, match, after = _snippet(folded, start, end)
        hits.append(Hit(output.id, output.item, output.system, term.text, term.kind, before,
                        match, after, names_system=term.names_system))
    return hits


# --- boilerplate -------------------------------------------------------------------------------
@dataclass(frozen=True)
class BoilerplateRule:
    """When an n-gram is a system's boilerplate: in at least `min_share` of its outputs (and
    at least `min_outputs` of them), and in at most `max_other_share` of every other system's
    outputs. The n-grams are of `n` words, the output's start and end counting as words (so
    the first and last n-1 words of outputs are compared too)."""

    n: int = 4
    min_share: float = 0.25
    min_outputs: int = 5
    max_other_share: float = 0.02


def _grams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    padded = [_START, *tokens, _END]
    return list(zip(*(padded[i:] for i in range(n)), strict=False))


def _phrase_text(tokens: Sequence[str]) -> str:
    words = " ".join(t for t in tokens if t not in (_START, _END))
    if tokens and tokens[0] == _START:
        words = "[start] " + words
    if tokens and tokens[-1] == _END:
        words = words + " [end]"
    return words


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    size = len(needle)
    first = needle[0]
    return any(haystack[i] == first and tuple(haystack[i:i + size]) == tuple(needle)
               for i in range(len(haystack) - size + 1))


def boilerplate_find(
    tokens: Mapping[int, Sequence[str]], system_of: Mapping[int, str],
    rule: BoilerplateRule = BoilerplateRule(),
) -> tuple[list[Boilerplate], dict[int, list[tuple[int, int, str]]]]:
    """Phrases typical of one system (see BoilerplateRule), and for each output that holds
    one: (first token, last token + 1, phrase) in its token list (start and end markers not
    counted).

    `tokens`: each output's normalised words; `system_of`: each output's system. A phrase is
    a run of overlapping boilerplate n-grams in one output; it is reported once per system
    with the share of each system's outputs containing it. Needs two systems or more."""
    by_system: dict[str, list[int]] = defaultdict(list)
    for output in tokens:
        by_system[system_of[output]].append(output)
    if len(by_system) < 2:
        return [], {}
    counts: dict[str, Counter[tuple[str, ...]]] = {}
    grams_of: dict[int, list[tuple[str, ...]]] = {}
    for system, outputs in by_system.items():
        counter: Counter[tuple[str, ...]] = Counter()
        for output in outputs:
            grams_of[output] = _grams(tokens[output], rule.n)
            counter.update(set(grams_of[output]))
        counts[system] = counter
    sizes = {system: len(outputs) for system, outputs in by_system.items()}
    typical: dict[str, set[tuple[str, ...]]] = {}
    for system, counter in counts.items():
        least = max(rule.min_outputs, math.ceil(rule.min_share * sizes[system]))
        typical[system] = {
            gram for gram, count in counter.items()
            if count >= least and all(counts[other][gram] <= rule.max_other_share * sizes[other]
                                      for other in counts if other != system)}
    spans: dict[int, list[tuple[int, int, str]]] = {}
    phrases: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for system, outputs in by_system.items():
        if not typical[system]:
            continue
        for output in outputs:
            positions = [i for i, gram in enumerate(grams_of[output]) if gram in typical[system]]
            runs: list[list[int]] = []
            for position in positions:
                if runs and position <= runs[-1][1]:
                    runs[-1][1] = position + rule.n
                else:
                    runs.append([position, position + rule.n])
            padded = [_START, *tokens[output], _END]
            for start, end in runs:
                phrase = tuple(padded[start:end])
                text = _phrase_text(phrase)
                phrases[system].add(phrase)
                # Positions in the unpadded token list.
                first = max(start - 1, 0)
                last = min(end - 1, len(tokens[output]))
                spans.setdefault(output, []).append((first, last, text))
    found = []
    padded_of = {output: [_START, *words, _END] for output, words in tokens.items()}
    for system, seen in phrases.items():
        for phrase in seen:
            holding = {other: sum(_contains(padded_of[o], phrase) for o in outputs)
                       for other, outputs in by_system.items()}
            shares = {other: holding[other] / sizes[other] for other in holding}
            found.append(Boilerplate(system, _phrase_text(phrase), holding[system],
                                     shares[system], shares))
    found.sort(key=lambda b: (b.system, -b.count, b.phrase))
    return found, spans


# --- the audit ---------------------------------------------------------------------------------
def blindness_audit(outputs: Iterable[OutputText], systems: Sequence[SystemNames],
                    terms: Iterable[Term] = (), *, built_in: bool = True,
                    boilerplate: BoilerplateRule | None = BoilerplateRule()) -> Audit:
    """Every hit of the terms (systems' names and aliases, `terms` from the study, the
    built-in list) and of each system's boilerplate in `outputs`, with the names left out
    and why. `boilerplate=None` skips the statistical search."""
    chosen, skipped = search_terms(systems, terms, built_in)
    compiled = _compile(chosen)
    per_system: dict[str, int] = {system.name: 0 for system in systems}
    hits: list[Hit] = []
    folded_of: dict[int, Folded] = {}
    words: dict[int, list[str]] = {}
    listed: dict[int, OutputText] = {}
    empty = 0
    for output in outputs:
        per_system[output.system] = per_system.get(output.system, 0) + 1
        if not output.text.strip():
            empty += 1
            continue
        folded = fold(output.text)
        found = _WORD.findall(folded.text)
        hits += _term_hits(output, folded, set(found), compiled)
        folded_of[output.id], words[output.id], listed[output.id] = folded, found, output
    found_boilerplate: list[Boilerplate] = []
    if boilerplate is not None:
        found_boilerplate, spans = boilerplate_find(
            words, {o: listed[o].system for o in listed}, boilerplate)
        shares = {(b.system, b.phrase): b.shares for b in found_boilerplate}
        for output_id, runs in spans.items():
            output, folded = listed[output_id], folded_of[output_id]
            offsets = [m.span() for m in _WORD.finditer(folded.text)]
            for first, last, phrase in runs:
                start, end = offsets[first][0], offsets[last - 1][1]
                before, match, after = _snippet(folded, start, end)
                hits.append(Hit(output.id, output.item, output.system, phrase, BOILERPLATE,
                                before, match, after,
                                shares=shares.get((output.system, phrase), {})))
    # In the outputs' order; within an output, terms before boilerplate.
    position = {output_id: k for k, output_id in enumerate(listed)}
    hits.sort(key=lambda hit: (position[hit.output], hit.kind == BOILERPLATE))
    return Audit(hits=hits, skipped=skipped, boilerplate=found_boilerplate, terms=chosen,
                 outputs_per_system=per_system, empty_outputs=empty)
