"""Training a MindZero QA model (`mindzero.data.task="qa"`, or `"household_qa"` through
`household.qa_ssrl.HouseholdQA`) on the one trainer.

Data (appendix B.2): `data.train_episodes` training episodes that each carry questions of
types 1-3 (`gridworld.qa_episodes`) and `data.eval_episodes` held-out ones (no training wall
layout; with `data.split="labels"` the paper's held-out labels too), each set from its own
key. Phases, each checkpointed under the run directory and resumable like the goal
path (`mindzero.goals_text`): an optional format warm-up on uniformly random letters
(`warmup/`), then SSRL on the QA reward (`ssrl/`, final parameters in `checkpoint/`). The
tiny CPU model gets a BPE trained on the run's own prompts (`tokenizer.json`).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxtom import storage
from jaxtom.config import ConfigError
from jaxtom.gridworld import qa_episodes
from jaxtom.gridworld.episodes import layout_keys
from jaxtom.mindzero import goals_text, qa_eval
from jaxtom.mindzero.config import MindZeroSection
from jaxtom.mindzero.household.config import HouseholdMindZero
from jaxtom.mindzero.household.qa_ssrl import HouseholdQA
from jaxtom.mindzero.observation import HostEpisodes
from jaxtom.mindzero.policy import train_bpe
from jaxtom.mindzero.qa import (
    COMPACT_QA_WORDS,
    QAPrompts,
    QARollout,
    QAWarmupRollout,
    parse_answer,
    question_tasks,
    render_question,
)
from jaxtom.mindzero.reward import cumulative_log_likelihoods
from jaxtom.mindzero.task import Prepared, Task, register
from jaxtom.mindzero.vl_eval import load_vl_model
from jaxtom.mindzero.vl_qa import VLQAPrompts
from jaxtom.mindzero.vl_train import build_vl_model
from jaxtom.models.vl_prompts import IMAGE_PAD, VISION_END, VISION_START

_TRAIN_KEY, _TEST_KEY = 0x51A0, 0x51A1  # folded into the run's seed


@dataclasses.dataclass
class QASet:
    """Episodes with their questions (three per episode) and host copies for prompts."""
    episodes: object
    questions: list
    view: HostEpisodes

    @classmethod
    def make(cls, episodes, questions) -> "QASet":
        return cls(episodes, list(questions), HostEpisodes.from_episodes(episodes))

    def __len__(self) -> int:  # episodes
        return len(self.view)


def qa_data(config) -> tuple[QASet, QASet]:
    """(train, held-out) QA sets of the run, deterministic in `trainer.seed`."""
    d, seed = config.mindzero.data, config.trainer.seed
    root = jax.random.key(seed)
    train = qa_episodes(jax.random.fold_in(root, _TRAIN_KEY),
                        goals_text.episode_params(config, "train"),
                        d.train_episodes, batch_size=512, seed=seed)
    test = qa_episodes(jax.random.fold_in(root, _TEST_KEY),
                       goals_text.episode_params(config, "test"),
                       d.eval_episodes, batch_size=512, seed=seed + 1000,
                       exclude_layouts=layout_keys(train[0]))
    return QASet.make(*train), QASet.make(*test)


def likelihood_table(qa: QASet, config) -> np.ndarray:
    """[E, T + 1, G] cumulative planner log-likelihoods of the set's episodes."""
    trajectories = jax.tree.map(jnp.asarray, qa.episodes.trajectories)
    return np.asarray(cumulative_log_likelihoods(trajectories, goals_text.env_params(config)))


def build_model(config, run_dir: Path, sets=(), mesh=None):
    """(model, codec): the config's checkpoint, or the tiny decoder over a BPE trained on the
    sets' prompts and both answers (written to RUN_DIR/tokenizer.json once); a Qwen3-VL
    (`vl_train.build_vl_model`) for questions with pictures (`observation='image'`)."""
    image = config.mindzero.data.observation == "image"
    path = storage.path(run_dir) / "tokenizer.json"
    if not config.model.path and not path.exists():
        texts = qa_domain(config).texts(config, sets) + ["a", "b"] * 50
        tok = train_bpe(texts, config.model.vocab_size)
        if image:
            tok.backend.add_special_tokens([VISION_START, IMAGE_PAD, VISION_END])
        tok.backend.add_tokens(list(COMPACT_QA_WORDS))
        if jax.process_index() == 0:
            storage.save_tokenizer(path, tok.backend)
    tokenizer_path = path if not config.model.path else None
    if image:
        return build_vl_model(config, run_dir, tokenizer_path=tokenizer_path, mesh=mesh)
    return goals_text.build_model(config, run_dir, tokenizer_path=tokenizer_path, mesh=mesh)


def load_model(config, checkpoint: str | Path):
    """(model, codec) saved at `checkpoint` by a QA run of either observation."""
    if config.mindzero.data.observation == "image":
        return load_vl_model(config, checkpoint)
    return goals_text.load_model(config, checkpoint)


def question_prompts(config, codec, qa: QASet, model) -> QAPrompts:
    """The prompts of `qa`'s questions for `model`: text, or text with pictures."""
    d = config.mindzero.data
    if d.observation == "image":
        return VLQAPrompts(codec, qa.view, qa.questions, model.config, d.image_cell_size,
                           d.image_style)
    return QAPrompts(d.observation, codec, qa.view, qa.questions)


class GridworldQA:
    """The gridworld's questions (types 1-3, appendix B.2) as the QA driver asks them: the
    sets, the prompts' texts, the rollout (reward: the planner's action likelihood under the
    chosen option's goal) and the answer parser. `household.qa_ssrl.HouseholdQA` is the same
    for the household's MMToM-style questions."""
    parse = staticmethod(parse_answer)

    def sets(self, config) -> tuple[QASet, QASet]:
        return qa_data(config)

    def texts(self, config, sets) -> list[str]:
        return [render_question(config.mindzero.data.observation, s.view, q)
                for s in sets for q in s.questions]

    def prompts(self, config, codec, qa_set: QASet, model) -> QAPrompts:
        return question_prompts(config, codec, qa_set, model)

    def rollout(self, config, codec, prompts: QAPrompts, train_set: QASet) -> QARollout:
        return QARollout(config.trainer, config.mindzero.reward, codec, prompts,
                         likelihood_table(train_set, config),
                         mirror=config.mindzero.data.qa_mirror)

    accuracy_table = staticmethod(qa_eval.accuracy_table)
    markdown = staticmethod(qa_eval.markdown)

    def baselines(self, config, test: QASet) -> dict:
        """The model-free rows: exact posterior, the reward's own choice, coin flips."""
        choices = qa_eval.baseline_choices(test.questions, likelihood_table(test, config),
                                           config.trainer.seed)
        return {name: qa_eval.accuracy_table(c, test.questions) for name, c in choices.items()}


def qa_domain(config):
    """The QA domain of `mindzero.data.task`: the gridworld's (`qa`) or the household's
    (`household_qa`)."""
    if config.mindzero.data.task == "household_qa":
        return HouseholdQA()
    return GridworldQA()


def row_len(config, prompts: QAPrompts, completion: int, quantum: int = 16) -> int:
    longest = max(len(prompts(i)) for i in range(len(prompts.questions)))
    return int(np.ceil((longest + completion + 1) / quantum) * quantum)


def answer_monitor(config, prompts: QAPrompts, qa, num_questions: int = 128,
                   parse=parse_answer):
    """An eval hook: greedy answers to a fixed sample of held-out questions (`prompts`: the
    set's); accuracy, the share parsed and of `a`, and how many distinct answers (1 = the
    answer ignores the question). Labels are read here only, for logging."""
    codec = prompts.codec
    pick = np.sort(np.random.default_rng(config.trainer.seed + 11).choice(
        len(qa.questions), min(num_questions, len(qa.questions)), replace=False))
    answer = np.array([qa.questions[i].answer for i in pick])

    def score(step, model) -> dict:
        seqs = prompts.sample(model, [int(i) for i in pick], key=jax.random.key(0),
                              row_ids=np.arange(len(pick)),
                              max_new_tokens=config.trainer.max_new_tokens, temperature=0.0,
                              stop=list(codec.eos_ids), pad_id=codec.pad_id)
        texts = [codec.decode(s) for s in seqs]
        choice = np.array([parse(x, prompts.labels(int(i))) for x, i in zip(texts, pick)])
        return {"accuracy": float(np.mean(choice == answer)), "valid": float(np.mean(choice >= 0)),
                "answer_a": float(np.mean(choice == 0)), "distinct_answers": float(len(set(texts)))}
    return score


def prepare(config, run_dir: Path, mesh):
    """Question answering (either domain) for the one driver (`driver.train`): the sets,
    tokenizer and model; a warm-up on uniformly random letters (not checked: a letter
    answer has no observation to copy); SSRL on the domain's QA reward."""
    domain = qa_domain(config)
    train_set, test_set = domain.sets(config)
    model, codec = build_model(config, run_dir, (train_set, test_set), mesh=mesh)
    prompts = domain.prompts(config, codec, train_set, model)
    rollout = domain.rollout(config, codec, prompts, train_set)  # (adds mirrored prompts)
    test_prompts = domain.prompts(config, codec, test_set, model)
    tasks = question_tasks(train_set.questions)

    rows = lambda completion: row_len(config, prompts, max(completion, 2))  # noqa: E731
    prompts.row_len = rows(config.trainer.max_new_tokens)  # image rows are built at this length
    return Prepared(
        model=model, codec=codec, row_len=rows,
        monitor=lambda config: answer_monitor(config, test_prompts, test_set,
                                              parse=domain.parse),
        warmup_tasks=tasks,
        warmup_rollout=lambda config, wcfg: QAWarmupRollout(codec, prompts,
                                                            config.trainer.seed),
        ssrl_tasks=tasks, ssrl_rollout=lambda config, model: rollout,
        result={"test": test_set})


def starting_model(cfg, run_dir: Path):
    """The untrained model: the warm-up checkpoint when the run had one, else the initial
    weights the run started from."""
    run_dir = storage.path(run_dir)
    if (run_dir / "warmup").exists():
        return load_model(cfg, run_dir / "warmup")
    return build_model(cfg, run_dir)


def evaluate_qa_run(cfg, checkpoint: str | Path, *, test=None, train=None) -> dict:
    """The Table 4a (gridworld) or 4b (household, `task=household_qa`) rows for the run at
    `checkpoint` on its held-out questions (`test`: the run's held-out set, regenerated from
    the config when not given; the training set `train` is not read); writes qa_results.json/.md next to the checkpoint and prints
    the table."""
    t0 = time.perf_counter()
    domain = qa_domain(cfg)
    checkpoint = storage.path(checkpoint)
    run_dir = checkpoint.parent
    if test is None:
        _, test = domain.sets(cfg)
    qs, seed = test.questions, cfg.trainer.seed
    models = {"MindZero": load_model(cfg, checkpoint), "untrained": starting_model(cfg, run_dir)}
    table, answers = {}, {}
    for name, (model, codec) in models.items():
        prompts = domain.prompts(cfg, codec, test, model)
        tf_per_token, tf_per_picture = prompts.tflops_per_token_and_picture(model)
        for mode, kw in (("greedy", {}), ("sampled", qa_eval.SAMPLED)):
            key = jax.random.fold_in(jax.random.key(seed), 7)
            choices, texts, tokens = qa_eval.answer(model, codec, prompts, key=key,
                                            max_new_tokens=cfg.trainer.max_new_tokens,
                                            parse=domain.parse, **kw)
            row = f"{name} ({mode})"
            table[row] = domain.accuracy_table(choices, qs)
            table[row].update(tflops_per_question=tf_per_token * float(tokens.mean())
                              + tf_per_picture,
                              distinct_answers=len(set(texts)))
            answers[row] = texts
    table.update(domain.baselines(cfg, test))
    results = {"episodes": len(test), "questions": len(qs), "accuracy": table,
               "eval_s": time.perf_counter() - t0}
    text = domain.markdown(results)
    if jax.process_index() == 0:
        storage.write_json(run_dir / "qa_results.json", {**results, "answers": answers},
                           indent=1, default=float)
        storage.write_text(run_dir / "qa_results.md", text + "\n")
    print(text)
    return results


def validate(config) -> None:
    """What QA cannot run with: observations that ask for goals, a checked warm-up (its
    random letters have no held-out check to act on) and exploration of a probability digit
    (a letter answer has none)."""
    d, w, task = config.mindzero.data, config.mindzero.warmup, config.mindzero.data.task

    def check(ok, field, expected, got):
        if not ok:
            raise ConfigError(field, expected, got)

    if task == "qa":
        check(d.observation != "image_short", "mindzero.data.observation",
              "'image' for QA with pictures (image_short's line asks for goals)", d.observation)
        check(d.observation not in ("compact_closing", "compact_ranked"),
              "mindzero.data.observation", "'figure', 'compact' or 'image' for "
              "data.task='qa'", d.observation)
        check(d.image_style != "cells_ranked", "mindzero.data.image_style",
              "'figure' or 'cells' for data.task='qa' (as QA reads no compact_ranked)",
              d.image_style)
        check(not d.val_episodes, "mindzero.data.val_episodes", "0 for data.task='qa' "
              "(validation episodes exist for goal tasks over text)", d.val_episodes)
    for name in ("min_distinct", "min_lead", "retries", "check_at", "read_steps"):
        check(not getattr(w, name), f"mindzero.warmup.{name}",
              f"0 for mindzero.data.task='{task}' (the QA warm-up is not checked, so nothing "
              "would act on it)", getattr(w, name))
    check(not config.trainer.explore_temperature, "trainer.explore_temperature",
          f"0 for mindzero.data.task='{task}' (its answers have no probability digit to "
          "explore)", config.trainer.explore_temperature)


register(Task("qa", prepare=prepare, evaluate=evaluate_qa_run, section=MindZeroSection,
              validate=validate,
              about="binary-choice questions on the gridworld (Table 4a), text or image"))
register(Task("household_qa", prepare=prepare, evaluate=evaluate_qa_run,
              section=HouseholdMindZero, validate=validate,
              about="MMToM-style household questions (Table 4b)"))
