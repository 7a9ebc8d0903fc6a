"""The GRPO loop: sample groups, score them, pack, update, log, checkpoint, resume.

Everything paper-specific comes in through two objects: the task records (dicts with at
least a `"prompt"` token list) and a `RewardFn`. Each step's sampling key is
`fold_in(state.rng, step)`, so a run resumed from a checkpoint draws exactly the samples the
uninterrupted run would have drawn.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import grain
import jax
import numpy as np

from jaxtom import sampling
from jaxtom.models.decoder import Decoder
from jaxtom.rl.batch import pack_sequences
from jaxtom.rl.checkpoint import Checkpointer
from jaxtom.rl.logging import MetricsLogger
from jaxtom.rl.losses import group_advantages
from jaxtom.rl.step import Learner, StepConfig, TrainState


class RewardFn(Protocol):
    """Per-sequence rewards for completions (token lists) of the given task records."""

    def __call__(self, completions: Sequence[Sequence[int]],
                 tasks: Sequence[dict[str, Any]]) -> Sequence[float]: ...


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    workdir: str = "runs/default"
    total_steps: int = 100
    prompts_per_step: int = 4
    group_size: int = 4
    max_new_tokens: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    row_len: int = 64  # tokens per packed row
    num_rows: int = 0  # rows per batch; 0: one sequence per row
    stop_tokens: tuple[int, ...] = ()
    pad_id: int = 0
    checkpoint_every: int = 50
    keep_checkpoints: int = 2
    eval_every: int = 0
    log_every: int = 1
    seed: int = 0
    progress: bool = True


def task_iterator(tasks: Sequence[dict], batch_size: int, seed: int):
    """Endless shuffled batches of task records, this process's shard only (grain)."""
    ds = grain.MapDataset.source(list(tasks))
    ds = ds[jax.process_index()::jax.process_count()]
    # drop_remainder: an endless stream has no remainder, and without it grain overflows the
    # length of a batch-1 view of an endless dataset
    ds = ds.seed(seed).shuffle().repeat(None).batch(batch_size, drop_remainder=True, batch_fn=list)
    return iter(ds.to_iter_dataset())


def build_batch(prompts, completions, rewards, group_size, num_rows, row_len, pad_id):
    """Packs prompt+completion sequences with the completion tokens as the policy mask."""
    adv = np.asarray(group_advantages(np.asarray(rewards, np.float32), group_size))
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions)]
    masks = [[0.0] * len(p) + [1.0] * len(c) for p, c in zip(prompts, completions)]
    return pack_sequences(seqs, masks, adv, [i // group_size for i in range(len(seqs))],
                          num_rows=num_rows or len(seqs), row_len=row_len, pad_id=pad_id)


class Trainer:
    """Runs GRPO on `tasks` with `reward_fn`; `eval_hooks(step, model) -> dict` add metrics."""

    def __init__(self, model: Decoder, tasks: Sequence[dict], reward_fn: RewardFn,
                 step_cfg: StepConfig, cfg: TrainerConfig, mesh=None,
                 eval_hooks: Sequence[Callable[[int, Decoder], dict]] = ()):
        if jax.process_count() > 1:
            raise NotImplementedError(
                "multi-process rollouts are not wired yet: the update step is multi-host "
                "(Learner.put_batch), but the trainer samples on one process")
        if cfg.group_size < 2:
            raise ValueError(f"group_size must be >= 2 for group advantages, got "
                             f"{cfg.group_size}")
        if not tasks or any("prompt" not in t for t in tasks):
            raise ValueError("tasks must be a non-empty list of dicts with a 'prompt' token list")
        self.model0, self.tasks, self.reward_fn = model, list(tasks), reward_fn
        self.cfg, self.eval_hooks = cfg, list(eval_hooks)
        self.learner = Learner(model, step_cfg, mesh=mesh)

    def run(self) -> TrainState:
        cfg = self.cfg
        workdir = Path(cfg.workdir)
        ckpt = Checkpointer(workdir / "checkpoints", keep=cfg.keep_checkpoints)
        state = self.learner.init_state(self.model0, seed=cfg.seed)
        data = task_iterator(self.tasks, cfg.prompts_per_step, cfg.seed)
        if ckpt.latest_step() is not None:
            state, data_state = ckpt.restore(state)
            if data_state:
                data.set_state(data_state)
        logger = MetricsLogger(workdir)
        start = int(state.step)
        bar = None
        if cfg.progress and jax.process_index() == 0:
            from tqdm import tqdm
            bar = tqdm(total=cfg.total_steps, initial=start, desc="grpo", dynamic_ncols=True)
        try:
            for step in range(start, cfg.total_steps):
                state, metrics = self.train_step(state, next(data), step)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}",
                                    kl=f"{metrics['kl']:.4f}")
                if cfg.eval_every and (step + 1) % cfg.eval_every == 0:
                    model = self.learner.model(state)
                    for hook in self.eval_hooks:
                        metrics.update({f"eval/{k}": float(v)
                                        for k, v in hook(step + 1, model).items()})
                if (step + 1) % cfg.log_every == 0:
                    logger.log(step + 1, metrics)
                if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.total_steps:
                    ckpt.save(step + 1, state, data.get_state())
        finally:
            if bar is not None:
                bar.close()
            logger.close()
            ckpt.close()
        return state

    def rollout(self, state: TrainState, tasks: list[dict], step: int):
        """Samples group_size completions per task; returns prompts, completions, rewards."""
        cfg = self.cfg
        prompts = [list(t["prompt"]) for t in tasks for _ in range(cfg.group_size)]
        records = [t for t in tasks for _ in range(cfg.group_size)]
        key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), step)
        out = sampling.generate(self.learner.model(state), prompts,
                                max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                                top_p=cfg.top_p, key=key, stop=cfg.stop_tokens,
                                pad_id=cfg.pad_id)
        completions = out.sequences()
        rewards = np.asarray(self.reward_fn(completions, records), np.float32)
        if rewards.shape != (len(completions),):
            raise ValueError(f"reward function returned shape {rewards.shape}, expected "
                             f"({len(completions)},): one reward per completion")
        return prompts, completions, rewards

    def train_step(self, state: TrainState, tasks: list[dict], step: int):
        cfg = self.cfg
        prompts, completions, rewards = self.rollout(state, tasks, step)
        batch = build_batch(prompts, completions, rewards, cfg.group_size, cfg.num_rows,
                            cfg.row_len, cfg.pad_id)
        state, metrics = self.learner.step(state, self.learner.put_batch(batch))
        out = {k: float(v) for k, v in jax.device_get(metrics).items()}
        out.update(reward_mean=float(rewards.mean()), reward_std=float(rewards.std()),
                   completion_len=float(np.mean([len(c) for c in completions])))
        return state, out
