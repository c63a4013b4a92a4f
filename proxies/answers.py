"""Judging one batch of units: each method's answers (LATTE, rubric/G-Eval, DRPE, a learned
proxy) as (slot, canonical value, score, error, source) for one criterion.

`value` is the criterion's canonical spelling, `score` the proxy's number (P(yes), the G-Eval
expected score, or P(A is better)); a unit whose answer cannot be read yields value None and
the reason (recorded in the run's `unreadable`, not stored as a judgment).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from evalstudy.models import AssignmentSlot, Criterion
from metrics.scorers.encoder import encoder_resolve

from .models import ProxyRun


def unit_texts(slot_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    texts: dict[int, dict[str, Any]] = {}
    for pk, reference, context, metadata, text, text_b in (
        AssignmentSlot.objects.filter(pk__in=slot_ids).values_list(
            "id", "output__item__reference", "output__item__context", "output__item__metadata",
            "output__text", "output_b__text")
    ):
        texts[pk] = {"reference": reference, "context": context, "metadata": metadata,
                     "output": text, "output_b": text_b}
    return texts


def _decide(criterion: Criterion, score: float, threshold: float) -> str:
    """The canonical answer for a P(yes) score. LATTE's binary reading of the severity scale:
    a preserved meaning is stored as 0 (fully preserved), a lost one as 2."""
    preserved = score >= threshold
    if criterion.kind == "severity":
        return "0" if preserved else "2"
    return "yes" if preserved else "no"


def _answers_latte(run, backend, criterion, units, texts):
    from .judges.methods import latte_judge

    pairs = [(texts[pk]["reference"] or texts[pk]["context"], texts[pk]["output"])
             for pk in units]
    threshold = float(run.params.get("threshold", 0.5))
    completions = latte_judge(backend, pairs, template=run.template,
                              contexts=[texts[pk]["context"] for pk in units])
    for pk, completion in zip(units, completions, strict=True):
        score = completion.p_yes
        if score is None:
            yield (pk, None, None, completion.error or f"no answer read ({completion.source})",
                   completion.source)
        else:
            yield pk, _decide(criterion, score, threshold), score, "", completion.source


def _answers_rubric(run, backend, criterion, units, texts):
    from .judges.methods import rubric_judge

    threshold = float(run.params.get("threshold", 0.5))
    spec = _criterion_spec(criterion)
    results = rubric_judge(
        backend, [texts[pk]["output"] for pk in units], criterion=spec["prompt"],
        scale=spec["scale"], definition=spec["description"],
        references=[texts[pk]["reference"] for pk in units],
        contexts=[texts[pk]["context"] for pk in units],
    )
    for pk, result in zip(units, results, strict=True):
        completion = result.completion
        if result.answer is None:
            yield (pk, None, None, completion.error or f"no answer read ({completion.source})",
                   completion.source)
            continue
        probs = result.probs or {}
        answer = str(result.answer)
        if criterion.kind == "binary":
            score = probs.get("yes")
            value = _decide(criterion, score, threshold) if score is not None else answer
        elif criterion.kind == "severity":
            # The analysis reads a proxy's score as P(meaning preserved): levels 0 and 1.
            score = (probs.get("0", 0.0) + probs.get("1", 0.0)) if probs else None
            value = answer
        elif criterion.kind == "likert":
            score, value = result.expected, answer
        else:  # categorical: the most likely option and its probability
            score, value = probs.get(answer), answer
        yield pk, value, score, "", completion.source


def _criterion_spec(criterion: Criterion) -> dict[str, Any]:
    """The criterion as the rubric prompt shows it: its question, help text and scale points
    (canonical values with their labels)."""
    choices = [choice for choice in criterion.rule.choices() or [] if choice != "tie"]
    labels = list(criterion.labels or [])
    if criterion.kind == "severity" and not labels:
        from evalstudy.criteria import SEVERITY_DEFAULT_LABELS

        labels = list(SEVERITY_DEFAULT_LABELS)
    return {
        "prompt": criterion.prompt, "description": criterion.description,
        "scale": {choice: (labels[i] if i < len(labels) else "")
                  for i, choice in enumerate(choices)},
    }


def _answers_drpe(run, backend, criterion, units, texts):
    from .judges import methods
    from .judges.backends.base import JudgeError

    static = ([methods.Role(role["type"], role["description"])
               for role in run.params["static_roles"]]
              if run.params.get("static_roles") else list(methods.STATIC_ROLES))
    k = int(run.params.get("dynamic_roles", 4))
    options: dict[str, Any] = (
        {"eps": float(run.params["dedup_eps"])} if "dedup_eps" in run.params else {})
    options["granularity"] = run.params.get("role_prompts", "mixed")
    aggregation = run.params.get("aggregation", "share")
    # The embedded/configured default, not the study's encoder: the roles' dedup was always
    # computed with it, and it is not part of the signature.
    embed = methods.sentence_embedder(encoder_resolve())
    max_tokens = run.params.get("max_tokens")
    roles_by_content: dict[str, list] = {}
    for pk in units:
        content = texts[pk]["context"] or texts[pk]["reference"]
        if content not in roles_by_content:
            try:
                # Roles describe readers, not answers: asked without a prompt version's
                # few-shot examples (proxies.judges.fewshot).
                roles_by_content[content] = methods.drpe_roles(
                    getattr(backend, "inner", backend), content, static=static, k=k,
                    embed=embed, **options)
            except JudgeError as error:
                yield pk, None, None, str(error), "error"
                continue
        result = methods.drpe_judge(backend, roles_by_content[content], content,
                                    texts[pk]["output"], texts[pk]["output_b"],
                                    max_tokens=max_tokens, aggregation=aggregation)
        if result.p_a is None or result.winner is None:
            yield (pk, None, None, "; ".join(result.errors) or "no role vote could be read",
                   "unparsed")
            continue
        if result.winner == "tie" and not criterion.allow_tie:
            value = "A" if result.p_a >= 0.5 else "B"
        else:
            value = result.winner
        yield pk, value, result.p_a, "", "/".join(sorted(set(result.weighting.values()))) or "votes"


@lru_cache(maxsize=4)
def _learned_model(artifact_path: str):
    """A trained proxy, loaded once per worker process (artefact versions never change)."""
    from .learned import load_artifact

    return load_artifact(artifact_path)


def _answers_learned(run, backend, criterion, units, texts):
    from .learned import PAIRWISE_KINDS, Example

    trained = _learned_model(run.learned_proxy.artifact_path)
    if trained.kind in PAIRWISE_KINDS:
        from .learned_pairwise import pairwise_answers

        yield from pairwise_answers(run, trained, criterion, units)
        return
    examples = [Example(reference=texts[pk]["reference"] or texts[pk]["context"],
                        output=texts[pk]["output"], label=None,
                        group=texts[pk]["reference"], key=pk) for pk in units]
    threshold = float(run.params.get("threshold", 0.5))
    for pk, score in zip(units, trained.predict_proba(examples), strict=True):
        yield pk, _decide(criterion, float(score), threshold), float(score), "", "model"


ANSWERERS = {
    ProxyRun.Method.LATTE: _answers_latte,
    ProxyRun.Method.RUBRIC: _answers_rubric,
    ProxyRun.Method.DRPE: _answers_drpe,
    ProxyRun.Method.LEARNED: _answers_learned,
}
