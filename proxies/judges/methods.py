"""Judging methods on top of a `JudgeBackend` (no Django here).

- LATTE meaning preservation (Tomanek et al.): the paper's prompt, P(yes) per (reference,
  output) pair from the normalised yes/no probabilities. Thresholds on a dev split and
  LATTEScore per group are `proxies.quality.threshold_for_precision` and `latte_score`.
- Rubric / Likert judging (G-Eval style): the criterion, its definition and the labelled scale
  points in the prompt; the expected score is the probability-weighted mean of the scale points
  when the backend gives probabilities.
- DRPE pairwise judging (Wu et al., "Large Language Models are Diverse Role-Players for
  Summarization Evaluation"): static plus LLM-generated roles (the paper's coarse-grained and
  fine-grained generation prompts, or one prompt mixing both), deduplicated with DBSCAN over
  sentence embeddings; all roles vote in one batched prompt, each vote weighted by the
  length-normalised probability of its generated answer; both presentation orders are judged;
  votes aggregate as a weighted share or as the paper's unnormalised eq. 4 sum. Two outputs
  compared with each other (`drpe_judge`), or a candidate with the reference summary, as the
  paper scores one (`drpe_reference_judge`).

Templates use `{name}` placeholders; `{{` and `}}` are literal braces. Only plain names are
allowed (no attribute access, indexing, conversions or format specs), so a template edited per
study cannot reach into Python objects.
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from proxies.judges.backends.base import SOURCE_ERROR, Completion, JudgeBackend, JudgeError

# --------------------------------------------------------------------------------------------
# Templates
# --------------------------------------------------------------------------------------------

# LATTE Figure 1: the texts in braces, and the prompt ends with an open brace after which the
# model answers "yes}" or "no}".
LATTE_TEMPLATE = (
    "Ground truth: {{{reference}}}. Transcription: {{{output}}}. "
    "Transcript preserves the meaning of the ground truth: {{"
)
LATTE_FIELDS = frozenset({"reference", "output", "context"})
YES_NO = ("yes", "no")

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def template_fields(template: str) -> list[str]:
    """The placeholder names of `template` in order of first use; ValueError when malformed."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(
            f"template is malformed ({exc}); write {{{{ and }}}} for literal braces"
        ) from exc
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        if not _IDENTIFIER.match(name) or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (
                f":{spec}" if spec else "") + "}"
            raise ValueError(
                f"template placeholder {shown} is not allowed: use plain names such as "
                "{reference}; write {{ and }} for literal braces"
            )
        if name not in names:
            names.append(name)
    return names


def validate_template(template: str, allowed: Iterable[str], required: Iterable[str] = ()
                      ) -> list[str]:
    """Check a template before storing it: its placeholders, all within `allowed`, including
    every name in `required`. Returns the placeholder names."""
    names = template_fields(template)
    allowed = set(allowed)
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise ValueError(
            f"template uses unknown field(s) {', '.join('{' + n + '}' for n in unknown)}; "
            f"allowed: {', '.join('{' + n + '}' for n in sorted(allowed))}"
        )
    absent = [n for n in required if n not in names]
    if absent:
        raise ValueError(
            f"template must contain {', '.join('{' + n + '}' for n in absent)}"
        )
    return names


def render_template(template: str, *, allowed: Iterable[str] | None = None, **fields: Any
                    ) -> str:
    """Fill `{name}` placeholders with `fields` (values converted with `str`).

    Errors name the problem: a placeholder outside `allowed` (when given), a placeholder with no
    value, a malformed template. Fields not used by the template are ignored.
    """
    names = (validate_template(template, allowed) if allowed is not None
             else template_fields(template))
    missing = [n for n in names if n not in fields or fields[n] is None]
    if missing:
        raise ValueError(
            f"template needs {', '.join('{' + n + '}' for n in missing)} but no value was given "
            f"(given: {', '.join(sorted(k for k, v in fields.items() if v is not None)) or 'none'})"
        )
    parts: list[str] = []
    for literal, name, _spec, _conversion in string.Formatter().parse(template):
        parts.append(literal)
        if name is not None:
            parts.append(str(fields[name]))
    return "".join(parts)


# --------------------------------------------------------------------------------------------
# LATTE
# --------------------------------------------------------------------------------------------


def latte_prompts(pairs: Sequence[tuple[str, str]], template: str = LATTE_TEMPLATE,
                  contexts: Sequence[str] | None = None) -> list[str]:
    """One LATTE prompt per (reference, output) pair."""
    validate_template(template, LATTE_FIELDS, required=("output",))
    if contexts is not None and len(contexts) != len(pairs):
        raise ValueError(f"{len(contexts)} contexts for {len(pairs)} pairs")
    prompts = []
    for index, pair in enumerate(pairs):
        if len(pair) != 2:
            raise ValueError(f"pair {index} is not (reference, output): {pair!r}")
        reference, output = pair
        prompts.append(render_template(
            template, reference=reference, output=output,
            context="" if contexts is None else contexts[index],
        ))
    return prompts


def latte_judge(
    backend: JudgeBackend,
    pairs: Sequence[tuple[str, str]],
    template: str = LATTE_TEMPLATE,
    *,
    contexts: Sequence[str] | None = None,
) -> list[Completion]:
    """P(yes) per (reference, output) pair: `completion.p_yes` (None when the request failed).

    `completion.source` says where it came from ("logprobs", "logits", or "parsed" when the
    server gave no probabilities and the answer text was read: then P(yes) is 0 or 1).
    """
    return backend.score_options(latte_prompts(pairs, template, contexts), list(YES_NO))


# --------------------------------------------------------------------------------------------
# Rubric / G-Eval
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalePoint:
    value: Any  # what is stored (int for Likert points; a string for categorical answers)
    label: str = ""


def scale_points(scale: Mapping[Any, str] | Sequence[Any]) -> list[ScalePoint]:
    """Normalise a scale: {value: label}, [(value, label)], [ScalePoint] or [value]."""
    if isinstance(scale, Mapping):
        points = [ScalePoint(v, str(label or "")) for v, label in scale.items()]
    else:
        points = []
        for item in scale:
            if isinstance(item, ScalePoint):
                points.append(item)
            elif isinstance(item, (tuple, list)) and len(item) == 2:
                points.append(ScalePoint(item[0], str(item[1] or "")))
            else:
                points.append(ScalePoint(item, ""))
    if len(points) < 2:
        raise ValueError(f"a rubric scale needs at least two points, got {len(points)}")
    keys = [str(p.value).strip().casefold() for p in points]
    if len(set(keys)) != len(keys) or not all(keys):
        values = [p.value for p in points]
        raise ValueError(f"scale values must be distinct and non-empty: {values}")
    return points


def _numeric(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


RUBRIC_FIELDS = frozenset({"criterion", "definition", "scale", "reference", "context", "output",
                           "answers"})


def rubric_prompt(
    *,
    criterion: str,
    output: str,
    scale: Mapping[Any, str] | Sequence[Any],
    definition: str = "",
    reference: str = "",
    context: str = "",
    template: str | None = None,
) -> str:
    """The rubric prompt: criterion, definition/help text, scale points with labels, the
    reference and/or context when given, and the output; it asks for one scale value only.

    With `template`, the same pieces fill `{criterion}`, `{definition}`, `{scale}` (one
    "value = label" line per point), `{reference}`, `{context}`, `{output}` and `{answers}`
    (the values joined by ", ").
    """
    points = scale_points(scale)
    scale_text = "\n".join(
        f"{p.value} = {p.label}" if p.label else f"{p.value}" for p in points
    )
    answers = ", ".join(str(p.value) for p in points)
    if template is not None:
        return render_template(
            template, allowed=RUBRIC_FIELDS, criterion=criterion, definition=definition,
            scale=scale_text, reference=reference, context=context, output=output,
            answers=answers,
        )
    lines = ["Rate the output below on one criterion.", "", f"Criterion: {criterion.strip()}"]
    if definition.strip():
        lines.append(f"Definition: {definition.strip()}")
    lines += ["", "Scale:", scale_text, ""]
    if context.strip():
        lines.append(f"Context: {context.strip()}")
    if reference.strip():
        lines.append(f"Reference: {reference.strip()}")
    lines.append(f"Output: {output.strip()}")
    lines += ["", f"Answer with one of {answers} and nothing else.", "Answer:"]
    return "\n".join(lines)


@dataclass
class RubricJudgment:
    """`expected`: probability-weighted mean of numeric scale values (G-Eval), or the parsed
    value when the backend gave no probabilities, None when unknown or the scale is not
    numeric. `probs`: {str(value): probability}. `answer`: the most likely scale value."""

    expected: float | None
    probs: dict[str, float] | None
    answer: Any
    completion: Completion


def rubric_judge(
    backend: JudgeBackend,
    outputs: Sequence[str],
    *,
    criterion: str,
    scale: Mapping[Any, str] | Sequence[Any],
    definition: str = "",
    references: Sequence[str] | None = None,
    contexts: Sequence[str] | None = None,
    template: str | None = None,
) -> list[RubricJudgment]:
    """Score each output on the scale (one prompt per output, one option per scale value).

    Scale values must be told apart by the answer's first token (1-9, or words that start
    differently); a local model refuses options sharing a first token.
    """
    points = scale_points(scale)
    for name, values in (("references", references), ("contexts", contexts)):
        if values is not None and len(values) != len(outputs):
            raise ValueError(f"{len(values)} {name} for {len(outputs)} outputs")
    prompts = [
        rubric_prompt(
            criterion=criterion, output=output, scale=points, definition=definition,
            reference="" if references is None else references[i],
            context="" if contexts is None else contexts[i], template=template,
        )
        for i, output in enumerate(outputs)
    ]
    options = [str(p.value) for p in points]
    by_option = {str(p.value): p for p in points}
    numbers = [_numeric(p.value) for p in points]
    numeric = all(n is not None for n in numbers)
    judgments = []
    for completion in backend.score_options(prompts, options):
        probs = completion.option_probs
        if not probs:
            judgments.append(RubricJudgment(None, None, None, completion))
            continue
        answer = by_option[max(probs, key=probs.__getitem__)].value
        expected = (
            float(sum(probs[o] * n for o, n in zip(options, numbers, strict=True) if n is not None))
            if numeric else None
        )
        judgments.append(RubricJudgment(expected, dict(probs), answer, completion))
    return judgments


# --------------------------------------------------------------------------------------------
# DRPE: roles
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Role:
    type: str
    description: str
    dynamic: bool = False  # generated from the content (subjective) vs curated (objective)

    @property
    def text(self) -> str:
        """What is embedded for deduplication: "type: description"."""
        return f"{self.type}: {self.description}"


# DRPE Figure 3: the static (objective) roles for summarisation.
STATIC_ROLES: tuple[Role, ...] = (
    Role("General Public", "These readers may be interested in the story and looking for "
                           "updates on the investigation."),
    Role("Critic", "These people will check fluent writing, clear sentences, and good wording "
                   "in summary writing."),
    Role("News Author", "These readers will check the summary for consistency with the original "
                        "article."),
)

DYNAMIC_ROLES_TEMPLATE = (
    "Read the text below and think of {k} different kinds of people who would read it: "
    "consider common occupations as well as how familiar each reader is with its topic, and "
    "what each of them would care about when reading it.\n\n"
    "Text:\n{content}\n\n"
    "Answer with exactly {k} lines, one reader per line, in the form\n"
    "<reader type>: <one sentence describing what this reader cares about>"
)

# DRPE section 3.1 designs two user-role generation prompts (its Figure 4, an image whose exact
# wording the paper's text does not give): a coarse-grained one, "the most common occupations
# with most people in the world", and a fine-grained one that "categorize[s] people based on
# their familiarity with the text topics". Both generate roles from the content, in the
# paper's <User type, User description> schema. These two are written from that description;
# DYNAMIC_ROLES_TEMPLATE above (the default, "mixed") asks for both aspects in one prompt.
COARSE_ROLES_TEMPLATE = (
    "Read the text below. Think of the most common occupations of people in the world, and "
    "list the {k} kinds of people, by occupation, who are most likely to read this text.\n\n"
    "Text:\n{content}\n\n"
    "Answer with exactly {k} lines, one kind of user per line, in the form\n"
    "<User type>: <User description: who these users are and what they look for in the text>"
)
FINE_ROLES_TEMPLATE = (
    "Read the text below. Divide its potential readers into {k} kinds by how familiar they are "
    "with the topics of the text, from people who know nothing about them to experts or fans "
    "who follow them closely.\n\n"
    "Text:\n{content}\n\n"
    "Answer with exactly {k} lines, one kind of user per line, in the form\n"
    "<User type>: <User description: how familiar these users are with the topics and what "
    "they look for in the text>"
)
# Which prompt(s) generate the dynamic roles: "both" sends the coarse and the fine prompt (k
# roles each, in one batch) and leaves the overlap to the deduplication.
ROLE_GRANULARITIES: dict[str, tuple[str, ...]] = {
    "mixed": (DYNAMIC_ROLES_TEMPLATE,),
    "coarse": (COARSE_ROLES_TEMPLATE,),
    "fine": (FINE_ROLES_TEMPLATE,),
    "both": (COARSE_ROLES_TEMPLATE, FINE_ROLES_TEMPLATE),
}

# DRPE section 4.1, ManualDRPEScore: six hand-written roles, no generated ones (the paper's
# baseline for its dynamic roles; use as `static` with k = 0).
MANUAL_ROLES: tuple[Role, ...] = (
    Role("Students", "These are studying in high school and want to know more about the "
                     "world."),
    Role("Business Man", "These are working in a big company and are interested in any "
                         "business opportunity."),
    Role("Politician", "These are pursuing an election victory in a medium country."),
    *STATIC_ROLES,
)

_BULLET = re.compile(r"^\s*(?:[-*\u2022>]+|\(?\d{1,2}[.):]|[A-Za-z][.)])\s*")
_MARKUP = re.compile(r"[*_`#]+")
_PAIR_FIELDS = re.compile(
    r"(?:user|judge|reader|role)?\s*type\s*[:=]\s*(?P<type>[^\n,;]+?)\s*[,;\n]\s*"
    r"(?:user|judge|reader|role)?\s*description\s*[:=]\s*(?P<description>[^\n]+)",
    re.IGNORECASE,
)
_INTRO = re.compile(r"^(here|sure|okay|ok|certainly|the following|below)\b", re.IGNORECASE)


def _clean(text: str) -> str:
    return " ".join(_MARKUP.sub("", text).split()).strip(" \t-:;,.\"'<>")


def parse_roles(text: str, *, limit: int | None = None) -> list[Role]:
    """Roles from an LLM's answer, robust to the usual shapes.

    Accepts a JSON list (objects with type/description, or "type: description" strings) or a
    JSON object holding one; "type: ... description: ..." field pairs; and lines such as
    "1. **Fans**: people who ...", "- Fans - people who ...", "<Fans, people who ...>".
    Intro lines ("Here are four readers:") and lines without a description are skipped; roles
    are unique by type (case-insensitive), at most `limit`.
    """
    roles: list[Role] = []
    seen: set[str] = set()

    def add(kind: Any, description: Any) -> None:
        kind, description = _clean(str(kind or "")), _clean(str(description or ""))
        if not kind or not description or len(kind) > 80:
            return
        key = kind.casefold()
        if key not in seen:
            seen.add(key)
            roles.append(Role(kind, description, dynamic=True))

    for item in _json_items(text):
        if isinstance(item, Mapping):
            lowered = {str(k).casefold(): v for k, v in item.items()}
            kind = next((lowered[k] for k in ("type", "user type", "role", "name", "reader",
                                              "judge type", "reader type") if k in lowered), None)
            description = next((lowered[k] for k in ("description", "user description",
                                                     "judge description", "desc")
                                if k in lowered), None)
            add(kind, description)
        elif isinstance(item, str):
            _add_line(item, add)
    if not roles:
        for match in _PAIR_FIELDS.finditer(text):
            add(match["type"], match["description"])
    if not roles:
        for line in text.splitlines():
            _add_line(line, add)
    return roles[:limit] if limit is not None else roles


def _json_items(text: str) -> list[Any]:
    """Items of the first JSON list in `text` (or of a list inside a JSON object)."""
    for opener, closer in (("[", "]"), ("{", "}")):
        start, end = text.find(opener), text.rfind(closer)
        if start == -1 or end <= start:
            continue
        try:
            value = json.loads(text[start:end + 1])
        except ValueError:
            continue
        if isinstance(value, list):
            return value
        if isinstance(value, Mapping):
            lists = [v for v in value.values() if isinstance(v, list)]
            return lists[0] if lists else [value]
    return []


def _add_line(line: str, add: Callable[[Any, Any], None]) -> None:
    line = _BULLET.sub("", line.strip())
    line = line.strip().strip("<>").strip()
    if not line or _INTRO.match(line):
        return
    line = _MARKUP.sub("", line)
    for separator in (":", " - ", " \u2013 ", " \u2014 ", ","):
        if separator in line:
            kind, description = line.split(separator, 1)
            add(kind, description)
            return


def dynamic_roles(
    backend: JudgeBackend,
    content: str,
    k: int = 4,
    *,
    template: str = DYNAMIC_ROLES_TEMPLATE,
    granularity: str | None = None,
    max_tokens: int = 400,
) -> list[Role]:
    """Up to `k` subjective roles generated by the LLM from the content (DRPE 3.1; k = 4 was
    the paper's best) with `template`, or with the prompt(s) of `granularity` (a key of
    ROLE_GRANULARITIES: "mixed", "coarse", "fine", or "both", which asks both paper prompts
    for k roles each in one batch, so up to 2k roles, unique by type, coarse ones first).
    JudgeError when a request fails; possibly fewer roles when an answer holds fewer parseable
    lines."""
    if k < 1:
        return []
    if granularity is not None:
        if granularity not in ROLE_GRANULARITIES:
            raise ValueError(f"granularity must be one of {sorted(ROLE_GRANULARITIES)}, got "
                             f"{granularity!r}")
        templates = ROLE_GRANULARITIES[granularity]
    else:
        templates = (template,)
    prompts = [render_template(t, allowed={"k", "content"}, k=k, content=content)
               for t in templates]
    roles: list[Role] = []
    seen: set[str] = set()
    for completion in backend.generate(prompts, max_tokens=max_tokens, temperature=0.0):
        if completion.source == SOURCE_ERROR:
            raise JudgeError(f"dynamic role generation failed: {completion.error}")
        for role in parse_roles(completion.text, limit=k):
            if role.type.casefold() not in seen:
                seen.add(role.type.casefold())
                roles.append(role)
    return roles


def deduplicate_roles(
    roles: Sequence[Role],
    embed: Callable[[list[str]], np.ndarray],
    eps: float = 0.2,
    *,
    min_samples: int = 2,
) -> list[Role]:
    """Roles without near-duplicates (DRPE 3.1), in their original order.

    `embed` maps "type: description" strings to an [n, dim] array (e.g. a sentence encoder's
    mean-pooled embeddings). DBSCAN with the cosine metric groups roles within cosine distance
    `eps` (core points need `min_samples` roles, themselves included); from each cluster the
    role closest to the cluster's mean embedding is kept, and every noise point (a role like no
    other) is kept; between roles equally close to the mean, the one whose text sorts first.
    """
    from sklearn.cluster import DBSCAN

    roles = list(roles)
    if len(roles) < 2:
        return roles
    vectors = np.asarray(embed([role.text for role in roles]), dtype=float)
    if vectors.shape[0] != len(roles) or vectors.ndim != 2:
        raise ValueError(f"embed returned shape {vectors.shape} for {len(roles)} roles")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("embed returned a zero vector; cosine distance is undefined")
    unit = vectors / norms
    labels = DBSCAN(eps=eps, min_samples=min_samples, metric="cosine").fit_predict(unit)
    keep = set(np.flatnonzero(labels == -1).tolist())
    for label in set(labels.tolist()) - {-1}:
        members = np.flatnonzero(labels == label)
        centre = unit[members].mean(axis=0)
        centre /= np.linalg.norm(centre)
        # Equal similarities (always, for a pair: both are as close to their mean) differ in
        # the last bits with the order of the sum: ties within 1e-9 go to the role whose text
        # sorts first, so the choice does not depend on the order the roles came in.
        similarity = np.round(unit[members] @ centre, 9)
        best = min(range(len(members)), key=lambda k: (-similarity[k], roles[members[k]].text))
        keep.add(int(members[best]))
    return [role for index, role in enumerate(roles) if index in keep]


def sentence_embedder(model_path: str | None = None, device: str | None = None
                      ) -> Callable[[list[str]], np.ndarray]:
    """`embed` for `deduplicate_roles` from the shared encoder (`metrics.scorers.encoder`,
    all-MiniLM-L6-v2 by default): mean-pooled sentence embeddings, as Sentence-BERT's."""
    from metrics.scorers.encoder import get_encoder

    encoder = get_encoder(model_path, device)

    def embed(texts: list[str]) -> np.ndarray:
        return np.stack([record.mean.numpy() for record in encoder.encode(texts)])

    return embed


def drpe_roles(
    backend: JudgeBackend,
    content: str,
    *,
    static: Sequence[Role] = STATIC_ROLES,
    k: int = 4,
    embed: Callable[[list[str]], np.ndarray] | None = None,
    eps: float = 0.2,
    granularity: str = "mixed",
) -> list[Role]:
    """The roles that vote on one item: the static roles plus `k` dynamic roles generated from
    `content` with the prompt(s) of `granularity` (see `dynamic_roles`), deduplicated (with
    `sentence_embedder()` unless `embed` is given)."""
    roles = list(static) + dynamic_roles(backend, content, k, granularity=granularity)
    return deduplicate_roles(roles, embed or sentence_embedder(), eps)


# --------------------------------------------------------------------------------------------
# DRPE: voting
# --------------------------------------------------------------------------------------------

DRPE_TEMPLATE = (
    "{context_block}"
    "Summary A: {text_a}\n\n"
    "Summary B: {text_b}\n\n"
    "The following {n} people each compare Summary A and Summary B from their own point of "
    "view:\n{roles}\n\n"
    "For each person, say which summary they would find better and give their reason. Answer "
    "with exactly {n} lines, one per person, in this form:\n"
    "<number>. <Summary A or Summary B> - <reason>"
)
# DRPE 3.2 compares the candidate summary with the reference written by humans: the roles vote
# "Summary 1" or "Summary 2" (eq. 1: a = 0 / a = 1) on "which summary could better describe the
# article", each with its reason, in one batched prompt (Figure 5, an image; this wording is
# written from the text). `drpe_reference_judge` shows the reference as Summary 1 and the
# candidate as Summary 2 (the paper's order), and also the other way round unless told not to.
DRPE_REFERENCE_TEMPLATE = (
    "{context_block}"
    "Summary 1: {text_a}\n\n"
    "Summary 2: {text_b}\n\n"
    "The following {n} people each read the article and both summaries from their own point "
    "of view:\n{roles}\n\n"
    "For each person, vote which summary better describes the article and give their reason. "
    "Answer with exactly {n} lines, one per person, in this form:\n"
    "<number>. <Summary 1 or Summary 2> - <reason>"
)
DRPE_FIELDS = frozenset({"context_block", "context", "text_a", "text_b", "n", "roles"})
ORDERS = ("AB", "BA")
# How the votes of one order become a score (both are always computed, see DrpeResult):
# "share": the confidence-weighted share of the votes, sum_j 1(a_j = A) P_j / sum_j P_j, in
# [0, 1] (the default; what a pairwise judgment stores as P(A is better));
# "sum": DRPE eq. 4 as printed, sum_j 1(a_j = A) P_j, unnormalised, in [0, number of roles]:
# confident votes count more than hesitant ones in absolute terms, so scores of different items
# (different roles, different confidence) are not on a common [0, 1] scale.
AGGREGATIONS = ("share", "sum")

_VOTE_LINE = re.compile(r"^\W*(?:role|person|judge|reader|user)?\s*(\d{1,2})\s*[.):\-]\s*(.*)$",
                        re.IGNORECASE)
_CHOICE = re.compile(r"summary\s*[\"'(*]*\s*([ab12])(?![a-z0-9])", re.IGNORECASE)
_CHOICE_LABEL = {"a": "A", "1": "A", "b": "B", "2": "B"}


@dataclass
class DrpeVote:
    role: Role
    choice: str | None  # "A" or "B" in the ORIGINAL labels; None when no vote could be read
    reason: str
    weight: float  # exp(mean log-probability of the role's answer tokens); 0 without a vote
    order: str  # "AB": original A shown first; "BA": original B shown first
    shown_choice: str | None = None  # the label as shown ("A" or "B")


@dataclass
class DrpeResult:
    """`p_a`: weighted share of the votes for the original A, averaged over the orders that
    produced votes (None when none did); `winner`: "A", "B", "tie", or None without votes,
    decided by `aggregation` ("share": p_a against 0.5; "sum": score_a against score_b);
    `position_consistent`: both orders produced votes and picked the same winner.

    `score_a` / `score_b`: DRPE eq. 4 unnormalised, sum_j 1(a_j = A) P_j (and for B), P_j the
    role's length-normalised confidence (eq. 3), averaged over the orders that produced votes;
    `sums_by_order`: {order: {"A": ..., "B": ...}} (None for an order without votes)."""

    p_a: float | None
    winner: str | None
    votes: list[DrpeVote]
    position_consistent: bool
    p_a_by_order: dict[str, float | None]
    usage: dict[str, float]
    weighting: dict[str, str] = field(default_factory=dict)  # order -> how votes were weighted
    errors: list[str] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    aggregation: str = "share"
    score_a: float | None = None
    score_b: float | None = None
    sums_by_order: dict[str, dict[str, float] | None] = field(default_factory=dict)


def drpe_prompt(roles: Sequence[Role], context: str, shown_a: str, shown_b: str,
                template: str = DRPE_TEMPLATE) -> str:
    role_lines = "\n".join(f"{i}. {role.type}: {role.description}"
                           for i, role in enumerate(roles, start=1))
    context_block = f"Article: {context.strip()}\n\n" if context and context.strip() else ""
    return render_template(
        template, allowed=DRPE_FIELDS, context_block=context_block, context=context or "",
        text_a=shown_a, text_b=shown_b, n=len(roles), roles=role_lines,
    )


def parse_votes(text: str, n_roles: int) -> dict[int, tuple[str, str, tuple[int, int]]]:
    """{role index (0-based): (shown choice "A"/"B", reason, (start, end) char span)}.

    Numbered lines are matched to roles by number; without any numbered vote, lines naming a
    summary are taken in order. The choice is the first "Summary A/B" (or "Summary 1/2") named
    on the line.
    """
    votes: dict[int, tuple[str, str, tuple[int, int]]] = {}
    unnumbered: list[tuple[str, str, tuple[int, int]]] = []
    offset = 0
    for line in text.splitlines(keepends=True):
        start, stripped = offset, line.rstrip("\r\n")
        offset += len(line)
        choice = _CHOICE.search(stripped)
        if not choice:
            continue
        label = _CHOICE_LABEL[choice.group(1).lower()]
        reason = stripped[choice.end():].strip(" \t-:|,.;)*\"'")
        reason = re.sub(r"^(?:reason\s*[:\-]|because\b)\s*", "", reason, flags=re.IGNORECASE)
        span = (start, start + len(stripped))
        numbered = _VOTE_LINE.match(stripped)
        if numbered and 1 <= int(numbered.group(1)) <= n_roles:
            votes.setdefault(int(numbered.group(1)) - 1, (label, reason, span))
        else:
            unnumbered.append((label, reason, span))
    if not votes:
        votes = dict(enumerate(unnumbered[:n_roles]))
    return votes


def _span_weights(completion: Completion, spans: Mapping[int, tuple[int, int]]
                  ) -> tuple[dict[int, float], str]:
    """Per-role weights exp(mean token log-probability over the role's line) and how they were
    obtained: "role-tokens" (the generated tokens re-assemble the text), "completion" (the whole
    answer's mean), or "uniform" (no log-probabilities)."""
    tokens = completion.token_logprobs
    if tokens and "".join(t for t, _ in tokens) == completion.text:
        weights: dict[int, float] = {}
        positions = []
        cursor = 0
        for token, logprob in tokens:
            positions.append((cursor, cursor + len(token), logprob))
            cursor += len(token)
        for role, (start, end) in spans.items():
            inside = [lp for a, b, lp in positions if a < end and b > start]
            weights[role] = math.exp(sum(inside) / len(inside)) if inside else 0.0
        return weights, "role-tokens"
    if completion.logprob_mean is not None:
        weight = math.exp(completion.logprob_mean)
        return dict.fromkeys(spans, weight), "completion"
    return dict.fromkeys(spans, 1.0), "uniform"


def drpe_judge(
    backend: JudgeBackend,
    roles: Sequence[Role],
    context: str,
    text_a: str,
    text_b: str,
    *,
    template: str = DRPE_TEMPLATE,
    max_tokens: int | None = None,
    orders: Sequence[str] = ORDERS,
    aggregation: str = "share",
) -> DrpeResult:
    """Which of two texts the roles prefer, with both presentation orders (DRPE 3.2).

    One generation per order (the two are sent together), each holding every role's vote and
    reason. A vote's weight is exp of the mean log-probability of the tokens of its answer line
    (the paper's length-normalised confidence), falling back to the whole answer's mean, or to 1
    when the backend gives no log-probabilities (see `weighting`). Per order, the score is the
    weighted share of votes for the original A; `p_a` averages the orders, so a judge that
    always picks the first-shown text scores 0.5 and is not position-consistent. The eq. 4
    sums (`score_a`, `score_b`) are computed beside it; `aggregation="sum"` lets them decide
    the winner. `orders=("AB",)` judges the given order only (the paper's single prompt).
    """
    roles = list(roles)
    if not roles:
        raise ValueError("drpe_judge needs at least one role")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    orders = list(orders)
    if not orders or len(set(orders)) != len(orders) or not set(orders) <= set(ORDERS):
        raise ValueError(f"orders must be distinct values from {ORDERS}, got {orders!r}")
    shown = {"AB": (text_a, text_b), "BA": (text_b, text_a)}
    prompts = [drpe_prompt(roles, context, *shown[order], template) for order in orders]
    before = backend.usage.as_dict()
    completions = backend.generate(prompts, max_tokens=max_tokens or 60 * len(roles) + 40,
                                   temperature=0.0)
    votes: list[DrpeVote] = []
    errors: list[str] = []
    p_by_order: dict[str, float | None] = {}
    sums_by_order: dict[str, dict[str, float] | None] = {}
    weighting: dict[str, str] = {}
    for order, completion in zip(orders, completions, strict=True):
        if completion.source == SOURCE_ERROR:
            errors.append(f"order {order}: {completion.error}")
            p_by_order[order] = sums_by_order[order] = None
            continue
        parsed = parse_votes(completion.text, len(roles))
        weights, weighting[order] = _span_weights(
            completion, {role: span for role, (_c, _r, span) in parsed.items()}
        )
        for index, role in enumerate(roles):
            if index not in parsed:
                votes.append(DrpeVote(role, None, "", 0.0, order))
                continue
            shown_choice, reason, _span = parsed[index]
            original = shown_choice if order == "AB" else ("B" if shown_choice == "A" else "A")
            votes.append(DrpeVote(role, original, reason, weights[index], order, shown_choice))
        counted = [v for v in votes if v.order == order and v.choice is not None]
        total = sum(v.weight for v in counted)
        if not counted:
            errors.append(f"order {order}: no vote could be read from {completion.text[:200]!r}")
            p_by_order[order] = sums_by_order[order] = None
            continue
        # Eq. 4: sum_j 1(a_j = label) P_j, per label.
        sums_by_order[order] = {label: sum(v.weight for v in counted if v.choice == label)
                                for label in ("A", "B")}
        if total <= 0:
            p_by_order[order] = sum(v.choice == "A" for v in counted) / len(counted)
        else:
            p_by_order[order] = sum(v.weight for v in counted if v.choice == "A") / total
    known = [p for p in p_by_order.values() if p is not None]
    p_a = sum(known) / len(known) if known else None
    sums = [s for s in sums_by_order.values() if s is not None]
    score_a = sum(s["A"] for s in sums) / len(sums) if sums else None
    score_b = sum(s["B"] for s in sums) / len(sums) if sums else None
    if aggregation == "sum":
        winner = _sum_winner(score_a, score_b)
        winners = [None if s is None else _sum_winner(s["A"], s["B"])
                   for s in sums_by_order.values()]
    else:
        winner = _winner(p_a)
        winners = [_winner(p) for p in p_by_order.values()]
    spent = backend.usage.since(before)
    usage = {
        "tokens_in": sum(c.tokens_in for c in completions),
        "tokens_out": sum(c.tokens_out for c in completions),
        "latency_s": sum(c.latency_s for c in completions),
        "requests": spent["requests"],
        "cache_hits": spent["cache_hits"],
    }
    return DrpeResult(
        p_a=p_a,
        winner=winner,
        votes=votes,
        position_consistent=len(known) == 2 and winners[0] == winners[1],
        p_a_by_order=p_by_order,
        usage=usage,
        weighting=weighting,
        errors=errors,
        completions=list(completions),
        aggregation=aggregation,
        score_a=score_a,
        score_b=score_b,
        sums_by_order=sums_by_order,
    )


@dataclass
class DrpeReferenceResult:
    """A candidate judged against the reference (DRPE 3.2). `score`: the candidate's DRPEScore
    under `aggregation` ("sum": eq. 4, the summed confidence of the votes for the candidate,
    in [0, number of roles]; "share": `p_candidate`); `p_candidate`: the confidence-weighted
    share of votes for the candidate, in [0, 1]; both averaged over the orders judged, None
    without votes. `result`: the underlying judgment, with A = the reference and B = the
    candidate."""

    score: float | None
    p_candidate: float | None
    aggregation: str
    result: DrpeResult


def drpe_reference_judge(
    backend: JudgeBackend,
    roles: Sequence[Role],
    article: str,
    reference: str,
    candidate: str,
    *,
    aggregation: str = "sum",
    orders: Sequence[str] = ORDERS,
    template: str = DRPE_REFERENCE_TEMPLATE,
    max_tokens: int | None = None,
) -> DrpeReferenceResult:
    """DRPEScore of `candidate` compared with the human `reference` summary of `article`, as
    the paper scores a generated summary: every role votes "Summary 1" (the reference, a = 0)
    or "Summary 2" (the candidate, a = 1) with a reason, in one batched prompt, and the score is
    eq. 4, sum_j 1(a_j = 1) P_j, the votes for the candidate weighted by their length-normalised
    confidence (unnormalised; `aggregation="share"` divides by the total confidence).

    The paper prompts once, reference first (`orders=("AB",)`). By default the candidate is
    also shown first ("BA") and the two scores are averaged, so that a judge preferring the
    first (or second) summary shown favours no candidate; the per-order numbers stay in
    `result.sums_by_order` and `result.p_a_by_order`.
    """
    result = drpe_judge(backend, roles, article, reference, candidate, template=template,
                        max_tokens=max_tokens, orders=orders, aggregation=aggregation)
    p_candidate = None if result.p_a is None else 1.0 - result.p_a
    score = result.score_b if aggregation == "sum" else p_candidate
    return DrpeReferenceResult(score=score, p_candidate=p_candidate, aggregation=aggregation,
                               result=result)


def _sum_winner(score_a: float | None, score_b: float | None, tolerance: float = 1e-9
                ) -> str | None:
    if score_a is None or score_b is None:
        return None
    if score_a > score_b + tolerance:
        return "A"
    if score_b > score_a + tolerance:
        return "B"
    return "tie"


def _winner(p_a: float | None, tolerance: float = 1e-9) -> str | None:
    if p_a is None:
        return None
    if p_a > 0.5 + tolerance:
        return "A"
    if p_a < 0.5 - tolerance:
        return "B"
    return "tie"


__all__ = [
    "AGGREGATIONS", "COARSE_ROLES_TEMPLATE", "DRPE_REFERENCE_TEMPLATE", "DRPE_TEMPLATE",
    "DYNAMIC_ROLES_TEMPLATE", "FINE_ROLES_TEMPLATE", "LATTE_FIELDS", "LATTE_TEMPLATE",
    "MANUAL_ROLES", "ORDERS", "ROLE_GRANULARITIES",
    "RUBRIC_FIELDS", "STATIC_ROLES", "DrpeReferenceResult", "DrpeResult", "DrpeVote", "Role",
    "RubricJudgment", "ScalePoint", "deduplicate_roles", "drpe_judge", "drpe_prompt",
    "drpe_reference_judge", "drpe_roles", "dynamic_roles", "latte_judge", "latte_prompts",
    "parse_roles", "parse_votes",
    "render_template", "rubric_judge", "rubric_prompt", "scale_points", "sentence_embedder",
    "template_fields", "validate_template",
]
