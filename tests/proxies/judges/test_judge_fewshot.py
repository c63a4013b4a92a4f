"""Few-shot examples of a judge prompt version, as each method's judge is sent them (the LLM
is the scripted OpenAI-compatible server on loopback)."""

import pytest

from proxies.judges.fewshot import FewShotBackend, FewShotExample
from proxies.judges.methods import LATTE_TEMPLATE, Role, drpe_judge, latte_judge, rubric_judge
from proxies.methods import fewshot_prefix
from tests.proxies.judges.fake_openai import FakeOpenAI, answer, yes_no_reply
from tests.proxies.judges.test_judge_methods import backend_for

EXAMPLE = FewShotExample(output="turn of the light", reference="turn off the light",
                         answer="no", why="the negation is lost")
EXAMPLE_ROLE = Role("Reader", "wants the gist")


def test_latte_examples_are_the_papers_prompt_with_the_peoples_answer():
    prefix = fewshot_prefix("latte", [EXAMPLE], template=LATTE_TEMPLATE)
    assert prefix == ("Ground truth: {turn off the light}. Transcription: {turn of the light}. "
                      "Transcript preserves the meaning of the ground truth: {no}\n")
    with pytest.raises(ValueError, match="yes or no"):
        fewshot_prefix("latte", [FewShotExample(output="x", answer="2")])
    assert fewshot_prefix("rubric", []) == ""


def test_each_method_sends_its_examples_before_every_prompt():
    seen = []

    def respond(request):
        seen.append(request.prompt)
        if "Summary A:" in request.prompt.rpartition("---")[2]:
            return answer(request, "1. Summary A - clearer")
        return yes_no_reply(request, 0.7) if "Transcription" in request.prompt else answer(
            request, "2")

    with FakeOpenAI(respond) as server:
        inner = backend_for(server)
        latte = FewShotBackend(inner, fewshot_prefix("latte", [EXAMPLE]))
        [completion] = latte_judge(latte, [("call mum", "call mom")])
        assert completion.p_yes == pytest.approx(0.7)
        assert seen[-1].startswith("Ground truth: {turn off the light}")
        assert seen[-1].endswith("Transcription: {call mom}. Transcript preserves the meaning "
                                 "of the ground truth: {")
        rubric = FewShotBackend(inner, fewshot_prefix("rubric", [
            FewShotExample(output="fine text", answer="2", context="a chat", why="terse")]))
        rubric_judge(rubric, ["new text"], criterion="Fluency", scale={"1": "bad", "2": "good"})
        assert "Output: fine text\nPeople's answer: 2\nWhy: terse" in seen[-1]
        assert seen[-1].rpartition("---")[2].count("Output:") == 1
        drpe = FewShotBackend(inner, fewshot_prefix("drpe", [
            FewShotExample(output="short", output_b="long", answer="B", reference="article")]))
        drpe_judge(drpe, [EXAMPLE_ROLE], "the article", "text one", "text two")
        assert "Summary A: short\nSummary B: long\nPeople preferred: Summary B" in seen[-1]
    # Usage counts are the wrapped backend's: a run's usage report stays right.
    assert latte.usage is inner.usage and inner.usage.as_dict()["requests"] == len(seen)
    assert latte.signature() == inner.signature()
