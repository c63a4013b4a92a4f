"""Few-shot examples in a judge's prompts (no Django here).

A versioned judge prompt (`proxies.versions`) carries examples built from human
corrections: units the raters judged, each shown with the answer the human majority gave. They
reach the model as a block put before every prompt the judge sends, written in the method's
own answer format, so the model sees a worked case exactly as it is then asked one:

- LATTE: each example is the LATTE prompt itself, filled with the example's texts and followed
  by the people's answer ("yes}" / "no}"), one per line, then the prompt to answer (the
  classic completion-style few-shot; P(yes) is still read at the last open brace).
- Rubric: each example's context, reference, output and the people's scale value (and why),
  then the rubric prompt.
- DRPE: each example pair with the summary people preferred, then the role-player prompt. Role
  generation (`drpe_roles`) is asked without them: roles describe readers, not answers.

Each method's spec (proxies.methods, `fewshot_prefix`) builds its block with these.
`FewShotBackend` wraps any `JudgeBackend` and prefixes the prompts it is sent; the response
cache and the usage counts stay the wrapped backend's (the prefix is part of every prompt, so a
cached answer of another version is never reused).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxies.judges.backends.base import Completion, JudgeBackend
from proxies.judges.methods import latte_prompts

# What a LATTE answer looks like after its template's open brace.
YES_NO_ANSWERS = {"yes", "no"}
PAIRWISE_ANSWERS = {"A": "Summary A", "B": "Summary B", "tie": "neither (a tie)",
                    "both_good": "both equally (both good)",
                    "both_bad": "neither (both bad)"}


@dataclass(frozen=True)
class FewShotExample:
    """One worked case: the texts as the judge would see them and the people's answer in the
    method's answer format ("yes"/"no" for LATTE, a scale value for a rubric, "A"/"B"/"tie"
    for DRPE). `why`: a sentence a rubric or DRPE prompt shows after the answer."""

    output: str
    answer: str
    reference: str = ""
    context: str = ""
    output_b: str | None = None
    why: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FewShotExample:
        text_b = data.get("text_b")
        return cls(output=str(data.get("text") or ""), answer=str(data.get("answer") or ""),
                   reference=str(data.get("reference") or ""),
                   context=str(data.get("context") or ""),
                   output_b=None if text_b is None else str(text_b),
                   why=str(data.get("why") or ""))


def latte_block(examples: Sequence[FewShotExample], template: str) -> str:
    lines = []
    for example in examples:
        if example.answer not in YES_NO_ANSWERS:
            raise ValueError(f"a LATTE example's answer must be yes or no, got "
                             f"{example.answer!r}")
        prompt = latte_prompts([(example.reference or example.context, example.output)],
                               template, contexts=[example.context])[0]
        closing = "}" if prompt.rstrip().endswith("{") else ""
        lines.append(f"{prompt}{example.answer}{closing}")
    return "\n".join(lines) + "\n"


def rubric_block(examples: Sequence[FewShotExample]) -> str:
    parts = ["Examples rated by people (for guidance; they are not the output to rate):", ""]
    for number, example in enumerate(examples, start=1):
        parts.append(f"Example {number}")
        if example.context.strip():
            parts.append(f"Context: {example.context.strip()}")
        if example.reference.strip():
            parts.append(f"Reference: {example.reference.strip()}")
        parts.append(f"Output: {example.output.strip()}")
        parts.append(f"People's answer: {example.answer}")
        if example.why.strip():
            parts.append(f"Why: {example.why.strip()}")
        parts.append("")
    parts += ["---", "", ""]
    return "\n".join(parts)


def drpe_block(examples: Sequence[FewShotExample]) -> str:
    parts = ["Examples judged by people (for guidance; they are not the summaries to judge):",
             ""]
    for number, example in enumerate(examples, start=1):
        parts.append(f"Example {number}")
        if (example.context or example.reference).strip():
            parts.append(f"Article: {(example.context or example.reference).strip()}")
        parts.append(f"Summary A: {example.output.strip()}")
        parts.append(f"Summary B: {(example.output_b or '').strip()}")
        parts.append("People preferred: "
                     + PAIRWISE_ANSWERS.get(example.answer, example.answer))
        if example.why.strip():
            parts.append(f"Why: {example.why.strip()}")
        parts.append("")
    parts += ["---", "", ""]
    return "\n".join(parts)


class FewShotBackend(JudgeBackend):
    """`inner` with `prefix` put before every prompt; everything else is `inner`'s (its
    signature, cache and usage counts)."""

    def __init__(self, inner: JudgeBackend, prefix: str) -> None:
        super().__init__(cache=None)
        self.inner = inner
        self.prefix = prefix
        self.kind = inner.kind
        self.usage = inner.usage

    def signature(self) -> dict[str, Any]:
        return self.inner.signature()

    def score_options(self, prompts: Sequence[str], options: Sequence[str]) -> list[Completion]:
        return self.inner.score_options([self.prefix + p for p in prompts], options)

    def generate(self, prompts: Sequence[str], *, max_tokens: int, temperature: float = 0.0
                 ) -> list[Completion]:
        return self.inner.generate([self.prefix + p for p in prompts], max_tokens=max_tokens,
                                   temperature=temperature)

    def _cache_identity(self) -> tuple[str, str, str]:
        return self.inner._cache_identity()


__all__ = ["PAIRWISE_ANSWERS", "FewShotBackend", "FewShotExample", "drpe_block", "latte_block",
           "rubric_block"]
