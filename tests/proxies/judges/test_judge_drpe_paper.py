"""DRPE as the paper describes it (Wu et al. 2023): the coarse- and fine-grained role prompts,
ManualDRPEScore's roles, the unnormalised eq. 4 beside the normalised share, and a candidate
compared with the reference summary. The LLM is the scripted OpenAI-compatible server on
loopback; every prompt it receives is checked word for word and the aggregation on worked
examples whose numbers are written out."""

import math
import re

import pytest

from proxies.judges.backends.openai import OpenAICompatibleBackend
from proxies.judges.methods import (
    MANUAL_ROLES,
    STATIC_ROLES,
    Role,
    drpe_judge,
    drpe_reference_judge,
    drpe_roles,
    dynamic_roles,
)
from tests.proxies.judges.fake_openai import FakeOpenAI, answer


def backend_for(server, **kwargs):
    return OpenAICompatibleBackend(server.base_url, "judge-model", backoff_s=0.01,
                                   concurrency=1, **kwargs)


ARTICLE = "The FBI is offering a reward of up to $10,000 for information on a missing woman."


# -- role generation -------------------------------------------------------------------------

COARSE_PROMPT = (
    "Read the text below. Think of the most common occupations of people in the world, and "
    "list the 2 kinds of people, by occupation, who are most likely to read this text.\n\n"
    f"Text:\n{ARTICLE}\n\n"
    "Answer with exactly 2 lines, one kind of user per line, in the form\n"
    "<User type>: <User description: who these users are and what they look for in the text>"
)
FINE_PROMPT = (
    "Read the text below. Divide its potential readers into 2 kinds by how familiar they are "
    "with the topics of the text, from people who know nothing about them to experts or fans "
    "who follow them closely.\n\n"
    f"Text:\n{ARTICLE}\n\n"
    "Answer with exactly 2 lines, one kind of user per line, in the form\n"
    "<User type>: <User description: how familiar these users are with the topics and what "
    "they look for in the text>"
)
MIXED_PROMPT = (
    "Read the text below and think of 2 different kinds of people who would read it: "
    "consider common occupations as well as how familiar each reader is with its topic, and "
    "what each of them would care about when reading it.\n\n"
    f"Text:\n{ARTICLE}\n\n"
    "Answer with exactly 2 lines, one reader per line, in the form\n"
    "<reader type>: <one sentence describing what this reader cares about>"
)


def _roles_reply(request):
    if "most common occupations" in request.prompt:
        text = ("1. Police Officer: follows investigations and rewards for information.\n"
                "2. Teacher: wants a clear account of what happened.")
    elif "Divide its potential readers" in request.prompt:
        text = ("1. True Crime Fan: follows missing-person cases closely.\n"
                "2. Police Officer: knows how such rewards work.")
    else:
        text = "1. Local Resident: lives near where she went missing.\n2. Journalist: reports it."
    return answer(request, text)


@pytest.mark.parametrize(("granularity", "prompts", "types"), [
    ("coarse", [COARSE_PROMPT], ["Police Officer", "Teacher"]),
    ("fine", [FINE_PROMPT], ["True Crime Fan", "Police Officer"]),
    # Both paper prompts in one batch; a type named by both is kept once (coarse first).
    ("both", [COARSE_PROMPT, FINE_PROMPT], ["Police Officer", "Teacher", "True Crime Fan"]),
    ("mixed", [MIXED_PROMPT], ["Local Resident", "Journalist"]),
])
def test_role_generation_prompts_are_sent_word_for_word(granularity, prompts, types):
    with FakeOpenAI(_roles_reply) as server:
        roles = dynamic_roles(backend_for(server), ARTICLE, k=2, granularity=granularity)
    assert sorted(r.prompt for r in server.requests) == sorted(prompts)
    assert [r.body["temperature"] for r in server.requests] == [0.0] * len(prompts)
    assert [r.type for r in roles] == types and all(r.dynamic for r in roles)


def test_default_role_prompt_is_unchanged_and_granularity_is_checked():
    with FakeOpenAI(_roles_reply) as server:
        dynamic_roles(backend_for(server), ARTICLE, k=2)
        with pytest.raises(ValueError, match="granularity must be one of"):
            dynamic_roles(backend_for(server), ARTICLE, k=2, granularity="medium")
    assert [r.prompt for r in server.requests] == [MIXED_PROMPT]


def test_drpe_roles_with_both_prompts_deduplicates_the_union():
    """Static roles + coarse roles + fine roles, then DBSCAN. "Police Officer", named by both
    prompts, is merged by type before the clustering; the stand-in embedder gives every other
    type its own direction, so DBSCAN keeps the rest, in order."""
    def embed(texts):
        import numpy as np

        basis = {}
        return np.stack([np.eye(16)[basis.setdefault(t.split(":")[0], len(basis))]
                         for t in texts])

    with FakeOpenAI(_roles_reply) as server:
        roles = drpe_roles(backend_for(server), ARTICLE, k=2, granularity="both", embed=embed)
    assert [r.type for r in roles] == ["General Public", "Critic", "News Author",
                                       "Police Officer", "Teacher", "True Crime Fan"]
    assert server.hits == 2


def test_manual_roles_are_the_papers_six():
    assert [r.type for r in MANUAL_ROLES] == ["Students", "Business Man", "Politician",
                                              "General Public", "Critic", "News Author"]
    assert MANUAL_ROLES[0].description == ("These are studying in high school and want to know "
                                           "more about the world.")
    assert MANUAL_ROLES[2].description == ("These are pursuing an election victory in a medium "
                                           "country.")
    assert MANUAL_ROLES[3:] == STATIC_ROLES and not any(r.dynamic for r in MANUAL_ROLES)


# -- votes and their aggregation ------------------------------------------------------------

ROLES = [*STATIC_ROLES, Role("Student", "Wants a short overview.", dynamic=True)]
REFERENCE = "The FBI offers up to $10,000 for information on the missing Nevada woman."
CANDIDATE = "A reward is offered."


def _reply(request, votes):
    """`votes`: one (label, token probabilities) per role. Each line "i. Summary label - reason"
    is cut into tokens whose log-probabilities are log(p) for the given p's in turn: a role's
    weight is then the geometric mean of its p's, exp(mean log p) (DRPE eq. 3)."""
    tokens = []
    for i, (label, probs) in enumerate(votes):
        line = f"{i + 1}. Summary {label} - reason {i + 1}" + ("\n" if i < len(votes) - 1 else "")
        pieces = re.findall(r"\s*\S+\s*", line)
        # spread the p's over the line's tokens: the first len(probs) - 1 tokens take one each,
        # the rest take the last p, so the mean is still over every token of the line
        per_token = [probs[min(j, len(probs) - 1)] for j in range(len(pieces))]
        tokens += [(piece, math.log(p)) for piece, p in zip(pieces, per_token, strict=True)]
    return answer(request, "".join(t for t, _ in tokens), token_logprobs=tokens)


def _expected_prompt(first, second):
    return (
        f"Article: {ARTICLE}\n\n"
        f"Summary 1: {first}\n\n"
        f"Summary 2: {second}\n\n"
        "The following 4 people each read the article and both summaries from their own point "
        "of view:\n"
        "1. General Public: These readers may be interested in the story and looking for "
        "updates on the investigation.\n"
        "2. Critic: These people will check fluent writing, clear sentences, and good wording "
        "in summary writing.\n"
        "3. News Author: These readers will check the summary for consistency with the original "
        "article.\n"
        "4. Student: Wants a short overview.\n\n"
        "For each person, vote which summary better describes the article and give their "
        "reason. Answer with exactly 4 lines, one per person, in this form:\n"
        "<number>. <Summary 1 or Summary 2> - <reason>"
    )


# Worked example, the paper's order (reference = Summary 1, candidate = Summary 2). Each line
# has 6 tokens ("1.", " Summary", " 2", " -", " reason", " 1"); see _reply.
#   role 1: Summary 2, all tokens p = 0.9            -> P_1 = 0.9
#   role 2: Summary 1, all tokens p = 0.6            -> P_2 = 0.6
#   role 3: Summary 2, all tokens p = 0.8            -> P_3 = 0.8
#   role 4: Summary 2, all tokens p = 0.5            -> P_4 = 0.5
# eq. 4 for the candidate (a = 1): 0.9 + 0.8 + 0.5 = 2.2; for the reference: 0.6.
# share: 2.2 / (2.2 + 0.6) = 0.785714...
PAPER_ORDER = [("2", [0.9]), ("1", [0.6]), ("2", [0.8]), ("2", [0.5])]
# The swapped order (candidate = Summary 1): the candidate gets roles 1, 2 and 4.
#   eq. 4: candidate 0.9 + 0.6 + 0.5 = 2.0, reference 0.8; share 2.0 / 2.8 = 0.714285...
SWAPPED_ORDER = [("1", [0.9]), ("1", [0.6]), ("2", [0.8]), ("1", [0.5])]


def _reference_server():
    def respond(request):
        first = re.search(r"Summary 1: (.*?)\n\n", request.prompt).group(1)
        return _reply(request, PAPER_ORDER if first == REFERENCE else SWAPPED_ORDER)

    return FakeOpenAI(respond)


def test_candidate_against_reference_in_the_papers_order():
    with _reference_server() as server:
        scored = drpe_reference_judge(backend_for(server), ROLES, ARTICLE, REFERENCE, CANDIDATE,
                                      orders=("AB",))
    assert [r.prompt for r in server.requests] == [_expected_prompt(REFERENCE, CANDIDATE)]
    result = scored.result
    assert result.weighting == {"AB": "role-tokens"}
    assert [round(v.weight, 9) for v in result.votes] == [0.9, 0.6, 0.8, 0.5]
    assert [v.choice for v in result.votes] == ["B", "A", "B", "B"]  # B = the candidate
    assert result.sums_by_order["AB"] == {"A": pytest.approx(0.6), "B": pytest.approx(2.2)}
    assert scored.aggregation == "sum" and scored.score == pytest.approx(2.2)
    assert scored.p_candidate == pytest.approx(2.2 / 2.8)
    assert result.winner == "B" and result.position_consistent is False  # one order only


def test_candidate_against_reference_in_both_orders_averages_them():
    with _reference_server() as server:
        backend = backend_for(server)
        summed = drpe_reference_judge(backend, ROLES, ARTICLE, REFERENCE, CANDIDATE)
        share = drpe_reference_judge(backend, ROLES, ARTICLE, REFERENCE, CANDIDATE,
                                     aggregation="share")
    assert [r.prompt for r in server.requests[:2]] == [_expected_prompt(REFERENCE, CANDIDATE),
                                                       _expected_prompt(CANDIDATE, REFERENCE)]
    result = summed.result
    assert result.sums_by_order["BA"] == {"A": pytest.approx(0.8), "B": pytest.approx(2.0)}
    assert summed.score == pytest.approx((2.2 + 2.0) / 2)  # eq. 4, averaged over the orders
    assert result.score_a == pytest.approx((0.6 + 0.8) / 2)
    assert summed.p_candidate == pytest.approx((2.2 / 2.8 + 2.0 / 2.8) / 2)  # 0.75
    assert share.score == pytest.approx(0.75) and share.aggregation == "share"
    assert result.position_consistent is True and result.winner == "B"
    assert len(server.requests) == 4  # the second call is not cached (no cache given)


def test_geometric_mean_of_a_line_is_its_weight():
    """Eq. 3 within one line of 6 tokens: the first has p = 0.9 and the other five 0.4, so the
    role's weight is exp(mean log p) = (0.9 * 0.4^5)^(1/6), not 0.9 (its vote token) nor the
    product."""
    votes = [("2", [0.9, 0.4]), ("1", [1.0]), ("2", [0.25, 1.0]), ("2", [1.0])]
    with FakeOpenAI(lambda r: _reply(r, votes)) as server:
        scored = drpe_reference_judge(backend_for(server), ROLES, ARTICLE, REFERENCE, CANDIDATE,
                                      orders=("AB",))
    w1 = (0.9 * 0.4 ** 5) ** (1 / 6)
    w3 = (0.25 * 1.0 ** 5) ** (1 / 6)
    weights = [v.weight for v in scored.result.votes]
    assert weights == pytest.approx([w1, 1.0, w3, 1.0])
    assert scored.score == pytest.approx(w1 + w3 + 1.0)
    assert scored.p_candidate == pytest.approx((w1 + w3 + 1.0) / (w1 + w3 + 2.0))


def test_eq4_sum_and_the_share_can_pick_different_winners():
    """Three roles. Shown A first ("AB"): two confident votes for A (0.9 each), one hesitant
    for B (0.1): share 1.8 / 1.9, sums A 1.8 / B 0.1. Shown B first ("BA"): three hesitant
    votes for B (0.3 each): share 0, sums A 0 / B 0.9. The mean share, (0.947 + 0) / 2 = 0.474,
    says B; the mean eq. 4 sums, A 0.9 against B 0.5, say A."""
    roles = list(STATIC_ROLES)
    text_a, text_b = "first text", "second text"

    def respond(request):
        a_first = re.search(r"Summary A: (.*?)\n\n", request.prompt).group(1) == text_a
        if a_first:
            return _reply(request, [("A", [0.9]), ("A", [0.9]), ("B", [0.1])])
        return _reply(request, [("A", [0.3]), ("A", [0.3]), ("A", [0.3])])  # shown A = B

    with FakeOpenAI(respond) as server:
        share = drpe_judge(backend_for(server), roles, "", text_a, text_b)
        summed = drpe_judge(backend_for(server), roles, "", text_a, text_b, aggregation="sum")
    for result in (share, summed):
        assert result.p_a_by_order == {"AB": pytest.approx(1.8 / 1.9), "BA": pytest.approx(0.0)}
        assert result.p_a == pytest.approx(1.8 / 1.9 / 2)
        assert result.sums_by_order == {"AB": {"A": pytest.approx(1.8), "B": pytest.approx(0.1)},
                                        "BA": {"A": pytest.approx(0.0), "B": pytest.approx(0.9)}}
        assert result.score_a == pytest.approx(0.9) and result.score_b == pytest.approx(0.5)
        assert result.position_consistent is False
    assert share.winner == "B" and share.aggregation == "share"
    assert summed.winner == "A" and summed.aggregation == "sum"


def test_options_are_checked():
    with FakeOpenAI(lambda r: answer(r, "1. Summary A - x")) as server:
        backend = backend_for(server)
        with pytest.raises(ValueError, match="aggregation"):
            drpe_judge(backend, ROLES, "", "a", "b", aggregation="mean")
        with pytest.raises(ValueError, match="orders"):
            drpe_judge(backend, ROLES, "", "a", "b", orders=("AB", "AB"))
        with pytest.raises(ValueError, match="orders"):
            drpe_judge(backend, ROLES, "", "a", "b", orders=())
    assert server.hits == 0
