"""DRPE (Wu et al., "Large Language Models are Diverse Role-Players for Summarization
Evaluation"): roles (static ones and ones generated from the content) vote on which of two
outputs is better, in both presentation orders (proxies.judges.methods.drpe_roles and
drpe_judge); P(A is better) per ordered pair."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from evalstudy.criteria import PAIR
from kit.params import CHOICE, FLOAT, INT, RECORDS, Param
from proxies.judges import methods
from proxies.judges.backends.base import JudgeError
from proxies.judges.fewshot import drpe_block

from .base import Answer, Batch, ProxyMethod


def answer(batch: Batch) -> Iterator[Answer]:
    from metrics.scorers.encoder import encoder_resolve

    params = batch.run.params
    static = ([methods.Role(role["type"], role["description"])
               for role in params["static_roles"]]
              if params.get("static_roles") else list(methods.STATIC_ROLES))
    k = int(params.get("dynamic_roles", 4))
    options: dict[str, Any] = (
        {"eps": float(params["dedup_eps"])} if "dedup_eps" in params else {})
    options["granularity"] = params.get("role_prompts", "mixed")
    aggregation = params.get("aggregation", "share")
    # The embedded/configured default, not the study's encoder: the roles' dedup was always
    # computed with it, and it is not part of the signature.
    embed = methods.sentence_embedder(encoder_resolve())
    max_tokens = params.get("max_tokens")
    roles_by_content: dict[str, list] = {}
    for pk in batch.units:
        texts = batch.texts[pk]
        content = texts["context"] or texts["reference"]
        if content not in roles_by_content:
            try:
                # Roles describe readers, not answers: asked without a prompt version's
                # few-shot examples (proxies.judges.fewshot).
                roles_by_content[content] = methods.drpe_roles(
                    getattr(batch.backend, "inner", batch.backend), content, static=static,
                    k=k, embed=embed, **options)
            except JudgeError as error:
                yield pk, None, None, str(error), "error"
                continue
        result = methods.drpe_judge(batch.backend, roles_by_content[content], content,
                                    texts["output"], texts["output_b"],
                                    max_tokens=max_tokens, aggregation=aggregation)
        if result.p_a is None or result.winner is None:
            yield (pk, None, None, "; ".join(result.errors) or "no role vote could be read",
                   "unparsed")
            continue
        if result.winner == "tie" and not batch.criterion.allow_tie:
            value = "A" if result.p_a >= 0.5 else "B"
        else:
            value = result.winner
        yield pk, value, result.p_a, "", "/".join(sorted(set(result.weighting.values()))) or "votes"


def fewshot(examples: Sequence[Any], template: str) -> str:
    return drpe_block(examples)


METHOD = ProxyMethod(
    name="drpe",
    order=30,
    label="DRPE role-player pairwise vote",
    score="P(A is better)",
    answers=lambda kind: kind.shows == PAIR,
    answer=answer,
    params=(
        Param("static_roles", RECORDS, columns=(("type", "Role"), ("description", "Who they are")),
              help="The fixed roles that vote (blank: the paper's general public and critic)."),
        Param("dynamic_roles", INT, minimum=0, maximum=16,
              help="Roles generated from each item's content (blank: 4)."),
        Param("dedup_eps", FLOAT, minimum=0.0,
              help="How close two generated roles may be before one is dropped (blank: the "
                   "judge's default)."),
        Param("max_tokens", INT, minimum=1, maximum=4096,
              help="Tokens generated per vote (blank: 60 per role + 40)."),
        Param("role_prompts", CHOICE, choices=tuple(methods.ROLE_GRANULARITIES),
              help="Which of the paper's prompts generates the roles (blank: mixed)."),
        Param("aggregation", CHOICE, choices=tuple(methods.AGGREGATIONS),
              help="How the roles' votes are combined: the weighted share, or the paper's "
                   "unnormalised sum (blank: share)."),
    ),
    versioned=True,
    fewshot=fewshot,
)
