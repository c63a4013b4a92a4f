"""A synthetic "meaning preserved?" study whose labels depend on WER AND on meaning.

Each reference is a short spoken-style sentence built from a template with three content slots
(a verb, an adjective, a noun). Each reference gets a few outputs, each one edit of a kind:

label 1 (meaning preserved)
- "exact": the reference itself (WER 0).
- "function": one or two function-word edits (a filler inserted, "please"/"really" dropped,
  "the" -> "a"): WER > 0, meaning intact.
- "synonym": one or two content words replaced by a synonym ("couch" -> "sofa"); sometimes
  with a filler as well. Same WER as a wrong content word.

label 0 (meaning changed)
- "unrelated": one content word replaced by an unrelated word of the same class
  ("couch" -> "tractor"): the same WER as a synonym.
- "drop": the noun deleted (one deletion).
- "antonym": the adjective or verb replaced by its antonym ("big" -> "small"): one
  substitution that flips the meaning.
- "garbled": two or three content words replaced by unrelated words (high WER).

So WER alone cannot tell "synonym" from "unrelated" (both one substitution), and a
meaning-aware proxy is needed. Everything is seeded: the same arguments give the same study.
The groups are the reference texts (every output of a reference shares its group).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from proxies.learned import Example

# (word, synonyms, antonym or None)
VERBS: list[tuple[str, tuple[str, ...], str | None]] = [
    ("buy", ("purchase",), "sell"),
    ("start", ("begin",), "stop"),
    ("fix", ("repair", "mend"), "break"),
    ("find", ("locate",), "lose"),
    ("open", ("unlock",), "close"),
    ("clean", ("wash", "tidy"), "dirty"),
    ("keep", ("save", "store"), "discard"),
    ("remember", ("recall",), "forget"),
    ("bring", ("fetch",), "remove"),
    ("accept", ("take",), "refuse"),
    ("raise", ("lift",), "lower"),
    ("borrow", ("take out",), "lend"),
]
ADJECTIVES: list[tuple[str, tuple[str, ...], str | None]] = [
    ("big", ("large", "huge"), "small"),
    ("cheap", ("inexpensive",), "expensive"),
    ("quiet", ("silent",), "loud"),
    ("new", ("brand new",), "old"),
    ("clean", ("spotless",), "filthy"),
    ("warm", ("heated",), "cold"),
    ("fast", ("quick", "speedy"), "slow"),
    ("heavy", ("weighty",), "light"),
    ("comfortable", ("comfy", "cozy"), "uncomfortable"),
    ("safe", ("secure",), "dangerous"),
    ("full", ("filled",), "empty"),
    ("wide", ("broad",), "narrow"),
]
NOUNS: list[tuple[str, tuple[str, ...]]] = [
    ("couch", ("sofa",)),
    ("car", ("automobile", "vehicle")),
    ("movie", ("film",)),
    ("photo", ("picture", "photograph")),
    ("store", ("shop",)),
    ("jacket", ("coat",)),
    ("present", ("gift",)),
    ("medicine", ("medication",)),
    ("bag", ("sack",)),
    ("road", ("street",)),
    ("pants", ("trousers",)),
    ("phone", ("telephone", "mobile")),
    ("doctor", ("physician",)),
    ("house", ("home",)),
    ("trash can", ("garbage bin", "rubbish bin")),
    ("bike", ("bicycle",)),
]
# Unrelated words of each class: a replacement that changes what the sentence is about.
UNRELATED = {
    "verb": ["juggle", "paint", "bury", "swallow", "whistle", "freeze", "sing", "hunt",
             "sew", "climb"],
    "adjective": ["purple", "wooden", "bitter", "furry", "ancient", "frozen", "salty",
                  "striped", "hollow", "musical"],
    "noun": ["elephant", "violin", "pyramid", "banana", "volcano", "tractor", "umbrella",
             "pencil", "penguin", "carpet", "rocket", "sandwich"],
}
FILLERS = ["uh", "um", "so", "well", "okay"]
NAMES = ["Anna", "Peter", "my sister", "grandpa", "the neighbours", "Sarah", "my boss", "Tom",
         "our teacher", "Emma", "the kids", "David"]
WHEN = ["today", "tomorrow", "tonight", "this weekend", "on Friday", "next week",
        "this afternoon", "on Monday", "after lunch", "before dinner"]

# {verb} {adj} {noun} are the content slots; {name} and {when} make references distinct.
TEMPLATES = [
    "could you please {verb} the {adj} {noun} for {name} {when}",
    "I really want to {verb} a {adj} {noun} {when}",
    "{name} said we should {verb} the {adj} {noun} {when}",
    "please remember that {name} wants to {verb} the {adj} {noun}",
    "we need to {verb} the {adj} {noun} {when}",
    "do you think {name} will {verb} that {adj} {noun} {when}",
    "I told {name} to {verb} the {adj} {noun}",
    "let us {verb} the {adj} {noun} together {when}",
]

PRESERVED = ("exact", "function", "synonym")
CHANGED = ("unrelated", "drop", "antonym", "garbled")
# How often each meaning-changing kind is drawn. Antonyms are rare on purpose: embedding and
# BERTScore features barely see them (they are what only a trained pair classifier can learn),
# and the baselines must still reach test AUC > 0.9 on the whole study.
CHANGED_WEIGHTS = {"unrelated": 0.4, "drop": 0.25, "garbled": 0.2, "antonym": 0.15}


def _reference(rng: random.Random) -> tuple[str, dict[str, str]]:
    template = rng.choice(TEMPLATES)
    slots = {
        "verb": rng.randrange(len(VERBS)),
        "adj": rng.randrange(len(ADJECTIVES)),
        "noun": rng.randrange(len(NOUNS)),
    }
    words = {
        "verb": VERBS[slots["verb"]][0],
        "adj": ADJECTIVES[slots["adj"]][0],
        "noun": NOUNS[slots["noun"]][0],
        "name": rng.choice(NAMES),
        "when": rng.choice(WHEN),
    }
    return template.format(**words), {
        "template": template, **words,
        "verb_i": str(slots["verb"]), "adj_i": str(slots["adj"]), "noun_i": str(slots["noun"]),
    }


def _render(parts: dict[str, str]) -> str:
    text = parts["template"].format(**{k: parts[k] for k in ("verb", "adj", "noun", "name",
                                                               "when")})
    return " ".join(text.split())  # a dropped slot leaves a double space


def _synonym(parts: dict[str, str], slot: str, rng: random.Random) -> None:
    index = int(parts[f"{slot}_i"])
    table = {"verb": VERBS, "adj": ADJECTIVES, "noun": NOUNS}[slot]
    parts[slot] = rng.choice(table[index][1])


def _unrelated(parts: dict[str, str], slot: str, rng: random.Random) -> None:
    kind = {"verb": "verb", "adj": "adjective", "noun": "noun"}[slot]
    parts[slot] = rng.choice(UNRELATED[kind])


def _function_edits(text: str, rng: random.Random, n_edits: int) -> str:
    words = text.split()
    for _ in range(n_edits):
        options = ["filler"]
        if "please" in words:
            options.append("drop_please")
        if "really" in words:
            options.append("drop_really")
        if "the" in words:
            options.append("the_to_a")
        choice = rng.choice(options)
        if choice == "filler":
            words.insert(rng.choice([0, len(words)]), rng.choice(FILLERS))
        elif choice == "drop_please":
            words.remove("please")
        elif choice == "drop_really":
            words.remove("really")
        else:
            words[words.index("the")] = "a"
    return " ".join(words)


def make_output(reference_parts: dict[str, str], kind: str, rng: random.Random) -> str:
    """One output of `kind` (see the module doc) for a reference's parts."""
    parts = dict(reference_parts)
    if kind == "exact":
        return _render(parts)
    if kind == "function":
        return _function_edits(_render(parts), rng, rng.choice([1, 2]))
    if kind == "synonym":
        for slot in rng.sample(["verb", "adj", "noun"], rng.choice([1, 1, 2])):
            _synonym(parts, slot, rng)
        text = _render(parts)
        return _function_edits(text, rng, 1) if rng.random() < 0.3 else text
    if kind == "unrelated":
        _unrelated(parts, rng.choice(["verb", "adj", "noun"]), rng)
        return _render(parts)
    if kind == "drop":
        parts["noun"] = ""
        return _render(parts)
    if kind == "antonym":
        slot = rng.choice(["verb", "adj"])
        index = int(parts[f"{slot}_i"])
        table = VERBS if slot == "verb" else ADJECTIVES
        parts[slot] = table[index][2] or parts[slot]
        return _render(parts)
    if kind == "garbled":
        for slot in rng.sample(["verb", "adj", "noun"], rng.choice([2, 3])):
            _unrelated(parts, slot, rng)
        return _render(parts)
    raise ValueError(f"unknown output kind {kind!r}")


def _weighted_sample(kinds: list[str], k: int, rng: random.Random) -> list[str]:
    """k distinct kinds drawn with CHANGED_WEIGHTS, without replacement."""
    left = list(kinds)
    chosen = []
    for _ in range(k):
        pick = rng.choices(left, weights=[CHANGED_WEIGHTS[x] for x in left])[0]
        chosen.append(pick)
        left.remove(pick)
    return chosen


def make_synthetic_study(
    n_references: int = 120,
    outputs_per_reference: int = 3,
    *,
    seed: int = 0,
    kinds: Sequence[str] = PRESERVED + CHANGED,
) -> list[Example]:
    """`n_references` distinct references x `outputs_per_reference` labelled outputs.

    Each reference's outputs have distinct kinds, drawn so that about half of all outputs are
    meaning-preserving. `Example.key` is (reference index, output index, kind).
    """
    if outputs_per_reference > len(kinds):
        raise ValueError("outputs_per_reference exceeds the number of output kinds")
    rng = random.Random(seed)
    preserved = [k for k in kinds if k in PRESERVED]
    changed = [k for k in kinds if k in CHANGED]
    seen: set[str] = set()
    examples: list[Example] = []
    attempts = 0
    while len(seen) < n_references:
        attempts += 1
        if attempts > 100 * n_references:
            raise ValueError(f"cannot build {n_references} distinct references")
        reference, parts = _reference(rng)
        if reference in seen:
            continue
        index = len(seen)
        seen.add(reference)
        # Alternate which class gets the extra output so that the classes stay balanced.
        n_pos = outputs_per_reference // 2 + (index % 2 if outputs_per_reference % 2 else 0)
        n_pos = min(n_pos, len(preserved))
        chosen = rng.sample(preserved, n_pos) + _weighted_sample(
            changed, min(outputs_per_reference - n_pos, len(changed)), rng
        )
        for j, kind in enumerate(chosen):
            output = make_output(parts, kind, rng)
            examples.append(Example(
                reference=reference, output=output, label=int(kind in PRESERVED),
                key=(index, j, kind),
            ))
    return examples
