"""Judging methods: templates, LATTE, rubric expected scores, DRPE roles and votes (the LLM is
the scripted OpenAI-compatible server on loopback; role deduplication uses the real MiniLM)."""

import math
import re

import pytest

from proxies.judges.backends.openai import OpenAICompatibleBackend
from proxies.judges.methods import (
    LATTE_TEMPLATE,
    STATIC_ROLES,
    Role,
    deduplicate_roles,
    drpe_judge,
    drpe_roles,
    dynamic_roles,
    latte_judge,
    latte_prompts,
    parse_roles,
    parse_votes,
    render_template,
    rubric_judge,
    rubric_prompt,
    sentence_embedder,
    validate_template,
)
from tests.proxies.judges.fake_openai import FakeOpenAI, Reply, answer, yes_no_reply


def backend_for(server, **kwargs):
    return OpenAICompatibleBackend(server.base_url, "judge-model", backoff_s=0.01, **kwargs)


# -- templates --------------------------------------------------------------------------------


def test_latte_template_is_the_papers_format():
    prompt = render_template(LATTE_TEMPLATE, reference="How large is that file?",
                             output="How large is a funnel?")
    assert prompt == ("Ground truth: {How large is that file?}. Transcription: {How large is a "
                      "funnel?}. Transcript preserves the meaning of the ground truth: {")


def test_render_template_errors_name_the_field():
    with pytest.raises(ValueError, match=r"needs \{output\}"):
        render_template("Ref {reference} out {output}", reference="r")
    with pytest.raises(ValueError, match=r"unknown field\(s\) \{refrence\}"):
        render_template("{refrence} {output}", allowed={"reference", "output"}, output="o")
    with pytest.raises(ValueError, match="not allowed"):
        render_template("{output.__class__}", output="o")
    with pytest.raises(ValueError, match="not allowed"):
        render_template("{output!r}", output="o")
    with pytest.raises(ValueError, match="malformed"):
        render_template("Answer: {", output="o")
    with pytest.raises(ValueError, match=r"must contain \{output\}"):
        validate_template("{reference}", {"reference", "output"}, required=("output",))
    # Values are inserted as text, braces in them included; unused fields are ignored.
    assert render_template("[{output}]", output="{x}", context="c") == "[{x}]"


# -- LATTE --------------------------------------------------------------------------------------


def test_latte_judge_over_http():
    """A scripted judge: P(yes) 0.9 when the transcription equals the ground truth."""
    def respond(request):
        reference, output = re.findall(r"\{([^{}]*)\}", request.prompt)[:2]
        return yes_no_reply(request, 0.9 if reference == output else 0.2)

    pairs = [("the cat sat", "the cat sat"), ("how large is that file", "how large is a funnel")]
    with FakeOpenAI(respond) as server:
        results = latte_judge(backend_for(server), pairs)
    assert [round(r.p_yes, 6) for r in results] == [0.9, 0.2]
    assert server.requests[0].body["messages"][0]["content"].startswith("Ground truth: {")


def test_latte_custom_template_is_validated():
    with pytest.raises(ValueError, match=r"unknown field\(s\) \{speaker\}"):
        latte_prompts([("a", "b")], template="{speaker}: {output}")
    assert latte_prompts([("a", "b")], template="Is '{output}' the same as '{reference}'?") == [
        "Is 'b' the same as 'a'?"]


# -- rubric -------------------------------------------------------------------------------------


SCALE = {1: "Very poor", 2: "Poor", 3: "Fair", 4: "Good", 5: "Excellent"}


def test_rubric_prompt_holds_every_part():
    prompt = rubric_prompt(criterion="Fluency", definition="Reads like natural English.",
                           scale=SCALE, reference="the ref", context="the ctx",
                           output="the output")
    for part in ("Criterion: Fluency", "Definition: Reads like natural English.",
                 "1 = Very poor", "5 = Excellent", "Reference: the ref", "Context: the ctx",
                 "Output: the output", "Answer with one of 1, 2, 3, 4, 5"):
        assert part in prompt


def test_rubric_expected_score_from_logprobs():
    probs = {"1": 0.05, "2": 0.1, "3": 0.2, "4": 0.4, "5": 0.25}

    def respond(request):
        if "Output: plain" in request.prompt:
            return answer(request, "2", logprobs=False)  # a server without log-probabilities
        return answer(request, "4", top=[{k: math.log(v) for k, v in probs.items()}])

    with FakeOpenAI(respond) as server:
        scored, parsed = rubric_judge(backend_for(server), ["good text", "plain"],
                                      criterion="Fluency", scale=SCALE,
                                      definition="Reads like natural English.")
    assert scored.expected == pytest.approx(sum(int(k) * v for k, v in probs.items()))
    assert scored.answer == 4 and scored.probs == pytest.approx(probs)
    assert scored.completion.source == "logprobs"
    assert parsed.expected == 2.0 and parsed.answer == 2
    assert parsed.completion.source == "parsed"


# -- DRPE roles ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "Here are four readers:\n1. **Legal System User**: people who follow court cases.\n"
    "2. **Celebrity Gossip User** - fans of celebrity news.\n"
    "3) Film Critic: cares about the actors' careers.\n- Student: wants a short overview.",
    '[{"type": "Legal System User", "description": "people who follow court cases"}, '
    '{"type": "Celebrity Gossip User", "description": "fans of celebrity news"}, '
    '{"type": "Film Critic", "description": "cares about the actors careers"}, '
    '"Student: wants a short overview"]',
    "User type: Legal System User, User description: people who follow court cases\n"
    "User type: Celebrity Gossip User; User description: fans of celebrity news\n"
    "Type: Film Critic\nDescription: cares about the actors careers\n"
    "Type: Student\nDescription: wants a short overview",
    "<Legal System User, people who follow court cases>\n<Celebrity Gossip User, fans>\n"
    "<Film Critic, cares about careers>\n<Student, wants a short overview>\n"
    "<Student, a duplicate type>",
])
def test_parse_roles_accepts_the_usual_shapes(text):
    roles = parse_roles(text, limit=4)
    assert [r.type for r in roles] == ["Legal System User", "Celebrity Gossip User",
                                       "Film Critic", "Student"]
    assert all(r.description and r.dynamic for r in roles)


def test_dynamic_roles_from_the_llm():
    reply = ("Sure! Here are the readers:\n1. **Amber Heard Fans User**: supporters of Heard.\n"
             "2. **Johnny Depp Fans User**: supporters of Depp.\n3. **Celebrity Gossip User**: "
             "follows celebrity news.\n4. **Legal System User**: interested in the trial.\n"
             "5. **Extra**: one too many.")
    with FakeOpenAI(lambda r: answer(r, reply)) as server:
        roles = dynamic_roles(backend_for(server), "An article about a trial.", k=4)
    assert [r.type for r in roles] == ["Amber Heard Fans User", "Johnny Depp Fans User",
                                       "Celebrity Gossip User", "Legal System User"]
    assert "An article about a trial." in server.requests[0].prompt
    assert "exactly 4 lines" in server.requests[0].prompt


def test_deduplicate_roles_with_minilm():
    embed = sentence_embedder(device="cpu")
    roles = [
        *STATIC_ROLES,
        Role("Critic", "These people check fluent writing, clear sentences and good wording "
                       "in the summary.", dynamic=True),
        Role("Sports Fan", "Follows football closely and wants match statistics.", dynamic=True),
        Role("Football Fan", "Follows football closely and wants the match statistics.",
             dynamic=True),
        Role("Lawyer", "Checks whether the legal facts of the trial are reported correctly.",
             dynamic=True),
    ]
    kept = deduplicate_roles(roles, embed)
    types = [r.type for r in kept]
    assert len(kept) == 5, types
    assert types.count("Critic") == 1
    assert ("Sports Fan" in types) != ("Football Fan" in types)
    assert {"General Public", "News Author", "Lawyer"} <= set(types)
    # A tighter radius keeps everything; the original order is preserved.
    assert deduplicate_roles(roles, embed, eps=0.001) == roles
    # The closest to the cluster centre is kept, whichever comes first.
    pair = [roles[5], roles[4]]
    centre_pick = deduplicate_roles(pair, embed)
    assert len(centre_pick) == 1 and centre_pick == deduplicate_roles(pair[::-1], embed)


def test_drpe_roles_adds_dynamic_roles_and_removes_duplicates():
    reply = ("1. Critic: These people check fluent writing, clear sentences and good wording in "
             "the summary.\n2. Football Fan: follows football closely and wants statistics.")
    with FakeOpenAI(lambda r: answer(r, reply)) as server:
        roles = drpe_roles(backend_for(server), "A match report.", k=2,
                           embed=sentence_embedder(device="cpu"))
    assert [r.type for r in roles].count("Critic") == 1
    assert [r.type for r in roles][-1] == "Football Fan" and len(roles) == 4


# -- DRPE votes ---------------------------------------------------------------------------------


def _shown(prompt):
    a = re.search(r"Summary A: (.*?)\n\nSummary B:", prompt, re.S).group(1)
    b = re.search(r"Summary B: (.*?)\n\nThe following", prompt, re.S).group(1)
    n = int(re.search(r"The following (\d+) people", prompt).group(1))
    return a, b, n


def _votes_reply(request, choices, confidences=None):
    """One numbered line per role; each line's tokens get log(confidence)."""
    _a, _b, n = _shown(request.prompt)
    confidences = confidences or [0.9] * n
    lines = [f"{i + 1}. Summary {choices[i]} - reason number {i + 1}" for i in range(n)]
    tokens = []
    for i, line in enumerate(lines):
        text = line + ("\n" if i < n - 1 else "")
        tokens += [(t, math.log(confidences[i])) for t in re.findall(r"\s*\S+\s*", text)]
    return answer(request, "".join(t for t, _ in tokens), token_logprobs=tokens)


ROLES = [*STATIC_ROLES, Role("Student", "Wants a short overview.", dynamic=True)]
SHORT = "The FBI offers a reward."
LONG = "The FBI offers a reward of up to $10,000 for information on the missing woman."


def test_drpe_position_bias_cancels_out():
    with FakeOpenAI(lambda r: _votes_reply(r, ["A"] * _shown(r.prompt)[2])) as server:
        result = drpe_judge(backend_for(server), ROLES, "An article.", LONG, SHORT)
    assert server.hits == 2
    assert result.p_a_by_order == {"AB": pytest.approx(1.0), "BA": pytest.approx(0.0)}
    assert result.p_a == pytest.approx(0.5) and result.winner == "tie"
    assert result.position_consistent is False
    assert len(result.votes) == 2 * len(ROLES)
    assert {v.choice for v in result.votes if v.order == "BA"} == {"B"}
    assert {v.shown_choice for v in result.votes} == {"A"}


@pytest.mark.parametrize(("text_a", "text_b", "winner", "p_a"),
                         [(LONG, SHORT, "A", 1.0), (SHORT, LONG, "B", 0.0)])
def test_drpe_longer_preferring_judge_is_position_consistent(text_a, text_b, winner, p_a):
    def respond(request):
        a, b, n = _shown(request.prompt)
        return _votes_reply(request, ["A" if len(a) > len(b) else "B"] * n)

    with FakeOpenAI(respond) as server:
        result = drpe_judge(backend_for(server), ROLES, "An article.", text_a, text_b)
    assert result.winner == winner and result.p_a == pytest.approx(p_a)
    assert result.position_consistent is True
    assert result.weighting == {"AB": "role-tokens", "BA": "role-tokens"}
    assert all(v.reason.startswith("reason number") for v in result.votes)
    assert "Article: An article." in server.requests[0].prompt


def test_drpe_votes_are_weighted_by_their_confidence():
    """Roles 1-2 prefer the longer text with confidence 0.9; roles 3-4 the shorter with 0.3."""
    def respond(request):
        a, b, _n = _shown(request.prompt)
        longer, shorter = ("A", "B") if len(a) > len(b) else ("B", "A")
        return _votes_reply(request, [longer, longer, shorter, shorter], [0.9, 0.9, 0.3, 0.3])

    with FakeOpenAI(respond) as server:
        result = drpe_judge(backend_for(server), ROLES, "", LONG, SHORT)
    assert result.p_a == pytest.approx(1.8 / 2.4)  # not the unweighted 0.5
    assert result.winner == "A" and result.position_consistent
    weights = sorted({round(v.weight, 6) for v in result.votes})
    assert weights == [0.3, 0.9]
    assert "Article:" not in server.requests[0].prompt  # no context, no article block
    assert result.usage["requests"] == 2 and result.usage["tokens_out"] > 0


def test_drpe_without_logprobs_counts_votes_equally_and_reports_failures():
    def respond(request):
        reply = _votes_reply(request, ["B", "A", "A", "A"])
        text = reply.body["choices"][0]["message"]["content"]
        return answer(request, text, logprobs=False)

    with FakeOpenAI(respond, script=[Reply(400, {"error": "context too long"})]) as server:
        result = drpe_judge(backend_for(server, concurrency=1), ROLES, "ctx", LONG, SHORT)
    assert result.weighting == {"BA": "uniform"}
    assert result.p_a_by_order["AB"] is None and any("context too long" in e
                                                     for e in result.errors)
    # Order BA shows SHORT as A: roles 2-4 vote for SHORT (original B), role 1 for LONG.
    assert result.p_a == pytest.approx(0.25) and result.winner == "B"
    assert result.position_consistent is False


def test_parse_votes_tolerates_formats():
    text = ("1. General Public: Summary B - it gives the reward amount\n"
            "**2.** Summary A, because it is shorter\n"
            "Role 4: I pick summary 2. Reason: more complete\n"
            "9. Summary A - a role that does not exist")
    votes = parse_votes(text, 4)
    assert {k: v[0] for k, v in votes.items()} == {0: "B", 1: "A", 3: "B"}
    assert votes[0][1] == "it gives the reward amount"
    assert votes[1][1] == "it is shorter"
    assert votes[3][1] == "more complete"
    unnumbered = parse_votes("Summary A - clear\nSummary B - detailed", 2)
    assert {k: v[0] for k, v in unnumbered.items()} == {0: "A", 1: "B"}
