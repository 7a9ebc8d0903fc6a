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

from jaxtom.mindzero.household import qa
from jaxtom.mindzero.household.qa_answers import parse_answer
from jaxtom.household.text import natural
from jaxtom.mindzero import qa as mindzero_qa
from jaxtom.mindzero.qa import QARollout as MindZeroQARollout

SAMPLED = {"temperature": 0.8, "top_p": 0.95}


def mirrored(q: qa.Question) -> qa.Question:
    """The same question with its options (and their likelihoods) in the other order."""
    return dataclasses.replace(q, options=q.options[::-1], answer=1 - q.answer,
                               log_lik=q.log_lik[::-1])


class QAPrompts(mindzero_qa.QAPrompts):
    """`mindzero.qa.QAPrompts` over household episodes (sampling and batching inherited)."""

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


class QARollout(MindZeroQARollout):
    """The gridworld QA rollout (`jaxtom.mindzero.qa.QARollout`: groups, mirrored options,
    metrics) with the household's answer parser and label-free reward (`qa.rewards`)."""

    mirrored = staticmethod(mirrored)
    parse = staticmethod(parse_answer)
    agreement_metric = "agrees_with_label"

    def __init__(self, trainer_cfg, codec, prompts: QAPrompts, mirror: bool = False):
        super().__init__(trainer_cfg, None, codec, prompts, table=np.zeros(0), mirror=mirror)

    def rewards(self, questions, choice) -> np.ndarray:
        return np.float32(qa.rewards(questions, choice))


def answer_questions(model, codec, prompts: QAPrompts, *, max_new_tokens: int, key,
                     temperature: float = 0.0, top_p: float = 1.0, rows_per_call: int = 256):
    """(choices [Q] in {0, 1, -1}, texts, tokens per question) of `model` (the gridworld's
    `qa_eval.answer` with the household's parser)."""
    from jaxtom.mindzero.qa_eval import answer
    return answer(model, codec, prompts, max_new_tokens=max_new_tokens, key=key,
                  temperature=temperature, top_p=top_p, rows_per_call=rows_per_call,
                  parse=parse_answer)


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


def evaluate_run_qa(cfg, models: dict, test) -> dict:
    """`jaxtom eval`'s Table 4b for a household run (`evaluate.evaluate_run` calls it):
    questions from the first `eval.qa_episodes` held-out episodes (0: skip), each model in
    `models` (name -> (model, codec)) answering itself (`evaluate_model`, the run's
    `data.observation` form), beside the planner's own belief, the reward's choice and a random
    answerer."""
    import jax

    n = cfg.mindzero.eval.qa_episodes
    if not n:
        return {}
    episodes = list(test)[:n]
    questions = qa.make_questions(episodes, seed=cfg.trainer.seed, per_type=2)
    if not questions:
        return {}
    tables = evaluate_model(models, cfg.mindzero.data.observation, episodes, questions,
                            max_new_tokens=cfg.trainer.max_new_tokens,
                            key=jax.random.key(cfg.trainer.seed), seed=cfg.trainer.seed)
    title = (f"Household QA (Table 4b protocol) on {len(episodes)} held-out episodes, "
             f"{len(questions)} questions; binary choice, chance 0.5; mean ± SE, "
             "episode-clustered; each model answers itself (greedy and sampled at 0.8/0.95).")
    return {"qa": tables, "qa_markdown": qa.markdown(tables, title)}


QUESTIONS_PER_TYPE = 2  # per episode and type (where the type can be posed), as Table 4b's


@dataclasses.dataclass
class HouseholdQASet:
    """Episodes with their questions (up to `QUESTIONS_PER_TYPE` per type each)."""
    episodes: list
    questions: list

    def __len__(self) -> int:  # episodes
        return len(self.episodes)


class HouseholdQA:
    """The household's MMToM-style questions as the QA driver (`mindzero.qa_train`) asks them
    (`mindzero.data.task="household_qa"`): episodes on the training / held-out apartments
    (`mindzero.household.*_apartments`), questions of every type, the household's prompts,
    parser and label-free reward, Table 4b's accuracy and model-free rows."""
    parse = staticmethod(parse_answer)

    def sets(self, config) -> tuple[HouseholdQASet, HouseholdQASet]:
        from jaxtom.mindzero.household import data as hd
        seed = config.trainer.seed + config.mindzero.household.seed_offset
        out = []
        for split, offset in (("train", 0), ("test", 1)):
            episodes = hd.make_episodes(config, split)
            out.append(HouseholdQASet(episodes, qa.make_questions(
                episodes, seed=seed + offset, per_type=QUESTIONS_PER_TYPE)))
        return out[0], out[1]

    def texts(self, config, sets) -> list[str]:
        obs = config.mindzero.data.observation
        return [qa.render_question(obs, s.episodes[q.episode], q) for s in sets
                for q in s.questions]

    def prompts(self, config, codec, qa_set: HouseholdQASet, model) -> QAPrompts:
        return QAPrompts(config.mindzero.data.observation, codec, qa_set.episodes,
                         qa_set.questions)

    def rollout(self, config, codec, prompts: QAPrompts, train_set) -> QARollout:
        return QARollout(config.trainer, codec, prompts, mirror=config.mindzero.data.qa_mirror)

    @staticmethod
    def accuracy_table(choices, questions) -> dict:
        table = qa.accuracy_table(choices, questions)
        table["valid"] = float(np.mean(np.asarray(choices) >= 0))
        return table

    def baselines(self, config, test: HouseholdQASet) -> dict:
        return qa.baseline_tables(test.episodes, test.questions, config.trainer.seed)

    @staticmethod
    def markdown(results: dict) -> str:
        return qa.markdown(results["accuracy"], (
            f"Household QA (Table 4b protocol) on {results['episodes']} held-out episodes, "
            f"{results['questions']} questions; binary choice, chance 0.5; mean ± SE, "
            "episode-clustered; each model answers itself (greedy, and sampled at 0.8/0.95)."))


__all__ = ["HouseholdQA", "HouseholdQASet", "QAPrompts", "QARollout", "SAMPLED",
           "answer_questions", "evaluate_model", "evaluate_run_qa",
           "mirrored", "question_tasks"]
