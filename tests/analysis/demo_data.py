"""The demo studies with simulated, deterministic raters: what a new user's first study
looks like once raters, metrics and an LLM judge have been through it. Used to render the
report that a reviewer reads (tests/analysis/test_report_render.py).

The simulated humans judge from the word error rate of each output with rater noise; the
pairwise raters prefer one summariser, with a position bias towards A; the translators of the
ESA demo mark where a translation departs from the better system's and score it from that.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import jiwer

from annotation.services import judgment_submit
from evalstudy.importers import study_import_spec
from evalstudy.models import AssignmentSlot, Output, Study
from evalstudy.services import assignment_next, study_open
from evalstudy.spec.study import parse_study_spec
from tests.factories import invite

DEMO = Path(__file__).resolve().parents[2] / "demo"


def load_demo(name: str) -> Study:
    path = DEMO / name
    spec = parse_study_spec(path.read_text(encoding="utf-8"), str(path))
    study, _ = study_import_spec(spec=spec, file_name=str(path))
    return study_open(study=study)


def _texts(slot: AssignmentSlot) -> tuple[str, str, str]:
    if slot.kind == AssignmentSlot.Kind.TARGET:
        return slot.output.item.reference, slot.output.text, (
            slot.output_b.text if slot.output_b_id else "")
    control = slot.calibration_item or slot.attention_check
    return control.reference, control.text, control.text_b


def _severity(reference: str, text: str, rng: random.Random, leniency: float) -> int:
    error = jiwer.wer(reference, text) if reference.strip() else 0.0
    noisy = error + rng.gauss(0.0, 0.15) - leniency
    return 0 if noisy < 0.08 else 1 if noisy < 0.22 else 2


def simulate_asr_raters(study: Study, *, seed: int = 7) -> int:
    """Fill every seat of the ASR demo; returns the number of raters. Attention checks are
    answered correctly (their expected answers), everything else from the WER."""
    rng = random.Random(seed)
    raters = 0
    while study.assignments.filter(rater__isnull=True, source="design").exists():
        rater = invite(study, kind="slp", display_name=f"sim-slp-{raters + 1}")
        leniency = rng.gauss(0.0, 0.08)
        raters += 1
        while (slot := assignment_next(study=study, rater=rater)) is not None:
            control = slot.calibration_item or slot.attention_check
            if control is not None:
                answers = {k: str(v) for k, v in control.expected.items()}
                answers.setdefault("usable", "yes")
                answers.setdefault("severity", "0")
            else:
                reference, text, _ = _texts(slot)
                level = _severity(reference, text, rng, leniency)
                answers = {"severity": str(level), "usable": "yes" if level < 2 else "no"}
                if level == 2:
                    answers["note"] = "meaning changed"
            judgment_submit(rater=rater, slot_id=slot.pk, answers=answers)
    return raters


def simulate_pairwise_raters(study: Study, *, seed: int = 11, favourite: str = "summariser-b",
                             position_bias: float = 0.1) -> int:
    """Fill every seat of the pairwise demo: raters prefer `favourite` 70% of the time, A a
    little more often than B, and say tie now and then when the study allows it."""
    rng = random.Random(seed)
    raters = 0
    while study.assignments.filter(rater__isnull=True, source="design").exists():
        rater = invite(study, kind="crowd", display_name=f"sim-crowd-{raters + 1}")
        raters += 1
        while (slot := assignment_next(study=study, rater=rater)) is not None:
            control = slot.calibration_item or slot.attention_check
            if control is not None:
                answers = {k: str(v) for k, v in control.expected.items()}
            else:
                a_is_favourite = slot.output.system.name == favourite
                p_a = (0.7 if a_is_favourite else 0.3) + position_bias
                answers = {"preference": "A" if rng.random() < p_a else "B"}
            judgment_submit(rater=rater, slot_id=slot.pk, answers=answers)
    return raters


def _differing_words(text: str, better: str) -> list[tuple[int, int]]:
    """Character spans of the words of `text` that the better translation does not share
    (difflib on words): where a reader would find the errors."""
    import difflib

    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    tokens = [text[a:b].strip(".,").lower() for a, b in words]
    others = [w.strip(".,").lower() for w in better.split()]
    spans = []
    matcher = difflib.SequenceMatcher(a=tokens, b=others, autojunk=False)
    for tag, i1, i2, _j1, _j2 in matcher.get_opcodes():
        if tag in ("replace", "delete") and i2 > i1:
            spans.append((words[i1][0], words[i2 - 1][1]))
        elif tag == "insert" and words:  # a word left out: the word before it carries it
            at = max(i1 - 1, 0)
            spans.append(words[at])
    merged: list[tuple[int, int]] = []
    for start, end in sorted(set(spans)):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def simulate_esa_raters(study: Study, *, seed: int = 5, best: str = "mt-large") -> int:
    """Fill every seat of the ESA demo: each rater marks most of the words where a translation
    departs from the best system's (critical where a negation is lost, major for a changed
    word, minor for word order and articles), sometimes misses one or marks a word too many,
    and scores 0-100 from the errors with their own leniency."""
    from evalstudy import criteria as rules

    rng = random.Random(seed)
    raters = 0
    best_texts = dict(Output.objects.filter(item__study=study, system__name=best)
                      .values_list("item_id", "text"))
    while study.assignments.filter(rater__isnull=True, source="design").exists():
        rater = invite(study, kind="expert", display_name=f"sim-translator-{raters + 1}")
        leniency = rng.gauss(0.0, 8.0)
        raters += 1
        while (slot := assignment_next(study=study, rater=rater)) is not None:
            text = slot.output.text
            spans, penalty = [], 0.0
            for start, end in _differing_words(text, best_texts[slot.output.item_id]):
                if rng.random() < 0.15:
                    continue  # missed
                words = len(text[start:end].split())
                severity = ("critical" if "not" in best_texts[slot.output.item_id].split()
                            and "not" not in text.split() else
                            "major" if words > 1 or rng.random() < 0.3 else "minor")
                category = "Accuracy" if severity != "minor" else rng.choice(
                    ["Fluency", "Style", "Terminology"])
                spans.append({"start": start, "end": end, "category": category,
                              "severity": severity})
                penalty += {"minor": 6, "major": 20, "critical": 55}[severity]
            score = max(0, min(100, round(96 - penalty + leniency + rng.gauss(0, 6))))
            judgment_submit(rater=rater, slot_id=slot.pk, answers={
                "errors": json.dumps({"spans": spans,
                                      "text_sha256": rules.text_sha256(text)}),
                "quality": str(score)})
    return raters


def simulate_tuple_raters(study: Study, *, worths: dict[str, float], seed: int = 3) -> int:
    """Fill every seat of a ranking or best-worst study: each rater orders the outputs shown
    by the systems' log-worths plus Gumbel noise (Plackett-Luce rankings) and answers with the
    ranking, or its first and last as best and worst."""
    from evalstudy import criteria as rules

    rng = random.Random(seed)
    key = study.criteria.get().key
    systems = dict(Output.objects.filter(item__study=study).values_list("id", "system__name"))
    raters = 0
    while study.assignments.filter(rater__isnull=True, source="design").exists():
        rater = invite(study, kind="crowd", display_name=f"sim-ranker-{raters + 1}")
        raters += 1
        while (slot := assignment_next(study=study, rater=rater)) is not None:
            letters = rules.LETTERS[:len(slot.shown_outputs)]
            noisy = {letter: worths[systems[pk]] - math.log(-math.log(rng.random()))
                     for letter, pk in zip(letters, slot.shown_outputs, strict=True)}
            order = sorted(letters, key=lambda letter: -noisy[letter])
            if study.design == "ranking":
                answers = {f"{key}__{letter}": str(rank)
                           for rank, letter in enumerate(order, start=1)}
            else:
                answers = {f"{key}__best": order[0], f"{key}__worst": order[-1]}
            judgment_submit(rater=rater, slot_id=slot.pk, answers=answers)
    return raters
