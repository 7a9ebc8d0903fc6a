"""Binary-choice goal questions built from the exact posterior (MindZero appendix B.2).

Per episode, three questions:
  * type 1 (before the pick, at step `pick // 2 + 1`): given the target object2, which object
    will the human pick up?
  * type 2 (same step): given the object the human will pick, which target will it be put
    next to?
  * type 3 (mid-carry): the human holds object1; which target?
Options are the posterior's top choice (conditional probability >= `likely_min`, and it must be
the true answer) and a random unlikely one (< `unlikely_max`), shuffled into (a)/(b). Episodes
where any question cannot be posed that way are skipped.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxtom.gridworld.episodes import EpisodeSet
from jaxtom.gridworld.inference import goal_posterior
from jaxtom.gridworld.types import EnvParams, goal_index

QUESTION_TYPES = (1, 2, 3)


@dataclasses.dataclass(frozen=True)
class Question:
    episode: int  # index into the EpisodeSet
    step: int  # number of human actions observed
    kind: int  # 1, 2 or 3
    given: int  # object id the question names (object2 for type 1, object1 for 2 and 3)
    options: tuple[int, int]  # object ids for (a) and (b)
    answer: int  # 0 for (a), 1 for (b)
    option_goals: tuple[int, int]  # ordered-goal index each option stands for

    @property
    def answer_letter(self) -> str:
        return "ab"[self.answer]


def _conditional(posterior_t: np.ndarray, kind: int, given: int, num_objects: int):
    """P(candidate | given) over objects from the joint posterior over ordered goals."""
    probs = np.zeros(num_objects)
    goals = np.zeros(num_objects, np.int64)
    for candidate in range(num_objects):
        if candidate == given:
            continue
        pair = (candidate, given) if kind == 1 else (given, candidate)
        goals[candidate] = goal_index(pair[0], pair[1], num_objects)
        probs[candidate] = posterior_t[goals[candidate]]
    return probs / max(probs.sum(), 1e-300), goals


def make_questions(episodes: EpisodeSet, params: EnvParams, seed: int = 0,
                   likely_min: float = 0.3, unlikely_max: float = 0.01) -> list[Question]:
    """Three questions per episode where all three can be posed; deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    posterior = np.asarray(goal_posterior(episodes.trajectories, params))
    goals = np.asarray(episodes.states.goal)
    questions: list[Question] = []
    for e in range(len(episodes)):
        o1, o2 = int(goals[e, 0]), int(goals[e, 1])
        pick, put = int(episodes.pick_step[e]), int(episodes.put_step[e])
        pre, carry = pick // 2 + 1, (pick + put) // 2
        specs = ((1, pre, o2, o1), (2, pre, o1, o2), (3, carry, o1, o2))
        made = []
        for kind, step, given, truth in specs:
            probs, option_goals = _conditional(posterior[e, step - 1], kind, given, params.num_objects)
            unlikely = [c for c in range(params.num_objects)
                        if c not in (given, truth) and probs[c] < unlikely_max]
            if int(np.argmax(probs)) != truth or probs[truth] < likely_min or not unlikely:
                break
            wrong = int(rng.choice(unlikely))
            answer = int(rng.integers(0, 2))
            options = (truth, wrong) if answer == 0 else (wrong, truth)
            made.append(Question(e, step, kind, given, options, answer,
                                 (int(option_goals[options[0]]), int(option_goals[options[1]]))))
        if len(made) == len(specs):
            questions.extend(made)
    return questions


def accuracy(questions: list[Question], answers: list[str]) -> tuple[float, float]:
    """Accuracy of letter answers and its standard error; anything but 'a'/'b' is wrong."""
    if len(questions) != len(answers):
        raise ValueError(f"got {len(answers)} answers for {len(questions)} questions")
    correct = np.array([a == q.answer_letter for q, a in zip(questions, answers)], float)
    n = len(correct)
    sem = float(correct.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    return float(correct.mean()) if n else 0.0, sem
