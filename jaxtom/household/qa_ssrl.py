"""Household QA on the one trainer (MindZero section 5.3, Table 4b): the model reads a
question (`qa.render_question`, Figure 8 or compact) and answers with a letter; SSRL rewards
the answer with `qa.rewards` (log max(P(last action | chosen option), 1e-7); unparseable
log(1e-7) - 1), no label.

- `QAPrompts`: token ids of each question's prompt, encoded once; `labels(i)` the option
  names the parser checks (goal questions only).
- `QARollout`: `group_size` sampled answers per question, group advantages; with `mirror`,
  each question is also posed with its options swapped, as its own group in the same step
  (the gridworld's fix for a drift to one letter). The format warm-up is
  `mindzero.qa.QAWarmupRollout` (uniformly random letters) on these prompts.
- `answer_questions` / `evaluate_model`: the model answers every question (greedy, or sampled
  at the public code's validation settings); Table 4b's accuracy per type with TFLOPs per
  question, beside the model-free rows of `qa.baseline_tables`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxtom.household import qa
from jaxtom.household.qa_answers import parse_answer
from jaxtom.household.text import natural
from jaxtom.rl.distributed import generate_rows
from jaxtom.rl.losses import group_advantages
from jaxtom.rl.trainer import Rollout, completion_rows, sample_rows

SAMPLED = {"temperature": 0.8, "top_p": 0.95}


def mirrored(q: qa.Question) -> qa.Question:
    """The same question with its options (and their likelihoods) in the other order."""
    return dataclasses.replace(q, options=q.options[::-1], answer=1 - q.answer,
                               log_lik=q.log_lik[::-1])


class QAPrompts:
    def __init__(self, observation: str, codec, episodes, questions):
        self.observation, self.codec = observation, codec
        self.episodes, self.questions = list(episodes), list(questions)
        self.cache: dict[int, list[int]] = {}

    def text(self, i: int) -> str:
        q = self.questions[i]
        return qa.render_question(self.observation, self.episodes[q.episode], q)

    def __call__(self, i: int) -> list[int]:
        if i not in self.cache:
            self.cache[i] = self.codec.prompt_ids(self.text(i))
        return self.cache[i]

    def labels(self, i: int):
        q = self.questions[i]
        return None if q.is_belief else tuple(natural(k) for k in q.options)


def question_tasks(questions) -> list[dict]:
    """Task records: the question's index only (never its answer)."""
    return [{"question": i} for i in range(len(questions))]


class QARollout:
    def __init__(self, trainer_cfg, codec, prompts: QAPrompts, mirror: bool = False):
        self.c, self.codec, self.prompts, self.mirror = trainer_cfg, codec, prompts, mirror
        self.n = len(prompts.questions)
        if mirror:  # questions n.. are the mirrored copies of 0..n-1
            prompts.questions = prompts.questions[:self.n] + [
                mirrored(q) for q in prompts.questions[:self.n]]

    def __call__(self, model, tasks, key, step) -> Rollout:
        c, G = self.c, self.c.group_size
        if self.mirror:
            tasks = [{"question": int(t["question"]) + m * self.n, "row": 2 * int(t["row"]) + m}
                     for t in tasks for m in (0, 1)]
        index = [int(t["question"]) for t in tasks for _ in range(G)]
        prompts = [self.prompts(i) for i in index]
        completions = generate_rows(model, prompts, sample_rows(tasks, G), key=key,
                                    max_new_tokens=c.max_new_tokens, temperature=c.temperature,
                                    top_p=c.top_p, stop=list(self.codec.eos_ids),
                                    pad_id=self.codec.pad_id, rows_per_call=c.rollout_rows)
        texts = [self.codec.decode(s) for s in completions]
        choice = np.array([parse_answer(x, self.prompts.labels(i)) for x, i in zip(texts, index)])
        qs = [self.prompts.questions[i] for i in index]
        reward = qa.rewards(qs, choice)
        adv = np.asarray(group_advantages(np.float32(reward), G))
        seqs, masks = completion_rows(prompts, completions)
        groups = [int(t["row"]) for t in tasks for _ in range(G)]
        answer = np.array([q.answer for q in qs])
        return Rollout(seqs, masks, adv.tolist(), groups, count=len(seqs), metrics={
            "reward_mean": float(reward.mean()), "valid": float(np.mean(choice >= 0)),
            "answer_a": float(np.mean(choice == 0)),
            "agrees_with_label": float(np.mean(choice == answer)),  # logged, never rewarded
            "flat_groups": float(np.mean(np.ptp(reward.reshape(-1, G), axis=1) == 0))})


def answer_questions(model, codec, prompts: QAPrompts, *, max_new_tokens: int, key,
                     temperature: float = 0.0, top_p: float = 1.0, rows_per_call: int = 256):
    """(choices [Q] in {0, 1, -1}, texts, tokens per question) of `model`."""
    from jaxtom.sampling import generate
    ids = [prompts(i) for i in range(len(prompts.questions))]
    texts, tokens = [], []
    for lo in range(0, len(ids), rows_per_call):
        chunk = ids[lo:lo + rows_per_call]
        out = generate(model, chunk, max_new_tokens=max_new_tokens, temperature=temperature,
                       top_p=top_p, key=key, stop=list(codec.eos_ids), pad_id=codec.pad_id,
                       row_ids=np.arange(lo, lo + len(chunk)))
        for p, s in zip(chunk, out.sequences()):
            texts.append(codec.decode(s))
            tokens.append(len(p) + len(s))
    choices = np.array([parse_answer(x, prompts.labels(i)) for i, x in enumerate(texts)])
    return choices, texts, np.asarray(tokens, float)


def evaluate_model(models: dict, observation: str, episodes, questions, *,
                   max_new_tokens: int, key, seed: int = 0, sampled: bool = True) -> dict:
    """Table 4b: for each `name -> (model, codec)`, greedy (and sampled) accuracy per type
    with TFLOPs per question (2 x active parameters x tokens), then the model-free rows."""
    from jaxtom import flops
    tables = {}
    for name, (model, codec) in models.items():
        prompts = QAPrompts(observation, codec, episodes, questions)
        per_token = flops.inference_tflops(flops.active_params(model), 1)
        for mode, kw in (("greedy", {}),) + ((("sampled", SAMPLED),) if sampled else ()):
            choices, texts, tokens = answer_questions(model, codec, prompts, key=key,
                                                      max_new_tokens=max_new_tokens, **kw)
            table = qa.accuracy_table(choices, questions)
            table["tflops_per_question"] = per_token * float(tokens.mean())
            table["valid"] = float(np.mean(choices >= 0))
            tables[f"{name} ({mode})"] = table
    tables.update(qa.baseline_tables(episodes, questions, seed))
    return tables


__all__ = ["QAPrompts", "QARollout", "SAMPLED", "answer_questions", "evaluate_model",
           "mirrored", "question_tasks"]
