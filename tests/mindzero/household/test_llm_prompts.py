"""The household LLM estimator prompts and their batched scoring (with a fake judge)."""

import math

import numpy as np
import pytest

from jaxtom.household.goals import Goal
from jaxtom.mindzero.household.llm_prompts import (LikelihoodContext, LikelihoodQuery,
                                          likelihood_fn, likelihood_prompt, llm_log_likelihood,
                                          llm_log_prior, prior_fn, prior_prompt)
from jaxtom.mindzero.household.llm_scoring import CachedScorer

STATE = "The kitchen has 1 fridge, 1 dishwasher.\n- The fridge contains 2 apple."
HISTORY = ("Human grabs the plate", "Human puts the plate in the dishwasher")
APPLE_WASHER = Goal.make("put_dishwasher", {"apple": 2}, "dishwasher")
TABLE = Goal.make("setup_table", {"plate": 2, "cutleryfork": 2}, "kitchentable")


class Judge:
    """A fake scorer: answers A with probability 0.02 when the question's goal puts an apple
    in the dishwasher, else 0.9; for lettered action choices, puts 0.7 on the action that
    mentions 'dishwasher' and splits the rest. Records each call's queries."""

    def __init__(self):
        self.calls = []

    def option_logprobs(self, queries):
        self.calls.append(list(queries))
        out = []
        for q in queries:
            goal = q.prompt.split("goal]\n")[1].split("\n")[0]
            if len(q.options) == 2 and "A) Likely" in q.prompt or "Plausible" in q.prompt:
                pa = 0.02 if ("apple" in goal and "dishwasher" in goal) else 0.9
                out.append(np.log([pa, 1 - pa]))
                continue
            lines = [ln for ln in q.prompt.splitlines() if ln[:2].rstrip(")").isalpha()
                     and ln[1:2] == ")"]
            hot = [0.7 if "dishwasher" in ln else 0.0 for ln in lines]
            rest = (1 - sum(hot)) / max(1, hot.count(0.0))
            # unnormalised on purpose: the estimator normalises over the options
            out.append(np.log([h or rest for h in hot]) - 3.0)
        return out


def test_likelihood_prompt_contents_and_options():
    c = likelihood_prompt(STATE, TABLE, HISTORY, "Human walks towards the kitchentable")
    assert c.options == ("A", "B") and c.scored == 0
    for part in (STATE, TABLE.render(), "1. Human grabs the plate",
                 "2. Human puts the plate in the dishwasher",
                 "Human walks towards the kitchentable", "A) Likely.", "B) Unlikely."):
        assert part in c.prompt
    assert c.prompt.endswith("Answer:")
    empty = likelihood_prompt(STATE, "(put_fridge) put 1 apple to fridge", [], "Human walks")
    assert "None yet." in empty.prompt
    whole = likelihood_prompt(STATE, TABLE, HISTORY, None)
    assert "key actions so far likely" in whole.prompt and whole.options == ("A", "B")
    # every goal of one sample shares the prompt up to the goal (prefix caching)
    other = likelihood_prompt(STATE, APPLE_WASHER, HISTORY, "Human walks towards the "
                              "kitchentable")
    cut = c.prompt.index("[the person's goal]")
    assert other.prompt[:cut] == c.prompt[:cut] and cut > len(STATE)
    raw = prior_prompt(TABLE, option_prefix=" ")
    assert raw.options == (" A", " B")


def test_alternatives_are_lettered_in_a_fixed_order():
    a = likelihood_prompt(STATE, TABLE, HISTORY, "Human grabs the plate",
                          ["Human opens the fridge", "Human grabs the plate", " ",
                           "Human walks towards the bathroom"])
    assert a.options == ("A", "B", "C")
    listed = [ln for ln in a.prompt.splitlines() if ln[:3] in ("A) ", "B) ", "C) ")]
    assert listed == ["A) Human grabs the plate", "B) Human opens the fridge",
                      "C) Human walks towards the bathroom"]
    assert a.scored == 0
    b = likelihood_prompt(STATE, TABLE, HISTORY, "Human walks towards the bathroom",
                          ["Human grabs the plate", "Human opens the fridge"])
    assert b.prompt == a.prompt and b.scored == 2  # same question whichever was observed
    with pytest.raises(ValueError, match="alternatives need a next_action"):
        likelihood_prompt(STATE, TABLE, HISTORY, None, ["x"])


def test_prior_scores_an_apple_in_the_dishwasher_low_in_one_call():
    judge = Judge()
    lp = llm_log_prior(judge, [TABLE, APPLE_WASHER, TABLE], apartment=STATE)
    assert len(judge.calls) == 1 and len(judge.calls[0]) == 3
    np.testing.assert_allclose(lp, np.log([0.9, 0.02, 0.9]))
    assert STATE in judge.calls[0][0].prompt and "Implausible" in judge.calls[0][0].prompt
    per_goal = llm_log_prior(judge, [TABLE, TABLE], apartment=[None, "A tiny flat."])
    assert "[apartment]" not in judge.calls[-1][0].prompt
    assert "A tiny flat." in judge.calls[-1][1].prompt and per_goal.shape == (2,)
    with pytest.raises(ValueError, match="2 apartments for 1 goals"):
        llm_log_prior(judge, [TABLE], apartment=["a", "b"])


def test_likelihood_batches_and_normalises():
    judge = Judge()
    qs = [LikelihoodQuery(STATE, APPLE_WASHER, HISTORY, "Human opens the dishwasher"),
          LikelihoodQuery(STATE, TABLE, HISTORY, "Human opens the dishwasher",
                          ("Human opens the fridge", "Human walks towards the bedroom"))]
    lp = llm_log_likelihood(judge, qs)
    assert len(judge.calls) == 1
    assert lp[0] == pytest.approx(math.log(0.02))
    assert lp[1] == pytest.approx(math.log(0.7))  # normalised over the three letters


def test_floor_and_empty_batch():
    class Zero:
        def option_logprobs(self, queries):
            return [np.array([-np.inf, 0.0]) for _ in queries]

    lp = llm_log_prior(Zero(), [TABLE])
    assert lp[0] == pytest.approx(math.log(1e-10))
    assert llm_log_likelihood(Zero(), []).shape == (0,)
    with pytest.raises(ValueError, match="floor"):
        llm_log_prior(Zero(), [TABLE], floor=0.0)


def test_reward_callables_use_each_samples_context_and_the_cache():
    judge = Judge()
    cache = CachedScorer(judge)
    contexts = [LikelihoodContext(STATE, HISTORY, "Human opens the dishwasher"),
                LikelihoodContext("Another flat.", (), "Human walks towards the kitchen")]
    lik = likelihood_fn(cache, contexts)
    out = lik([0, 1, 0], [APPLE_WASHER, TABLE, APPLE_WASHER])
    assert out.shape == (3,) and out[0] == out[2]
    assert cache.stats() == {"hits": 1, "misses": 2, "entries": 2}
    assert "Another flat." in judge.calls[0][1].prompt
    prior = prior_fn(cache, ["flat0", "flat1"])
    prior([1], [TABLE])
    assert "flat1" in judge.calls[-1][0].prompt
