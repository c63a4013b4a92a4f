"""LATTE (Tomanek et al.): the paper's yes/no meaning-preservation prompt, P(yes) per
(reference, output) read at a threshold (proxies.judges.methods.latte_judge)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from proxies.judges.fewshot import latte_block
from proxies.judges.methods import LATTE_TEMPLATE, latte_judge, latte_prompts

from .base import THRESHOLD_PARAM, Answer, Batch, ProxyMethod, decide, threshold_of


def answer(batch: Batch) -> Iterator[Answer]:
    texts = batch.texts
    pairs = [(texts[pk]["reference"] or texts[pk]["context"], texts[pk]["output"])
             for pk in batch.units]
    threshold = threshold_of(batch.run)
    completions = latte_judge(batch.backend, pairs, template=batch.run.template,
                              contexts=[texts[pk]["context"] for pk in batch.units])
    for pk, completion in zip(batch.units, completions, strict=True):
        score = completion.p_yes
        if score is None:
            yield (pk, None, None, completion.error or f"no answer read ({completion.source})",
                   completion.source)
        else:
            yield pk, decide(batch.kind, score, threshold), score, "", completion.source


def check_template(template: str) -> None:
    """A LATTE template must fill (its fields: reference, output, context)."""
    if template:
        latte_prompts([("reference", "output")], template, contexts=["context"])


def fewshot(examples: Sequence[Any], template: str) -> str:
    return latte_block(examples, template or LATTE_TEMPLATE)


METHOD = ProxyMethod(
    name="latte",
    order=10,
    label="LATTE yes/no meaning preservation (P(yes))",
    score="P(yes)",
    # P(meaning preserved): the kinds whose answers read as a binary decision.
    answers=lambda kind: kind.binary_reading,
    answer=answer,
    params=(THRESHOLD_PARAM,),
    versioned=True,
    default_template=LATTE_TEMPLATE,
    check_template=check_template,
    fewshot=fewshot,
    example_reads_binary=True,
    thresholded=True,
)
