"""The blindness audit's core (evalstudy.blindness): whole words, Unicode, case, aliases,
phrases, names too ordinary to search for, and boilerplate found statistically."""

from __future__ import annotations

import random

import pytest

from evalstudy.blindness import (
    ALIAS,
    BOILERPLATE,
    BUILT_IN,
    STUDY_TERM,
    SYSTEM_NAME,
    BoilerplateRule,
    OutputText,
    SystemNames,
    Term,
    aliases_of,
    blindness_audit,
    identity_terms_clean,
    name_skip_reason,
    study_terms,
)

SYSTEMS = [SystemNames("Zephyrix", ("zx-chat",)), SystemNames("Orbitalis")]


def audit_of(*texts: str, systems=SYSTEMS, terms=(), **kwargs):
    outputs = [OutputText(k, systems[k % len(systems)].name, text, f"i{k}")
               for k, text in enumerate(texts)]
    return blindness_audit(outputs, systems, terms, boilerplate=None, **kwargs)


def found(audit) -> list[tuple[int, str, str, str]]:
    return [(hit.output, hit.term, hit.kind, hit.match) for hit in audit.hits]


def test_whole_words_only():
    audit = audit_of("I was bombarded with questions.", "Zephyrixes and preZephyrix",
                     "The Bard of Avon.", terms=study_terms(["Bard"]))
    assert found(audit) == [(2, "Bard", STUDY_TERM, "Bard")]


def test_a_term_with_punctuation_stops_at_word_edges():
    audit = audit_of("GPT-40 is not a model.", "We used GPT-4, then gpt-4o.",
                     terms=study_terms(["GPT-4"]), built_in=False)
    assert found(audit) == [(1, "GPT-4", STUDY_TERM, "GPT-4")]


def test_case_and_unicode_forms_match():
    audit = audit_of(
        "ＺＥＰＨＹＲＩＸ here",  # full-width letters: NFKC folds them
        "zephyrix",
        "Zeph\u200byrix with a zero-width space inside",
        "ZEPHYRİX",  # dotted capital I does not casefold to i: no match
    )
    assert [(o, kind, match) for o, _, kind, match in found(audit)] == [
        # Snippets quote the NFKC form (what the text reads as).
        (0, SYSTEM_NAME, "ZEPHYRIX"), (1, SYSTEM_NAME, "zephyrix"),
        (2, SYSTEM_NAME, "Zeph\u200byrix")]
    assert all(hit.names_system == "Zephyrix" for hit in audit.hits)


def test_non_latin_terms_and_case_folding():
    audit = audit_of("Die STRASSE und die Straße", "Модель ГИГАЧАТ ответила",
                     terms=study_terms(["straße", "гигачат"]), built_in=False)
    # casefold: ß -> ss, so both spellings match the one term.
    assert [(o, match) for o, _, _, match in found(audit)] == [
        (0, "STRASSE"), (0, "Straße"), (1, "ГИГАЧАТ")]


def test_aliases_are_searched_and_name_their_system():
    audit = audit_of("Hi, this is ZX-Chat speaking.", "zx chat")
    assert found(audit) == [(0, "zx-chat", ALIAS, "ZX-Chat")]
    assert audit.hits[0].names_system == "Zephyrix"
    # The hit is in an output of Zephyrix (output 0): a name in another system's output is
    # reported under the output's system.
    assert audit.hits[0].system == "Zephyrix"


def test_phrases_match_across_punctuation_words_do_not():
    terms = study_terms([{"term": "made by Acme", "phrase": True}, "Acme Labs"])
    audit = audit_of("This was made by: ACME.", "Acme  Labs\nreport", "Acme-Labs report",
                     terms=terms, built_in=False)
    assert found(audit) == [(0, "made by Acme", STUDY_TERM, "made by: ACME"),
                            (1, "Acme Labs", STUDY_TERM, "Acme Labs")]


def test_built_in_self_descriptions_and_vendors():
    audit = audit_of("As an AI-language model, I cannot browse.",
                     "I am a large language model trained by OpenAI.")
    assert [(o, term, kind) for o, term, kind, _ in found(audit)] == [
        (0, "as an AI language model", BUILT_IN),
        (1, "I am a large language model", BUILT_IN), (1, "OpenAI", BUILT_IN)]


def test_ordinary_vendor_words_alone_are_not_hits():
    audit = audit_of("I searched Google and read about Claude Monet, a llama and a whisper.",
                     "Gemini is a star sign; the mistral blows; Meta-analysis shows.")
    assert audit.hits == []
    audit = audit_of("I was trained by Google.", "Built on Llama-2 by Meta AI.")
    assert [term for _, term, _, _ in found(audit)] == ["trained by Google", "Llama 2",
                                                        "Meta AI"]


def test_overlapping_matches_count_once_the_longest():
    audit = audit_of("Try GPT-4o today.")
    assert found(audit) == [(0, "GPT-4o", BUILT_IN, "GPT-4o")]


@pytest.mark.parametrize(("name", "skipped"), [
    ("base", True), ("baseline", True), ("v2", True), ("T5", True), ("2024", True),
    ("system A", True), ("new model", True), ("--", True), ("v1.0", True), ("Model", True),
    ("Zephyrix", False), ("gpt-4", False), ("llama-2-base", False), ("mT5-xl", False),
    ("zx-chat", False), ("base-v2", False),
])
def test_ambiguous_names_are_skipped_with_a_reason(name, skipped):
    assert (name_skip_reason(name) is not None) is skipped


def test_skipped_names_do_not_flood_hits():
    systems = [SystemNames("base", ("B",)), SystemNames("Orbitalis")]
    audit = audit_of("The base of the tower.", "B is for base.", systems=systems)
    assert audit.hits == []
    assert [(s.term, s.kind, s.system) for s in audit.skipped] == [
        ("base", SYSTEM_NAME, "base"), ("B", ALIAS, "base")]
    assert "ordinary word" in audit.skipped[0].reason
    assert "shorter than 3" in audit.skipped[1].reason


def test_a_name_shared_by_two_systems_is_reported_once():
    systems = [SystemNames("Zephyrix"), SystemNames("Orbitalis", ("zephyrix",))]
    audit = audit_of("zephyrix", systems=systems)
    assert [(h.kind, h.names_system) for h in audit.hits] == [(SYSTEM_NAME, "Zephyrix")]
    assert audit.skipped[0].system == "Orbitalis"


def test_snippets_are_plain_text_around_the_hit():
    text = "x" * 100 + " <b>Zephyrix</b>\n\n  says " + "y" * 100
    hit = audit_of(text).hits[0]
    assert hit.match == "Zephyrix"
    assert hit.before.startswith("…") and hit.before.endswith(" <b>")
    assert hit.after.startswith("</b> says ") and hit.after.endswith("…")
    assert "\n" not in hit.snippet


def test_clean_outputs_have_no_hits():
    rng = random.Random(7)
    words = ["the", "a", "summary", "of", "meeting", "discussed", "budget", "plan", "team",
             "agreed", "next", "steps"]
    texts = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(200)]
    outputs = [OutputText(k, ("Zephyrix", "Orbitalis")[k % 2], t) for k, t in enumerate(texts)]
    audit = blindness_audit(outputs, SYSTEMS)
    assert audit.hits == [] and audit.boilerplate == []
    assert audit.flagged_per_system() == {"Zephyrix": 0, "Orbitalis": 0}


def _signed_study(n_items=40, signature=" -- Sent with care by the Nimbus team."):
    rng = random.Random(11)
    vocab = [f"w{i}" for i in range(400)]
    outputs, k = [], 0
    for item in range(n_items):
        shared = [rng.choice(vocab) for _ in range(25)]
        for system in ("Zephyrix", "Orbitalis", "Quantera"):
            k += 1
            words = shared[:]
            rng.shuffle(words)
            text = " ".join(words) + "."
            if system == "Orbitalis":
                text += signature
            outputs.append(OutputText(k, system, text, f"i{item}"))
    return outputs


def test_boilerplate_of_one_system_is_found_with_its_shares():
    outputs = _signed_study()
    systems = [SystemNames(n) for n in ("Zephyrix", "Orbitalis", "Quantera")]
    audit = blindness_audit(outputs, systems)
    assert [(b.system, b.phrase, b.count) for b in audit.boilerplate] == [
        ("Orbitalis", "sent with care by the nimbus team [end]", 40)]
    assert audit.boilerplate[0].shares == {"Zephyrix": 0.0, "Orbitalis": 1.0, "Quantera": 0.0}
    hits = [h for h in audit.hits if h.kind == BOILERPLATE]
    assert len(hits) == 40 and {h.system for h in hits} == {"Orbitalis"}
    assert hits[0].match == "Sent with care by the Nimbus team"
    assert hits[0].shares["Orbitalis"] == 1.0
    assert audit.flagged_per_system() == {"Zephyrix": 0, "Orbitalis": 40, "Quantera": 0}


def test_boilerplate_needs_a_large_share_and_rarity_elsewhere():
    systems = [SystemNames(n) for n in ("Zephyrix", "Orbitalis", "Quantera")]
    outputs = _signed_study()
    # The signature on 8 of 40 Orbitalis outputs (20%) is under the 25% share.
    few = [o if o.system != "Orbitalis" or int(o.item[1:]) < 8
           else OutputText(o.id, o.system, o.text.split(" -- ")[0], o.item) for o in outputs]
    assert blindness_audit(few, systems).boilerplate == []
    # The same signature on 3 Zephyrix outputs too (7.5% > 2%): not one system's any more.
    shared = [OutputText(o.id, o.system, o.text + " -- Sent with care by the Nimbus team.",
                         o.item) if o.system == "Zephyrix" and int(o.item[1:]) < 3 else o
              for o in outputs]
    assert blindness_audit(shared, systems).boilerplate == []
    # A lower bar finds the 20% one.
    assert blindness_audit(few, systems, boilerplate=BoilerplateRule(min_share=0.2)).boilerplate


def test_boilerplate_needs_two_systems():
    outputs = [o for o in _signed_study() if o.system == "Orbitalis"]
    assert blindness_audit(outputs, [SystemNames("Orbitalis")]).boilerplate == []


def test_leading_words_are_boilerplate_too():
    outputs = [OutputText(o.id, o.system, ("Sure! Here you go: " if o.system == "Quantera"
                                           else "") + o.text.split(" -- ")[0], o.item)
               for o in _signed_study()]
    audit = blindness_audit(outputs, [SystemNames(n) for n in ("Zephyrix", "Orbitalis",
                                                              "Quantera")])
    assert [(b.system, b.phrase) for b in audit.boilerplate] == [
        ("Quantera", "[start] sure here you go")]


def test_identity_terms_are_checked_and_cleaned():
    assert identity_terms_clean(["  Acme ", {"term": "made by Acme", "phrase": True},
                                 {"term": "Nimbus", "phrase": False}]) == [
        "Acme", {"term": "made by Acme", "phrase": True}, "Nimbus"]
    assert identity_terms_clean(None) == []
    for bad, message in [("Acme", "expected a list"), ([""], "term 1: blank"),
                         ([3], "term 1: expected text"), (["***"], "no letter or digit"),
                         (["Acme", "ACME"], "term 2: 'ACME' is the same as term 1"),
                         ([{"term": "x", "phrase": "yes"}], "phrase must be true or false"),
                         ([{"word": "x"}], "term 1: write a word"),
                         (["x" * 201], "longer than 200")]:
        with pytest.raises(ValueError, match=message):
            identity_terms_clean(bad)


def test_aliases_from_metadata():
    assert aliases_of({"aliases": ["zx", "ZX-Chat"]}) == (["zx", "ZX-Chat"], None)
    assert aliases_of({"aliases": "zx-chat"}) == (["zx-chat"], None)
    assert aliases_of({}) == ([], None)
    assert aliases_of({"aliases": {"a": 1}})[1] is not None


def test_summary_counts_per_system_and_term():
    audit = audit_of("Zephyrix here", "clean", "Zephyrix again, zephyrix", "clean too")
    summary = audit.summary()
    assert summary["flagged_outputs"] == 2 and summary["outputs"] == 4
    assert summary["systems"] == [
        {"system": "Zephyrix", "outputs": 2, "flagged_outputs": 2, "share": 1.0},
        {"system": "Orbitalis", "outputs": 2, "flagged_outputs": 0, "share": 0.0}]
    assert summary["terms"] == [{"system": "Zephyrix", "term": "Zephyrix",
                                 "kind": SYSTEM_NAME, "names_system": "Zephyrix",
                                 "outputs": 2, "share": 1.0}]
    assert len(audit.hits) == 3


def test_study_terms_read_stored_entries():
    assert study_terms(["Acme", {"term": "by Acme", "phrase": True}, 5, None]) == [
        Term("Acme", STUDY_TERM), Term("by Acme", STUDY_TERM, phrase=True)]
