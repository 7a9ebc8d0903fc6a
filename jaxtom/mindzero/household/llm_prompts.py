"""The household LLM estimators: action likelihood and goal prior read from option log-probs.

The paper scores each goal hypothesis with the same LLM that it asks two multiple-choice
questions, reading the answer's probability from token log-probs (`llm_scoring`), never from a
sampled reply:

  * action likelihood `P(action | goal, state)`: the apartment state, the goal hypothesis
    (`Goal.render()`), the key actions so far and the person's next action. Without
    alternatives the model says whether the action is A) likely or B) unlikely and the score
    is `P(A) / (P(A) + P(B))` (the public estimator); with alternatives (other actions the
    person could have taken) the candidate actions are lettered in a fixed order (sorted, so
    the position does not reveal the observed one) and the score is the normalised probability
    of the observed action's letter (AutoToM's choice among options). With `next_action=None`
    the whole key-action sequence is judged instead (the public training reward's
    "all-time" likelihood). The goal is the prompt's last part before the question, so the
    hypotheses of one sample share the long prefix (prefix caching on a vLLM server).
  * goal prior `P(goal)`: whether the goal is A) plausible or B) implausible for a person in
    this apartment (an apple in the dishwasher, or 2 forks with 8 plates, is implausible);
    the score is `P(A) / (P(A) + P(B))`.

Functions take plain strings (state text, history lines, action strings), so they do not
depend on the simulator:

  * `likelihood_prompt(state, goal, history, next_action, alternatives) -> Choice`,
    `prior_prompt(goal, apartment=None) -> Choice`: the prompt, its options and the option
    whose probability is the score;
  * `llm_log_likelihood(scorer, queries) -> [Q]` and `llm_log_prior(scorer, goals,
    apartment) -> [Q]`: all queries in one scorer call, `log max(score, 1e-10)`;
  * `likelihood_fn(scorer, contexts)` / `prior_fn(scorer, apartments)`: the
    `(samples, goals) -> log scores` callables `reward.particle_rewards` takes.

`option_prefix` is put before each option letter: "" for chat models (the letter is the first
token of the assistant's turn), " " for raw-text prompts ending in "Answer:".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from jaxtom.household.goals import Goal
from jaxtom.mindzero.household.llm_scoring import OptionQuery, OptionScorer, normalise_logprobs

FLOOR = 1e-10
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

TASK_INTRO = ("A person in an apartment is doing one household task: moving some objects to "
              "one target place. The task is one of: setting up a table, loading the "
              "dishwasher, loading the fridge, preparing food, or watching TV.")

LIKELIHOOD_RULES = """\
How such a person acts:
- With empty hands, they walk towards an object their goal still needs (or the room or \
container it is in), open that container, and grab the object. Any needed object will do, \
not only the nearest one.
- Holding a needed object, they walk towards the target and put the object there.
- They never grab objects their goal does not need, never put objects anywhere but the \
target, and stop when the goal is done."""

PRIOR_RULES = """\
A plausible goal:
- fits its task: food (apple, cupcake, pudding, salmon) goes to the fridge, the stove or a \
table; dishes (plate, cutleryfork, waterglass, wineglass) go to the dishwasher or a table; \
snacks and a remote control go to the coffeetable for watching TV;
- has sensible numbers: a table for n people gets about n plates, n forks and n glasses, \
not 2 forks and 8 plates;
- usually names 2 to 4 kinds of objects.
An apple in the dishwasher or a plate on the stove is implausible."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """A prompt, its answer options and which option's probability is the score."""
    prompt: str
    options: tuple[str, ...]
    scored: int

    def query(self) -> OptionQuery:
        return OptionQuery(self.prompt, self.options)


def _goal_text(goal: Goal | str) -> str:
    return goal.render() if isinstance(goal, Goal) else str(goal)


def _history_text(history: Sequence[str]) -> str:
    lines = [h.strip() for h in history if h and h.strip()]
    return "\n".join(f"{i}. {h}" for i, h in enumerate(lines, 1)) or "None yet."


def likelihood_prompt(state: str, goal: Goal | str, history: Sequence[str] = (),
                      next_action: str | None = None, alternatives: Sequence[str] = (), *,
                      option_prefix: str = "") -> Choice:
    """The action-likelihood question (see the module docstring)."""
    # the goal comes last, after everything the hypotheses of one sample share, so a server
    # with prefix caching (vLLM) computes the long context once per sample, not per goal
    head = (f"{TASK_INTRO}\n\n{LIKELIHOOD_RULES}\n\n[apartment]\n{state.strip()}\n\n"
            f"[key actions so far]\n{_history_text(history)}\n\n")
    goal_line = f"[the person's goal]\n{_goal_text(goal)}\n\n"
    if next_action is None:
        if alternatives:
            raise ValueError("alternatives need a next_action to compare with")
        body = (goal_line + "Are the key actions so far likely for a person with this goal? "
                "They may be unfinished.\nA) Likely.\nB) Unlikely.\n")
        return Choice(head + body + _ANSWER.format(letters="A or B"),
                      (option_prefix + "A", option_prefix + "B"), 0)
    next_action = next_action.strip()
    others = sorted({a.strip() for a in alternatives if a and a.strip()} - {next_action})
    if not others:
        body = (f"[the person's next action]\n{next_action}\n\n{goal_line}Is this next "
                f"action likely for a person with this goal?\nA) Likely.\nB) Unlikely.\n")
        return Choice(head + body + _ANSWER.format(letters="A or B"),
                      (option_prefix + "A", option_prefix + "B"), 0)
    actions = sorted(others + [next_action])
    if len(actions) > len(LETTERS):
        raise ValueError(f"at most {len(LETTERS)} candidate actions, got {len(actions)}")
    listed = "\n".join(f"{LETTERS[i]}) {a}" for i, a in enumerate(actions))
    letters = ", ".join(LETTERS[:len(actions) - 1]) + f" or {LETTERS[len(actions) - 1]}"
    body = f"{goal_line}Which action does a person with this goal take next?\n{listed}\n"
    return Choice(head + body + _ANSWER.format(letters=letters),
                  tuple(option_prefix + LETTERS[i] for i in range(len(actions))),
                  actions.index(next_action))


_ANSWER = "Answer with only the letter {letters}.\nAnswer:"


def prior_prompt(goal: Goal | str, apartment: str | None = None, *,
                 option_prefix: str = "") -> Choice:
    """The goal-prior question (see the module docstring)."""
    where = f"[apartment]\n{apartment.strip()}\n\n" if apartment and apartment.strip() else ""
    prompt = (f"{TASK_INTRO}\n\n{PRIOR_RULES}\n\n{where}[goal]\n{_goal_text(goal)}\n\n"
              f"Is this a plausible goal for the person?\nA) Plausible.\nB) Implausible.\n"
              + _ANSWER.format(letters="A or B"))
    return Choice(prompt, (option_prefix + "A", option_prefix + "B"), 0)


@dataclasses.dataclass(frozen=True)
class LikelihoodQuery:
    """One (goal, context) likelihood question: see `likelihood_prompt`."""
    state: str
    goal: Goal | str
    history: tuple[str, ...] = ()
    next_action: str | None = None
    alternatives: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class LikelihoodContext:
    """What a sample's likelihood questions share (everything but the goal)."""
    state: str
    history: tuple[str, ...] = ()
    next_action: str | None = None
    alternatives: tuple[str, ...] = ()


def score_choices(scorer: OptionScorer, choices: Sequence[Choice], *,
                  floor: float = FLOOR) -> np.ndarray:
    """[Q] `log max(P(scored option) / sum of the options' P, floor)`, one scorer call."""
    if not 0.0 < floor < 1.0:
        raise ValueError(f"floor must be in (0, 1), got {floor}")
    if not choices:
        return np.zeros(0)
    lps = scorer.option_logprobs([c.query() for c in choices])
    out = np.array([normalise_logprobs(lp)[c.scored] for lp, c in zip(lps, choices)])
    return np.maximum(np.nan_to_num(out, nan=-np.inf), math.log(floor))


def llm_log_likelihood(scorer: OptionScorer, queries: Sequence[LikelihoodQuery], *,
                       option_prefix: str = "", floor: float = FLOOR) -> np.ndarray:
    """[Q] log-likelihood scores of many (goal, context) queries in one scorer call."""
    return score_choices(scorer, [
        likelihood_prompt(q.state, q.goal, q.history, q.next_action, q.alternatives,
                          option_prefix=option_prefix) for q in queries], floor=floor)


def llm_log_prior(scorer: OptionScorer, goals: Sequence[Goal | str],
                  apartment: str | Sequence[str | None] | None = None, *,
                  option_prefix: str = "", floor: float = FLOOR) -> np.ndarray:
    """[Q] log-prior scores of many goals in one scorer call; `apartment` is one text for
    all, or one per goal."""
    if apartment is None or isinstance(apartment, str):
        apartments = [apartment] * len(goals)
    else:
        apartments = list(apartment)
        if len(apartments) != len(goals):
            raise ValueError(f"{len(apartments)} apartments for {len(goals)} goals")
    return score_choices(scorer, [prior_prompt(g, a, option_prefix=option_prefix)
                                  for g, a in zip(goals, apartments)], floor=floor)


def likelihood_fn(scorer: OptionScorer, contexts: Sequence[LikelihoodContext], **kwargs):
    """`(samples, goals) -> [Q]` log-likelihoods, sample b read in `contexts[b]`."""
    def fn(samples, goals):
        return llm_log_likelihood(scorer, [
            LikelihoodQuery(contexts[b].state, g, contexts[b].history, contexts[b].next_action,
                            contexts[b].alternatives) for b, g in zip(samples, goals)], **kwargs)
    return fn


def prior_fn(scorer: OptionScorer, apartments: Sequence[str | None] | None = None, **kwargs):
    """`(samples, goals) -> [Q]` log-priors, sample b's apartment text `apartments[b]`."""
    def fn(samples, goals):
        texts = None if apartments is None else [apartments[b] for b in samples]
        return llm_log_prior(scorer, goals, texts, **kwargs)
    return fn
