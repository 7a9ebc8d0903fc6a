"""Online goal inference on held-out episodes, scored against the truth and the exact posterior.

At every evaluated timestep t, all episodes still running are queried in one sampler call
(greedy as the public evaluation, or sampled at `eval.temperature`, one completion per
query), parsed with the lenient eval rule, and turned into a
distribution over the 56 ordered goals (a failed parse has no mass: it scores as the worst
answer, `eval.metrics.goal_scores`).
Baselines run in the same harness on the same (episode, t): a random goal (one per episode, as
the random helper), the exact Bayesian posterior (nearest-first prior, the model-based
reference), and whatever other model is passed (the untrained, warm-up-only one).

QA (appendix B.2): each binary question is answered from a method's goal distribution at the
question's step -- the option whose ordered goal has more mass, ties by a coin flip
(`qa_beliefs`, `qa_scores`).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxtom import flops
from jaxtom.eval import metrics
from jaxtom.gridworld import goal_index, goal_posterior, start_order_prior
from jaxtom.gridworld.qa import QUESTION_TYPES
from jaxtom.gridworld.types import EnvParams
from jaxtom.mindzero.observation import HostEpisodes, approach_order, get_observation
from jaxtom.mindzero.particles import parse_particles
from jaxtom.mindzero.policy import Codec, sample_completions
from jaxtom.models import Decoder


def steps_to_score(view: HostEpisodes, stride: int = 1) -> list[tuple[int, int]]:
    return [(e, t) for e in range(len(view)) for t in range(1, int(view.length[e]), stride)]


def dense(particles, num_objects: int) -> np.ndarray:
    """[G] goal distribution from a parse result (zeros for a failure)."""
    out = np.zeros(num_objects * (num_objects - 1))
    for (a, b), q in zip(particles.pairs, particles.q):
        out[int(goal_index(a, b, num_objects))] += q
    return out


GREEDY_ROWS = 128  # rows per greedy sampler call in `model_beliefs`


@dataclasses.dataclass
class TextQueries:
    """How a text policy is asked for particles at (episode, t) rows of a view (held-out
    episodes, or the live rows of online assistance): the run's observation rendered and
    sampled in one call. `jaxtom.mindzero.vl_eval.VLQueries` is the image counterpart."""
    model: Decoder
    codec: Codec
    observation: str
    num_particles: int

    def ask(self, view, rows, *, key, temperature: float, max_new_tokens: int):
        """(completion texts, tokens processed per query) for `rows`, one sampler call."""
        render = get_observation(self.observation)
        prompts = [self.codec.prompt_ids(render(view, e, t, self.num_particles))
                   for e, t in rows]
        texts, _, tokens = sample_completions(self.model, self.codec, prompts, key=key,
                                              temperature=temperature,
                                              max_new_tokens=max_new_tokens, pad_rows=True)
        return texts, tokens

    def tflops_per_query(self, tokens: float) -> float:
        """Appendix A.2: 2 x active parameters x tokens processed."""
        return flops.inference_tflops(flops.active_params(self.model), tokens)


def model_beliefs(queries, view: HostEpisodes, rows, *, num_particles: int,
                  max_new_tokens: int, num_objects: int = 8, temperature: float = 0.0,
                  seed: int = 0):
    """[M, G] beliefs of a model (asked through `queries`: `TextQueries` or `VLQueries`) at
    each (episode, t) row, plus tokens processed per query.
    Sampled queries: one sampler call per timestep for all episodes (its key folds in t).
    Greedy ones depend on nothing but their prompt, so they go `GREEDY_ROWS` at a time: a
    few large calls instead of one small call per timestep."""
    beliefs = np.zeros((len(rows), num_objects * (num_objects - 1)))
    tokens = np.zeros(len(rows))
    by_t: dict[int, list[int]] = {}
    if temperature > 0:
        for i, (_, t) in enumerate(rows):
            by_t.setdefault(t, []).append(i)
        calls = sorted(by_t.items())
    else:
        order = sorted(range(len(rows)), key=lambda i: (rows[i][1], rows[i][0]))
        calls = [(0, order[k:k + GREEDY_ROWS]) for k in range(0, len(order), GREEDY_ROWS)]
    for t, idx in calls:
        texts, n_tok = queries.ask(view, [rows[i] for i in idx],
                                   key=jax.random.fold_in(jax.random.key(seed), t),
                                   temperature=temperature, max_new_tokens=max_new_tokens)
        for i, text, n in zip(idx, texts, n_tok):
            e = rows[i][0]
            beliefs[i] = dense(parse_particles(text, view.labels[e], mode="eval",
                                               num_particles=num_particles), num_objects)
            tokens[i] = n
    return beliefs, tokens


def listed_order_beliefs(view: HostEpisodes, rows, num_particles: int = 2,
                         num_objects: int = 8) -> np.ndarray:
    """[M, G] a label-free heuristic that reads the compact observation's order directly:
    the first-listed object paired with the next `num_particles` listed, mass split 0.6 / 0.4
    (or evenly beyond two). It shows how much of a model's score the observation's order
    alone gives, so a trained model can be judged against it."""
    weights = ([1.0] if num_particles == 1 else [0.6, 0.4] if num_particles == 2
               else [1.0 / num_particles] * num_particles)
    beliefs = np.zeros((len(rows), num_objects * (num_objects - 1)))
    for i, (e, t) in enumerate(rows):
        order = approach_order(view, e, t)
        for b, w in zip(order[1:1 + num_particles], weights):
            beliefs[i, int(goal_index(order[0], b, num_objects))] += w
    return beliefs


def reference_beliefs(view: HostEpisodes, rows, params: EnvParams, seed: int = 0,
                      num_particles: int = 2) -> dict[str, np.ndarray]:
    """Baselines at the same rows: random goal, exact posterior (full and its top-N)."""
    ep = view.episodes
    exact_all = np.asarray(goal_posterior(ep.trajectories, params,
                                          start_order_prior(ep.states, params)))  # [E, T, G]
    G = params.num_goals
    e_idx = np.array([e for e, _ in rows])
    t_idx = np.array([t for _, t in rows])
    exact = exact_all[e_idx, t_idx - 1]  # posterior after t actions
    top = np.argsort(-exact, axis=-1)[:, :num_particles]
    top_n = np.zeros_like(exact)
    np.put_along_axis(top_n, top, np.take_along_axis(exact, top, -1), -1)
    top_n /= top_n.sum(-1, keepdims=True)
    rng = np.random.default_rng(seed)
    random_goal = rng.integers(0, G, len(view))
    rand = np.zeros_like(exact)
    rand[np.arange(len(rows)), random_goal[e_idx]] = 1.0
    return {"exact": exact, f"exact_top{num_particles}": top_n, "random": rand,
            "uniform": np.full_like(exact, 1.0 / G)}


def score_methods(beliefs: dict[str, np.ndarray], view: HostEpisodes, rows, exact,
                  mix: float = 0.01, reference: str | None = None) -> dict:
    """Per method: mean +- episode-clustered SE of each score, and (if `reference` is given)
    the paired per-episode margin of `reference` over the method."""
    e_idx = np.array([e for e, _ in rows])
    true = np.array([int(goal_index(*view.goal[e], 8)) for e in e_idx])
    per_row = {name: metrics.goal_scores(b, true, exact, mix) for name, b in beliefs.items()}
    table = {}
    for name, scores in per_row.items():
        entry = {}
        for k, v in scores.items():
            entry[k], entry[k + "_se"] = metrics.cluster_mean_sem(v, e_idx)
            if reference and name != reference:
                d, se = metrics.paired_difference(per_row[reference][k], v, e_idx)
                entry[k + "_margin"], entry[k + "_margin_se"] = d, se
        table[name] = entry
    return table, per_row


def progress_curves(per_row: dict, view: HostEpisodes, rows, bins: int = 10) -> dict:
    progress = np.array([t / float(view.length[e]) for e, t in rows])
    return {name: metrics.accuracy_by_progress(progress, s["top1"], bins)
            for name, s in per_row.items()}


def qa_from_beliefs(belief: np.ndarray, option_goals, rng) -> int:
    """Answer a QA question from a goal distribution: the option whose goal has more mass
    (ties broken at random)."""
    a, b = (belief[g] for g in option_goals)
    return 0 if a > b else 1 if b > a else int(rng.integers(0, 2))


def qa_rows(questions) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The distinct (episode, step) rows the questions are asked at, in first-seen order, and
    each question's row index -- so two questions at the same step cost one query."""
    rows: list[tuple[int, int]] = []
    where: dict[tuple[int, int], int] = {}
    index = np.zeros(len(questions), np.int64)
    for i, q in enumerate(questions):
        row = (int(q.episode), int(q.step))
        if row not in where:
            where[row] = len(rows)
            rows.append(row)
        index[i] = where[row]
    return rows, index


def qa_scores(beliefs: dict[str, np.ndarray], questions, row_index=None, seed: int = 0) -> dict:
    """QA accuracy of each method from its goal distributions at the questions' timesteps.

    `beliefs[name]` is [M, G] over rows; `row_index[i]` is question i's row (default: one row
    per question). Per method: `overall`, `type1`..`type3` accuracy with `_se` (overall:
    episode-clustered, the three questions of an episode are not independent), `n` per type,
    and `decided`, the share of questions whose two options got different mass (the others
    are coin flips, e.g. when a particle set names neither option). Ties are broken by an rng
    seeded with `seed`, the same stream for every method."""
    if not questions:
        raise ValueError("qa_scores needs at least one question")
    row_index = np.arange(len(questions)) if row_index is None else np.asarray(row_index)
    kinds = np.array([q.kind for q in questions])
    episode = np.array([q.episode for q in questions])
    table = {}
    for name, b in beliefs.items():
        rng = np.random.default_rng(seed)
        answers = np.array([qa_from_beliefs(b[r], q.option_goals, rng)
                            for q, r in zip(questions, row_index)])
        correct = (answers == np.array([q.answer for q in questions])).astype(float)
        decided = np.array([b[r][q.option_goals[0]] != b[r][q.option_goals[1]]
                            for q, r in zip(questions, row_index)], float)
        entry = {}
        entry["overall"], entry["overall_se"] = metrics.cluster_mean_sem(correct, episode)
        for kind in QUESTION_TYPES:
            mask = kinds == kind
            if mask.any():
                entry[f"type{kind}"], entry[f"type{kind}_se"] = metrics.cluster_mean_sem(
                    correct[mask], episode[mask])
            else:
                entry[f"type{kind}"], entry[f"type{kind}_se"] = float("nan"), float("nan")
            entry[f"type{kind}_n"] = int(mask.sum())
        entry["decided"] = float(decided.mean())
        table[name] = entry
    return table


def qa_beliefs(models: dict, view: HostEpisodes, questions, params: EnvParams, *,
               num_particles: int, max_new_tokens: int, seed: int = 0,
               temperature: float = 0.0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Goal distributions at the questions' (episode, step) rows for each model in `models`
    (name -> its queries, `TextQueries` or `VLQueries`; batched as in `model_beliefs`) and for the
    baselines (random goal, exact posterior and its top-N, named as in the goal table), and
    each question's row index."""
    rows, index = qa_rows(questions)
    beliefs = {}
    for name, queries in models.items():
        beliefs[name], _ = model_beliefs(queries, view, rows, num_particles=num_particles,
                                         max_new_tokens=max_new_tokens,
                                         num_objects=params.num_objects,
                                         temperature=temperature, seed=seed)
    refs = reference_beliefs(view, rows, params, seed, num_particles)
    beliefs.update({"random goal": refs["random"], "exact posterior": refs["exact"],
                    f"exact posterior top-{num_particles}": refs[f"exact_top{num_particles}"]})
    return beliefs, index


__all__ = ["TextQueries", "dense", "model_beliefs", "progress_curves", "qa_beliefs",
           "qa_from_beliefs", "qa_rows", "qa_scores", "reference_beliefs", "score_methods",
           "steps_to_score"]
