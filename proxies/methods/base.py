"""What a proxy method is: `ProxyMethod`, the spec each module of this package declares once
(no Django here).

A proxy method is a way of answering a study's criteria without people: an LLM judge asked
with the method's prompt (LATTE, rubric/G-Eval, DRPE) or a model trained on the study's own
human judgments (a learned proxy). Everything the rest of the code needs to know about one
method is an attribute of its spec: the criterion kinds it answers, the run parameters it
understands, the rater it answers as, its prompt and few-shot examples, the queue its batches
go to, whether its answers are a score read at a threshold, and the function that judges one
batch (`answer`). The runs, the admin, the API and the analysis ask the spec; none of them
names a method.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kit.params import FLOAT, Param

if TYPE_CHECKING:
    from evalstudy.criteria import AnswerKind

#: One unit's answer: (slot id, canonical value or None, score or None, why no answer, where
#: the answer came from: "logprobs", "parsed", "model"...). A None value is not stored: its
#: reason goes into the run's `unreadable`.
Answer = tuple[int, "str | None", "float | None", str, str]

# The raters a proxy answers as (evalstudy.models.Rater.Kind's values).
LLM_RATER = "llm"
METRIC_RATER = "metric"

# The queues a proxy's batches go to (config.celery routes them to their workers).
LLM_QUEUE = "llm"
GPU_QUEUE = "gpu"
CPU_QUEUE = "cpu"

# The parameter a method reading a score at a threshold understands.
THRESHOLD = "threshold"
THRESHOLD_PARAM = Param(
    THRESHOLD, FLOAT, minimum=0.0, maximum=1.0,
    help="The score from which an answer reads as yes (blank: 0.5; a learned proxy: the "
         "threshold chosen on its development split).")


@dataclass
class Batch:
    """What one batch of one criterion is judged with. `run`: the proxy run (its `params`,
    `template`, `learned_proxy` and `study_id` are read); `backend`: the judge backend (None
    for a method without one); `kind`: the criterion's AnswerKind; `units`: slot ids; `texts`:
    per slot its reference, context, metadata, output and output_b texts and the ids
    output_id, output_b_id and item_id (proxies.runs.answers.unit_texts);
    `stored_values(output_ids)`: the stored metric values of those outputs, {output: {metric:
    value}} (what a learned proxy on metric features reads)."""

    run: Any
    backend: Any
    criterion: Any
    kind: AnswerKind
    units: Sequence[int]
    texts: Mapping[int, Mapping[str, Any]]
    stored_values: Callable[[Sequence[int]], Mapping[int, Mapping[str, float]]] = field(
        default=lambda outputs: {})


def _never(kind: AnswerKind) -> bool:
    return False


def _no_template_check(template: str) -> None:
    if template:
        raise ValueError("only the LATTE prompt is editable; rubric and DRPE prompts are "
                         "built from the criterion")


@dataclass(frozen=True)
class ProxyMethod:
    """One proxy method, declared once in its own module of `proxies.methods`."""

    #: The stored name (ProxyRun.method, the API, `run_proxy --method`, rater ids).
    name: str
    #: What a menu calls it.
    label: str
    #: What a stored answer's number (Judgment.numeric_value) is, in words for a report.
    score: str
    #: Whether it answers a criterion of this kind (for a learned proxy: of some learned kind;
    #: `answers_with` narrows it to the proxy at hand).
    answers: Callable[[AnswerKind], bool]
    #: Judges one batch: yields an `Answer` per unit (proxies.runs.answers calls it).
    answer: Callable[[Batch], Iterator[Answer]]
    #: The run parameters it understands, typed (the admin's inputs are built from them);
    #: anything else is refused by name.
    params: tuple[Param, ...]
    #: For a learned method: whether the learned proxy at hand (a LearnedProxy) answers a
    #: criterion of this kind.
    answers_with: Callable[[Any, AnswerKind], bool] | None = None
    #: Where it comes in menus and lists of methods (then by name).
    order: int = 100
    #: The rater it answers as (LLM_RATER or METRIC_RATER).
    rater: str = LLM_RATER
    #: Whether it answers with a trained learned proxy (no judge backend, no template).
    learned: bool = False
    #: Whether its prompts can be versioned with few-shot examples (JudgePromptVersion).
    versioned: bool = False
    #: The prompt template a run uses when it names none ("": built from the criterion).
    default_template: str = ""
    #: Raises ValueError for a template it cannot use ("" always passes).
    check_template: Callable[[str], None] = _no_template_check
    #: The few-shot block put before its prompts: (examples, template) -> text.
    fewshot: Callable[[Sequence[Any], str], str] | None = None
    #: Whether a few-shot example shows the people's binary reading (yes/no) instead of
    #: their canonical answer.
    example_reads_binary: bool = False
    #: Whether its answers on binary-reading kinds are a score (P(preserved)) read at a
    #: threshold (run parameter THRESHOLD; a threshold can be chosen for it).
    thresholded: bool = False
    #: On which kinds it answers the most likely level instead, never reading a threshold.
    answers_level: Callable[[AnswerKind], bool] = _never

    @property
    def param_names(self) -> frozenset[str]:
        return frozenset(param.name for param in self.params)

    def answers_for(self, kind: AnswerKind, learned: Any = None) -> bool:
        """Whether it answers a criterion of `kind` (with the learned proxy `learned`)."""
        if self.answers_with is not None:
            return self.answers_with(learned, kind)
        return self.answers(kind)

    def decides_at_threshold(self, kind: AnswerKind) -> bool:
        """Whether its answers on `kind` are its score read at a threshold."""
        return self.thresholded and not self.answers_level(kind)

    def queue(self, backend: Mapping[str, Any], *, gpu: bool = False) -> str:
        """The queue its batches go to: a local Hugging Face judge (or a learned proxy that
        needs one, `gpu`) on the GPU workers; a learned proxy otherwise on the CPU ones; a
        remote judge on the `llm` workers."""
        if self.learned:
            return GPU_QUEUE if gpu else CPU_QUEUE
        return GPU_QUEUE if backend.get("backend") == "hf" else LLM_QUEUE

    def __repr__(self) -> str:
        return f"<proxy method {self.name}>"


def decide(kind: AnswerKind, score: float, threshold: float) -> str:
    """The canonical answer for a P(preserved) score read at `threshold`: the kind's binary
    value (LATTE's reading of the severity scale: a preserved meaning is stored as 0, a lost
    one as 2)."""
    return kind.binary_value(score >= threshold)


# The threshold a judge applies when its run names none.
DEFAULT_THRESHOLD = 0.5


def threshold_of(run: Any, default: float = DEFAULT_THRESHOLD) -> float:
    return float(run.params.get(THRESHOLD, default))
