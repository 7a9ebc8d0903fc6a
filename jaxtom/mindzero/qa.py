"""MindZero question answering as the paper trains it (section 5.1, appendix B.2): the model
reads a binary-choice question about the human's goal and answers with one letter; SSRL scores
the answer with no label, by the log-likelihood of the observed actions under the chosen
option's goal (the public code's `rewards/gw_tom.py:compute_score_sum`).

- Prompts: `figure` is Figure 6's question with the Figure 11 transcript (what real LLMs read);
  `image` is Figure 6 with the picture instead (Qwen3-VL, Table 4a; `vl_qa`); `compact` is a
  short line for a model trained from scratch on a CPU (`compact_question`).
- `parse_answer`: lenient about the wrapping ("b", "(b).", "Answer: b", "b) green square"),
  strict about the choice: both letters, a letter outside the options, or a named option that
  contradicts the letter are unparseable, so hedging or padding cannot collect a reward.
- `qa_rewards`: `log P(a_1:t | goal of the chosen option)` from the cumulative planner table;
  an unparseable answer gets `(t + 1) log(floor)`, strictly below any answer's reward at that
  step (each of the t steps is floored at log(floor)). The public code's constant log(1e-12)
  is `mindzero.reward.format_penalty=-27.63`; it sits above many wrong answers' rewards, so
  a policy could learn to emit junk rather than risk a wrong letter.
- Rollouts on the one trainer: `QAWarmupRollout` (format only: uniformly random letters, never
  the answer) and `QARollout` (GRPO groups of answers, rewarded as above).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxtom import flops
from jaxtom.eval.answers import parse_answer
from jaxtom.gridworld.qa import Question
from jaxtom.gridworld.simulation import state_at
from jaxtom.gridworld.text import IMAGE_TOKEN, qa_prompt
from jaxtom.mindzero.observation import HostEpisodes, phase_start
from jaxtom.mindzero.reward import RewardConfig, qa_reward
from jaxtom.models.vl_prompts import IMAGE_PLACEHOLDER
from jaxtom.rl.distributed import generate_rows
from jaxtom.rl.losses import group_advantages
from jaxtom.rl.trainer import Rollout, compact_kwargs, completion_rows, sample_rows
from jaxtom.sampling.sampler import generate

KINDS = {1: "pick", 2: "place", 3: "place_carried"}  # question type -> gridworld.text kind
COMPACT_KIND = {1: "pick", 2: "place", 3: "carry"}
MAX_OFF = 9  # off-path counts in compact questions are capped here (one token each)

# --- the answer (read by `jaxtom.eval.answers.parse_answer`) -------------------------------


def qa_rewards(table, episode, step, option_goals, choice,
               cfg: RewardConfig = RewardConfig()) -> np.ndarray:
    """[B] rewards: `table[e, t, g]` is the cumulative `log P(a_1:t | g)` ([E, T + 1, G],
    `reward.cumulative_log_likelihoods`); sample b answered `choice[b]` in {0, 1, -1} to the
    question at (`episode[b]`, `step[b]`) with ordered-goal options `option_goals[b]`."""
    table = np.asarray(table)
    episode, step = np.asarray(episode, np.int64), np.asarray(step, np.int64)
    if table.ndim != 3 or np.any(step < 0) or np.any(step >= table.shape[1]):
        raise ValueError(f"need a [E, T + 1, G] table and steps in 0..{table.shape[1] - 1}; got "
                         f"table {table.shape}, steps {step.min(initial=0)}..{step.max(initial=0)}")
    return np.asarray(_qa_reward(table[episode, step], np.asarray(option_goals, np.int32),
                                 np.asarray(choice, np.int32), step.astype(np.int32), cfg))


_qa_reward = jax.jit(qa_reward, static_argnames=("cfg",))


# --- prompts --------------------------------------------------------------------------------
def off_path_moves(view: HostEpisodes, e: int, t: int, obj: int) -> int:
    """Moves in the current phase (since the last pick or put) after which the human was not
    closer to object `obj` by path distance: 0 means every move so far headed for it."""
    s = phase_start(view, e, t)
    d = np.array([view.distances(e, u)[obj] for u in range(s, t + 1)])
    moved = view.human_cell[e, s + 1:t + 1] != view.human_cell[e, s:t]
    return int(((d[1:] >= d[:-1]) & moved).sum())


def compact_question(view: HostEpisodes, q: Question) -> str:
    """`pick | given pink square | a yellow square | b brown square | a near 13 3 | b far 4 0`.

    The question (its kind, the named object, the options' labels), then the facts per
    option, last, next to where the answer is written: `far` / `near`, farther / not farther
    than the named object from the human's start (the nearest-first order the human follows);
    its path distance from the human now (`held` when carried); and how many moves of the
    current phase did not bring the human closer to it (capped at 9; 0: every move so far
    headed for it). All of it is read off the observed states up to the question's step;
    nothing about the goal or the answer."""
    e, t = int(q.episode), int(q.step)
    view.check_step(e, t)
    labels = view.labels[e]
    start = view.dist[e, view.start_cell[e], view.obj_cell[e, 0]].astype(int)
    now, held = view.distances(e, t), int(view.holding[e, t])
    parts = [COMPACT_KIND[q.kind], f"given {labels[q.given]}"]
    parts += [f"{letter} {labels[obj]}" for letter, obj in zip("ab", q.options)]
    for letter, obj in zip("ab", q.options):
        far = (start[obj], obj) > (start[q.given], q.given)
        dist = "held" if obj == held else str(min(int(now[obj]), 63))
        off = min(off_path_moves(view, e, t, obj), MAX_OFF)
        parts.append(f"{letter} {'far' if far else 'near'} {dist} {off}")
    return " | ".join(parts)


# whole tokens of the tiny model's BPE, so every compact question has the same layout
COMPACT_QA_WORDS = tuple(f" {w}" for w in ("far", "near", "given", "|")) + tuple(
    COMPACT_KIND.values())


def figure_question(view: HostEpisodes, q: Question) -> str:
    """Figure 6's question with the Figure 11 transcript (text modality) at the question's
    step."""
    e = int(q.episode)
    one = lambda tree: jax.tree.map(lambda x: x[e], tree)  # noqa: E731
    initial, traj = one(view.episodes.states), one(view.episodes.trajectories)
    return qa_prompt(state_at(initial, traj, int(q.step)), traj, KINDS[q.kind], q.given,
                     q.options, modality="text")


def image_question(view: HostEpisodes, q: Question) -> str:
    """Figure 6's question in its image modality (no transcript: the picture of the state at
    the question's step shows it) with one image placeholder (`vl_qa.VLQAPrompts` expands
    it to the picture's tokens)."""
    text = qa_prompt(view.state(int(q.episode), int(q.step)), None, KINDS[q.kind], q.given,
                     q.options, modality="image")
    if text.count(IMAGE_TOKEN) != 1:
        raise ValueError(f"the image question must have one {IMAGE_TOKEN} slot, found "
                         f"{text.count(IMAGE_TOKEN)}")
    return text.replace(IMAGE_TOKEN, IMAGE_PLACEHOLDER)


QUESTION_RENDERERS = {"compact": compact_question, "figure": figure_question,
                      "image": image_question}


def render_question(observation: str, view: HostEpisodes, q: Question) -> str:
    if observation not in QUESTION_RENDERERS:
        raise ValueError(f"unknown QA observation {observation!r}; expected one of "
                         f"{sorted(QUESTION_RENDERERS)}")
    return QUESTION_RENDERERS[observation](view, q)


class QAPrompts:
    """Token ids of each question's prompt, encoded once (revisited every epoch), and how
    questions are sampled and batched; `vl_qa.VLQAPrompts` does the same with pictures."""

    def __init__(self, observation: str, codec, view: HostEpisodes, questions: list[Question]):
        self.observation, self.codec, self.view = observation, codec, view
        self.questions = list(questions)
        self.cache: dict[int, list[int]] = {}

    def text(self, i: int) -> str:
        return render_question(self.observation, self.view, self.questions[i])

    def __call__(self, i: int) -> list[int]:
        if i not in self.cache:
            self.cache[i] = self.codec.prompt_ids(self.text(i))
        return self.cache[i]

    def labels(self, i: int) -> tuple[str, str]:
        q = self.questions[i]
        return tuple(self.view.labels[q.episode][o] for o in q.options)

    def generate_rows(self, model, index, row_ids, *, key, rows_per_call: int = 0, **kwargs):
        """Samples questions `index` (this process's rows, global `row_ids`) on every
        process together (`rl.distributed.generate_rows`)."""
        return generate_rows(model, [self(i) for i in index], row_ids, key=key,
                             rows_per_call=rows_per_call, **kwargs)

    def sample(self, model, index, *, key, row_ids, **kwargs):
        """One sampler call for questions `index` on this process alone (evaluation)."""
        return generate(model, [self(i) for i in index], key=key, row_ids=row_ids,
                        **kwargs).sequences()

    def batch(self, rollout: Rollout, index) -> Rollout:
        """The update's rows: text rows are the rollout's own."""
        return rollout

    def tflops_per_token_and_picture(self, model) -> tuple[float, float]:
        """(TFLOPs per token, per picture: none here), appendix A.2."""
        return flops.inference_tflops(flops.active_params(model), 1), 0.0


def mirrored(q: Question) -> Question:
    """The same question with its options in the other order (label-free: the letters swap
    with them, and so do the goals the reward reads)."""
    return dataclasses.replace(q, options=q.options[::-1], answer=1 - q.answer,
                               option_goals=q.option_goals[::-1])


def question_tasks(questions: list[Question]) -> list[dict]:
    """Task records: only the question's index (its answer is never attached)."""
    return [{"question": i} for i in range(len(questions))]


# --- rollouts -------------------------------------------------------------------------------
class QAWarmupRollout:
    """The format warm-up: each prompt's target is a uniformly random letter drawn from
    `default_rng([seed, step, row])`, never the answer, so the model learns to answer with one
    letter and stays at chance (SSRL is self-supervised: no label enters training)."""

    def __init__(self, codec, prompts: QAPrompts, seed: int):
        self.codec, self.prompts, self.seed = codec, prompts, seed

    def __call__(self, model, tasks, key, step) -> Rollout:
        prompts, targets = [], []
        index = [int(task["question"]) for task in tasks]
        for task, i in zip(tasks, index):
            rng = np.random.default_rng([self.seed, step, int(task["row"])])
            prompts.append(self.prompts(i))
            targets.append(self.codec.completion_ids("ab"[int(rng.integers(0, 2))]))
        seqs, masks = completion_rows(prompts, targets)
        return self.prompts.batch(Rollout(seqs, masks, [1.0] * len(seqs),
                                          [int(t["row"]) for t in tasks], count=len(seqs)),
                                  index)


class QARollout:
    """SSRL on questions: `group_size` answers per question, rewarded by `qa_rewards`, group
    advantages. With `mirror`, each question is also asked with its options swapped, as a
    group of its own in the same step: every step then rewards `a` and `b` equally often in
    expectation, so a letter preference that ignores the question gets no net push (without
    it the tiny model drifted to one letter and stayed there: once every sample of a group is
    the same letter, the group's advantages are zero). Metrics include the share of parseable
    answers, of answers `a`, and (for logging only, never in the reward) how often the answer
    matched the exact posterior's."""

    def __init__(self, trainer_cfg, reward_cfg: RewardConfig, codec, prompts: QAPrompts, table,
                 mirror: bool = False):
        self.c, self.reward_cfg, self.codec = trainer_cfg, reward_cfg, codec
        self.prompts, self.table, self.mirror = prompts, np.asarray(table), mirror
        self.n = len(prompts.questions)
        if mirror:  # questions n.. are the mirrored copies of 0..n-1
            prompts.questions = prompts.questions[:self.n] + [
                self.mirrored(q) for q in prompts.questions[:self.n]]

    mirrored = staticmethod(mirrored)  # the question with its options swapped
    parse = staticmethod(parse_answer)  # (text, option labels) -> 0, 1 or -1
    agreement_metric = "agrees_with_posterior"  # logged only, never in the reward

    def rewards(self, questions, choice) -> np.ndarray:
        """[B] rewards of the parsed choices (-1: unparseable); other domains override."""
        return qa_rewards(self.table, [q.episode for q in questions],
                          [q.step for q in questions], [q.option_goals for q in questions],
                          choice, self.reward_cfg)

    def __call__(self, model, tasks, key, step) -> Rollout:
        c, G = self.c, self.c.group_size
        if self.mirror:  # task row r -> groups 2r (as posed) and 2r + 1 (mirrored)
            tasks = [{"question": int(t["question"]) + m * self.n, "row": 2 * int(t["row"]) + m}
                     for t in tasks for m in (0, 1)]
        index = [int(task["question"]) for task in tasks for _ in range(G)]
        prompts = [self.prompts(i) for i in index]
        completions = self.prompts.generate_rows(
            model, index, sample_rows(tasks, G), key=key, max_new_tokens=c.max_new_tokens,
            temperature=c.temperature, top_p=c.top_p, stop=list(self.codec.eos_ids),
            pad_id=self.codec.pad_id, rows_per_call=c.rollout_rows,
            **compact_kwargs(c))
        texts = [self.codec.decode(s) for s in completions]
        choice = np.array([self.parse(x, self.prompts.labels(i)) for x, i in zip(texts, index)])
        qs = [self.prompts.questions[i] for i in index]
        reward = np.asarray(self.rewards(qs, choice))
        adv = np.asarray(group_advantages(reward, G, scale=c.advantage_scale,
                                           std_floor=c.advantage_std_floor))
        seqs, masks = completion_rows(prompts, completions)
        groups = [int(task["row"]) for task in tasks for _ in range(G)]
        answer = np.array([q.answer for q in qs])
        return self.prompts.batch(Rollout(
            seqs, masks, adv.tolist(), groups, count=len(seqs),
            prompt_lens=[len(p) for p in prompts], metrics={
            "reward_mean": float(reward.mean()), "reward_sq": float(np.mean(reward ** 2)),
            "valid": float(np.mean(choice >= 0)), "answer_a": float(np.mean(choice == 0)),
            self.agreement_metric: float(np.mean(choice == answer)),
            "completion_tokens": float(np.mean([len(s) for s in completions])),
            "flat_groups": float(np.mean(np.ptp(reward.reshape(-1, G), axis=1) == 0))}), index)


__all__ = ["COMPACT_QA_WORDS", "QAPrompts", "QARollout", "QAWarmupRollout", "compact_question",
           "figure_question", "image_question", "mirrored", "off_path_moves",
           "qa_rewards", "question_tasks", "render_question"]
