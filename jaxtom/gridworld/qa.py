"""Binary-choice goal questions built from the exact posterior (MindZero appendix B.2).

Per episode, three questions:
  * type 1 (before the pick): given the target object2, which object will the human pick up?
  * type 2 (before the pick): given the object the human will pick, which target will it be
    put next to?
  * type 3 (while carrying): the human holds object1; which target?
Options are the posterior's top choice (conditional probability >= `likely_min`, and it must be
the true answer) and a random unlikely one (< `unlikely_max`), shuffled into (a)/(b). The
posterior is exact inference under the nearest-first ordering prior (`start_order_prior`).
Each question is asked at the paper's step (`pick // 2 + 1` before the pick, mid-carry after
it) or, if the posterior cannot pose it there yet, at the first later step of the same phase
that can. Before the pick the target is only weakly identifiable (the human's path depends on
object2 only through its discount scale), so type 2 is the rare one; episodes where any of the
three cannot be posed are skipped, and `qa_episodes` keeps sampling until enough qualify.
"""

from __future__ import annotations

import dataclasses

import numpy as np

import jax

from jaxtom.gridworld.episodes import EpisodeFilter, EpisodeSet, generate_episodes
from jaxtom.gridworld.inference import goal_posterior, start_order_prior
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
    prior = start_order_prior(episodes.states, params)
    posterior = np.asarray(goal_posterior(episodes.trajectories, params, prior))
    goals = np.asarray(episodes.states.goal)
    questions: list[Question] = []
    for e in range(len(episodes)):
        o1, o2 = int(goals[e, 0]), int(goals[e, 1])
        pick, put = int(episodes.pick_step[e]), int(episodes.put_step[e])
        windows = ((1, range(pick // 2 + 1, pick), o2, o1),
                   (2, range(pick // 2 + 1, pick), o1, o2),
                   (3, range((pick + put) // 2, put), o1, o2))
        made = []
        for kind, steps, given, truth in windows:
            for step in steps:
                probs, option_goals = _conditional(posterior[e, step - 1], kind, given,
                                                   params.num_objects)
                unlikely = [c for c in range(params.num_objects)
                            if c not in (given, truth) and probs[c] < unlikely_max]
                if int(np.argmax(probs)) == truth and probs[truth] >= likely_min and unlikely:
                    wrong = int(rng.choice(unlikely))
                    answer = int(rng.integers(0, 2))
                    options = (truth, wrong) if answer == 0 else (wrong, truth)
                    made.append(Question(e, step, kind, given, options, answer,
                                         (int(option_goals[options[0]]), int(option_goals[options[1]]))))
                    break
        if len(made) == len(windows):
            questions.extend(made)
    return questions


def qa_episodes(key: jax.Array, params: EnvParams, num_episodes: int,
                rules: EpisodeFilter = EpisodeFilter(), batch_size: int = 1024, seed: int = 0,
                exclude_layouts: set | None = None, max_rounds: int = 50):
    """`num_episodes` filtered episodes that each carry all three questions, and the questions
    (re-indexed to the returned episodes)."""
    parts: list[EpisodeSet] = []
    questions: list[Question] = []
    for round_ in range(max_rounds):
        episodes = generate_episodes(jax.random.fold_in(key, round_), params, num_episodes,
                                     rules, batch_size, exclude_layouts)
        made = make_questions(episodes, params, seed=seed + round_)
        keep = sorted({q.episode for q in made})[: num_episodes - sum(map(len, parts))]
        new_index = {old: len(questions) // 3 + i for i, old in enumerate(keep)}
        questions += [dataclasses.replace(q, episode=new_index[q.episode])
                      for q in made if q.episode in new_index]
        parts.append(episodes.take(keep))
        if sum(map(len, parts)) >= num_episodes:
            return _concat(parts), questions
    raise RuntimeError(f"only {sum(map(len, parts))} of {num_episodes} episodes could carry all "
                       f"three questions after {max_rounds} rounds")


def _concat(parts: list[EpisodeSet]) -> EpisodeSet:
    cat = lambda *xs: np.concatenate([np.asarray(x) for x in xs])  # noqa: E731
    return EpisodeSet(states=jax.tree.map(cat, *[p.states for p in parts]),
                      trajectories=jax.tree.map(cat, *[p.trajectories for p in parts]),
                      pick_step=cat(*[p.pick_step for p in parts]),
                      put_step=cat(*[p.put_step for p in parts]),
                      length=cat(*[p.length for p in parts]))


def accuracy(questions: list[Question], answers: list[str]) -> tuple[float, float]:
    """Accuracy of letter answers and its standard error; anything but 'a'/'b' is wrong."""
    if len(questions) != len(answers):
        raise ValueError(f"got {len(answers)} answers for {len(questions)} questions")
    correct = np.array([a == q.answer_letter for q, a in zip(questions, answers)], float)
    n = len(correct)
    sem = float(correct.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    return float(correct.mean()) if n else 0.0, sem
