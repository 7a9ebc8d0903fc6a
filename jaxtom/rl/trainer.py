"""The one training loop: every paper's training is a rollout hook under it.

A rollout is a function `(model, tasks, key, step) -> Rollout`: it turns this process's share
of the step's task records into sequences with policy masks and advantages (and, for CToM,
prediction targets). MindZero's warm-up (supervised targets, advantage 1), MindZero SSRL
(particles scored by the ELBO), CToM conversations and the generic completion task are all
rollouts. The loop owns everything else: the task stream, sampling keys, packing, the update
(PPO mini-batches live in `Learner.update`), logging (tensorboardX + JSONL + tqdm), eval
hooks, orbax checkpoints with exact resume, and a checkpointed stop on SIGTERM
(`jaxtom.rl.preemption`).

Determinism and multi-process: the task stream is global (every process draws the same
batch and takes its slice), each record carries its global `row` within the step, and the
step's key is `fold_in(state.rng, step)`; rollouts sample row r with key
`fold_in(key, r)`. So a run's samples, metrics and parameters depend only on its config and
seed: not on how many processes share it, nor on whether it was interrupted and resumed.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Protocol, Sequence

import grain
import jax
import numpy as np
from tqdm import tqdm

from jaxtom import storage
from jaxtom.buckets import bucket
from jaxtom.models.decoder import Decoder
from jaxtom.rl import distributed
from jaxtom.rl.batch import (
    Batch,
    bucketed_rows,
    family_length,
    first_fit_rows,
    pack_sequences,
    pack_shared_prompts,
    shared_pieces,
    shared_prompt_families,
)
from jaxtom.rl.checkpoint import Checkpointer
from jaxtom.rl.logging import MetricsLogger
from jaxtom.rl.losses import group_advantages
from jaxtom.rl.preemption import StopSignal, TrainingStopped
from jaxtom.rl.step import Learner
from jaxtom.rl.step_config import StepConfig, TrainState


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    workdir: str = "runs/default"
    total_steps: int = 100
    prompts_per_step: int = 4  # task records per step (all processes together)
    group_size: int = 4  # samples per task record (GRPO group)
    max_new_tokens: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    # what divides a group's centred rewards: "group" (its std, GRPO), "batch" (one std over
    # the step's batch) or "none" (see jaxtom.rl.losses.group_advantages)
    advantage_scale: str = "group"
    advantage_std_floor: float = 0.0  # with "group": a group's std counts as at least this
    # > 0: the token after any of `explore_after`'s ids is sampled at this temperature,
    # among `explore_tokens` (all when empty): exploration at a decision point. MindZero's
    # rollout supplies its own (a probability's digit: `Codec.probability_markers`)
    explore_temperature: float = 0.0
    explore_after: tuple[int, ...] = ()
    explore_tokens: tuple[int, ...] = ()
    rollout_rows: int = 0  # sampler rows per call on each process (0: all at once)
    # decode in segments that drop finished rows and attend over the cache slots in use
    # (`sampling.generate(compact=True)`): a ragged batch (completions of 16-512 tokens) then
    # costs its rows' own lengths rather than the longest row's for every row. The same
    # tokens, logits equal to float32 rounding;
    # off in the CPU defaults, whose fixed-format completions barely differ in length
    compact_rows: bool = False
    row_len: int = 64  # tokens per packed row
    num_rows: int = 0  # rows per batch (all processes); 0: one sequence per row
    # pack each group's prompt once before its samples (`pack_shared_prompts`): the same
    # log-probs and gradients from fewer tokens; rows then hold one group each (num_rows=0)
    # and their length is the longest group's, rounded up to a multiple of 64 (rollouts that
    # pack their own rows, MindZero's image prompts and CToM's conversations, refuse it)
    share_prompts: bool = False
    # with share_prompts: rows of `row_len` tokens holding as much of the step's groups as
    # fits, a group going on in another row (its prompt packed again there) where it does not
    # fit, instead of one group per row as long as the step's longest group. The update's
    # row length is then fixed and only its row count varies, on `bucketed_rows`' ladder,
    # which follows the step's total tokens (steady) rather than its longest group (which
    # swings with ragged completions): a few update programs per run instead of one per
    # row-length bucket met. Needs row_len >= any one prompt + completion
    shared_fixed_rows: bool = False
    stop_tokens: tuple[int, ...] = ()
    pad_id: int = 0
    checkpoint_every: int = 50
    keep_checkpoints: int = 2
    eval_every: int = 0  # run the eval hooks every this many steps (0: never)
    log_every: int = 1
    seed: int = 0
    progress: bool = True


@dataclasses.dataclass
class Rollout:
    """One process's sequences for one update, or a batch the rollout packed itself.

    Per-token lists are aligned with `sequences`; `group_ids` only need to be unique within
    the step. `metrics` are means over this process's `count` items; the trainer averages
    them over processes weighted by `count`.
    """
    sequences: list[list[int]] = dataclasses.field(default_factory=list)
    policy_masks: list[list[float]] = dataclasses.field(default_factory=list)
    advantages: list[float] = dataclasses.field(default_factory=list)
    group_ids: list[int] = dataclasses.field(default_factory=list)
    decision_masks: list[list[float]] | None = None
    batch: Batch | None = None  # a prebuilt batch (CToM: with its prediction sub-batch)
    # True when `batch` holds every process's rows, built alike on each (as `pack_rollout`
    # builds one from sequences): placed with `Learner.put_global_batch`, so its PPO
    # mini-batches are one process's. False: `batch` holds this process's rows only.
    batch_is_global: bool = False
    prompt_lens: list[int] | None = None  # per sequence (for `TrainerConfig.share_prompts`)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    count: int = 1


class RolloutFn(Protocol):
    def __call__(self, model: Decoder, tasks: list[dict[str, Any]], key: jax.Array,
                 step: int) -> Rollout: ...


class RewardFn(Protocol):
    """Per-sequence rewards for completions (token lists) of the given task records."""

    def __call__(self, completions: Sequence[Sequence[int]],
                 tasks: Sequence[dict[str, Any]]) -> Sequence[float]: ...


def completion_rows(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]]):
    """(sequences, policy masks): prompt + completion, the completion tokens trainable."""
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions)]
    masks = [[0.0] * len(p) + [1.0] * len(c) for p, c in zip(prompts, completions)]
    return seqs, masks


def compact_kwargs(cfg: TrainerConfig) -> dict:
    """The sampler's row-compaction arguments for `cfg` (`TrainerConfig.compact_rows`): with
    compaction, prompts are also padded to the run's prompt budget (`row_len -
    max_new_tokens`, what `jaxtom.plan` sizes), so that every rollout call has one prompt
    chunk and cache size and the decode programs stay on their row and slot ladders however
    the prompts' lengths vary (`sampling.generate`'s `min_prompt_len`)."""
    if not cfg.compact_rows:
        return {}
    return {"compact": True, "min_prompt_len": max(cfg.row_len - cfg.max_new_tokens, 0)}


def explore_kwargs(cfg: TrainerConfig, markers: Sequence[int] | None = None,
                   choices: Sequence[int] | None = None) -> dict:
    """The sampler's rollout arguments for `cfg`: row compaction (`compact_rows`) and
    exploration (none when it is off); `markers` and `choices` replace `cfg.explore_after`
    and `cfg.explore_tokens`."""
    compact = compact_kwargs(cfg)
    if cfg.explore_temperature <= 0:
        return compact
    ids = tuple(cfg.explore_after if markers is None else markers)
    if not ids:
        raise ValueError("trainer.explore_temperature > 0 needs marker tokens "
                         "(trainer.explore_after), found none")
    return {"explore_after": ids, "explore_temperature": cfg.explore_temperature,
            "explore_tokens": tuple(cfg.explore_tokens if choices is None else choices),
            **compact}


def sample_rows(tasks: Sequence[dict], group_size: int) -> np.ndarray:
    """Global sampler row ids of `tasks`' samples: task row r, sample g -> r * G + g."""
    return np.asarray([t["row"] * group_size + g for t in tasks for g in range(group_size)],
                      np.int64)


class CompletionRollout:
    """GRPO on single completions: `group_size` samples per task, scored by `reward_fn`."""

    def __init__(self, reward_fn: RewardFn, cfg: TrainerConfig):
        if cfg.group_size < 2:
            raise ValueError(f"group_size must be >= 2 for group advantages, got "
                             f"{cfg.group_size}")
        self.reward_fn, self.cfg = reward_fn, cfg

    def __call__(self, model, tasks, key, step) -> Rollout:
        cfg, G = self.cfg, self.cfg.group_size
        prompts = [list(t["prompt"]) for t in tasks for _ in range(G)]
        records = [t for t in tasks for _ in range(G)]
        completions = distributed.generate_rows(
            model, prompts, sample_rows(tasks, G), key=key, max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature, top_p=cfg.top_p, stop=cfg.stop_tokens,
            pad_id=cfg.pad_id, rows_per_call=cfg.rollout_rows, **explore_kwargs(cfg))
        rewards = np.asarray(self.reward_fn(completions, records), np.float32)
        if rewards.shape != (len(completions),):
            raise ValueError(f"reward function returned shape {rewards.shape}, expected "
                             f"({len(completions)},): one reward per completion")
        adv = np.asarray(group_advantages(rewards, G, scale=cfg.advantage_scale,
                                           std_floor=cfg.advantage_std_floor))
        seqs, masks = completion_rows(prompts, completions)
        groups = [t["row"] for t in tasks for _ in range(G)]
        return Rollout(seqs, masks, adv.tolist(), groups, count=len(seqs),
                       prompt_lens=[len(p) for p in prompts], metrics={
            "reward_mean": float(rewards.mean()),
            "reward_sq": float(np.mean(rewards ** 2)),
            "completion_len": float(np.mean([len(c) for c in completions]))})


def process_share(batch_size: int, processes: int, index: int) -> tuple[int, int]:
    """(first row, rows) of process `index`'s share of a `batch_size`-record step: the first
    `batch_size % processes` processes take one record more, so any batch size works."""
    base, extra = divmod(batch_size, processes)
    return index * base + min(index, extra), base + (index < extra)


class TaskStream:
    """Endless shuffled batches of task records, the same on every process (grain); each
    process keeps its contiguous slice (`process_share`: shares differ by at most one
    record). Records get `row`: their index within the step's global batch, so samples do
    not depend on the number of processes."""

    def __init__(self, tasks: Sequence[dict], batch_size: int, seed: int):
        n = jax.process_count()
        if batch_size < n:
            raise ValueError(f"trainer.prompts_per_step={batch_size} is fewer than the {n} "
                             "processes: every process needs at least one task record per "
                             "step; raise prompts_per_step to at least the process count")
        if not tasks:
            raise ValueError("no task records to train on")
        self.batch_size = batch_size
        self.lo, self.share = process_share(batch_size, n, jax.process_index())
        ds = grain.MapDataset.source(list(range(len(tasks))))
        # drop_remainder: an endless stream has no remainder, and without it grain overflows
        # the length of a batch-1 view of an endless dataset
        ds = ds.seed(seed).shuffle().repeat(None).batch(batch_size, drop_remainder=True,
                                                        batch_fn=list)
        self.tasks = list(tasks)
        self.it = iter(ds.to_iter_dataset())

    def next_local(self) -> list[dict]:
        idx = next(self.it)
        lo = self.lo
        return [{**self.tasks[int(i)], "row": lo + j}
                for j, i in enumerate(idx[lo:lo + self.share])]

    def get_state(self):
        return self.it.get_state()

    def set_state(self, state) -> None:
        self.it.set_state(state)


def global_rollout(rollout: Rollout) -> Rollout:
    """The step's sequences of every process, in process order, as one rollout (a small
    host all-gather of token ids and masks; the rollout itself on one process). Packing
    them on every process alike makes the update batch, and so its PPO mini-batches, the
    one a single process would build, whatever the number of processes."""
    fields = ("sequences", "policy_masks", "advantages", "group_ids", "decision_masks",
              "prompt_lens")
    if jax.process_count() == 1:
        return rollout
    parts = distributed.gather_objects(tuple(getattr(rollout, f) for f in fields))
    merged = {}
    for i, name in enumerate(fields):
        values = [p[i] for p in parts]
        merged[name] = (None if all(v is None for v in values) else
                        [x for v in values for x in v])
    return dataclasses.replace(rollout, **merged)


def pack_rollout(rollout: Rollout, cfg: TrainerConfig) -> Batch:
    """The one packer: the update batch's rows, fixed [rows, row_len]. A rollout's own
    prebuilt batch is used as it is (`Rollout.batch_is_global` says whose rows it holds);
    sequences are packed whole (every process's, see `global_rollout`) and
    `Learner.put_global_batch` keeps each process's block."""
    if rollout.batch is not None:
        return rollout.batch
    rollout = global_rollout(rollout)
    if cfg.share_prompts:
        return pack_shared_rollout(rollout, cfg)
    # the rows first-fit fills, not one per sequence: trailing rows of padding cost a full
    # update's compute and, split by index, would leave later PPO mini-batches empty
    rows = cfg.num_rows or bucketed_rows(first_fit_rows([len(s) for s in rollout.sequences],
                                                        cfg.row_len))
    return pack_sequences(rollout.sequences, rollout.policy_masks, rollout.advantages,
                          rollout.group_ids, num_rows=rows, row_len=cfg.row_len,
                          pad_id=cfg.pad_id, decision_masks=rollout.decision_masks)


SHARED_ROW_QUANTUM = 64  # shared-prompt row lengths are bucketed: few compiled programs


def shared_row_len(longest: int) -> int:
    """The packed row length for a family of `longest` tokens: multiples of 64 up to 512,
    then steps of a quarter of the current power of two (`buckets.bucket`: 640, 768, 896,
    1024, 1280, ...), so rows of the papers' lengths (families of 8 completions of up to 512
    tokens) compile a dozen update programs, not one per multiple of 64, at <= 25% padding."""
    return bucket(longest, SHARED_ROW_QUANTUM, SHARED_ROW_QUANTUM)


def pack_shared_rollout(rollout: Rollout, cfg: TrainerConfig) -> Batch:
    """`pack_rollout` with each group's prompt packed once: one family per row (or
    `cfg.num_rows` rows), rows as long as the longest family, bucketed by `shared_row_len`
    (every process agrees on both); with `cfg.shared_fixed_rows`, rows of `cfg.row_len`
    filled first-fit with families split where they do not fit, as many as that takes on
    `bucketed_rows`' ladder."""
    if rollout.prompt_lens is None:
        raise ValueError("trainer.share_prompts needs a rollout that reports its prompt "
                         "lengths (Rollout.prompt_lens)")
    seqs, lens = rollout.sequences, rollout.prompt_lens
    if cfg.shared_fixed_rows:
        needed = max((r for r, _, _ in shared_pieces(seqs, rollout.group_ids, lens,
                                                     cfg.row_len, split=True)), default=0) + 1
        return pack_shared_prompts(seqs, rollout.policy_masks, rollout.advantages,
                                   rollout.group_ids, lens,
                                   num_rows=cfg.num_rows or bucketed_rows(needed),
                                   row_len=cfg.row_len, pad_id=cfg.pad_id,
                                   decision_masks=rollout.decision_masks, split=True)
    families = shared_prompt_families(seqs, rollout.group_ids, lens)
    longest = max((family_length(seqs, lens, f) for f in families), default=1)
    row_len = shared_row_len(longest)
    rows = cfg.num_rows or max(len(families), 1)
    return pack_shared_prompts(seqs, rollout.policy_masks, rollout.advantages,
                               rollout.group_ids, lens, num_rows=rows, row_len=row_len,
                               pad_id=cfg.pad_id, decision_masks=rollout.decision_masks)


class Trainer:
    """Runs `rollout_fn` + updates from `model`; `eval_hooks(step, model) -> dict` add
    `eval/` metrics every `cfg.eval_every` steps (on every process; process 0 logs)."""

    def __init__(self, model: Decoder, tasks: Sequence[dict], rollout_fn: RolloutFn,
                 step_cfg: StepConfig, cfg: TrainerConfig, mesh=None,
                 eval_hooks: Sequence[Callable[[int, Decoder], dict]] = (), desc: str = "train"):
        # the starting model, held only until `run` builds the train state from it (the
        # state's params are a sharded copy; the Trainer keeps no second one for the run)
        self.model0, self.tasks, self.rollout_fn = model, list(tasks), rollout_fn
        self.cfg, self.eval_hooks, self.desc = cfg, list(eval_hooks), desc
        self.learner = Learner(model, step_cfg, mesh=mesh, total_steps=cfg.total_steps)

    def run(self) -> TrainState:
        """Trains to `cfg.total_steps`, resuming from the newest checkpoint in the workdir
        (a finished run returns its final state at once). SIGTERM (or, under
        `jax.distributed`, JAX's preemption sync point) ends it after the step in progress:
        that step is checkpointed and `TrainingStopped` raised (`jaxtom.rl.preemption`)."""
        with StopSignal() as stop:
            return self._run(stop)

    def _run(self, stop: StopSignal) -> TrainState:
        cfg = self.cfg
        workdir = storage.run_dir(cfg.workdir)  # epath; refuses a relative one on many hosts
        ckpt = Checkpointer(workdir / "checkpoints", keep=cfg.keep_checkpoints)
        if self.model0 is None:
            raise RuntimeError("Trainer.run was already called: it starts from the model the "
                               "Trainer was built with, which it does not keep; build a new one")
        state = self.learner.init_state(self.model0, seed=cfg.seed)
        self.model0 = None
        data = TaskStream(self.tasks, cfg.prompts_per_step, cfg.seed)
        if ckpt.latest_step() is not None:
            state, data_state = ckpt.restore(state)
            if data_state:
                data.set_state(data_state)
        logger = MetricsLogger(workdir)
        start = int(state.step)
        bar = None
        if cfg.progress and jax.process_index() == 0 and start < cfg.total_steps:
            bar = tqdm(total=cfg.total_steps, initial=start, desc=self.desc,
                       dynamic_ncols=True, mininterval=1.0)
        stopped = None  # (step, what asked for the stop)
        try:
            for step in range(start, cfg.total_steps):
                began = time.perf_counter()
                state, metrics = self.train_step(state, data.next_local(), step)
                # wall time of the rollout and update: under "time/", which comparisons of
                # runs leave out (it is the one logged value that is not reproducible)
                metrics["time/step_seconds"] = time.perf_counter() - began
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix({k: f"{metrics[k]:.3g}" for k in
                                     ("reward_mean", "loss_grpo", "eval/top1") if k in metrics})
                if cfg.eval_every and (step + 1) % cfg.eval_every == 0:
                    began = time.perf_counter()
                    model = self.learner.model(state)
                    for hook in self.eval_hooks:
                        metrics.update({f"eval/{k}": float(v)
                                        for k, v in hook(step + 1, model).items()})
                    metrics["time/monitor_seconds"] = time.perf_counter() - began
                cause = stop.requested()  # every step, on every process (JAX's sync point)
                if (cause or (step + 1) % cfg.checkpoint_every == 0
                        or step + 1 == cfg.total_steps):
                    began = time.perf_counter()
                    ckpt.save(step + 1, state, data.get_state())
                    metrics["time/checkpoint_seconds"] = time.perf_counter() - began
                if (step + 1) % cfg.log_every == 0:
                    logger.log(step + 1, metrics)
                if cause:
                    stopped = (step + 1, cause)
                    break
        finally:
            if bar is not None:
                bar.close()
            logger.close()
            ckpt.close()  # waits for the save in flight: a stopped run's checkpoint is whole
        if stopped is not None:
            raise TrainingStopped(stopped[0], str(workdir / "checkpoints"), stopped[1])
        return state

    def train_step(self, state: TrainState, tasks: list[dict], step: int):
        clock = [time.perf_counter()]

        def lap() -> float:  # seconds since the previous lap
            clock.append(time.perf_counter())
            return clock[-1] - clock[-2]

        # the key data is replicated over the (possibly multi-process) mesh: take this
        # process's copy, so rollouts run on local devices only
        rng = np.asarray(state.rng.addressable_data(0))
        key = jax.random.fold_in(jax.random.wrap_key_data(rng), step)
        rollout = self.rollout_fn(self.learner.sampling_model(state), tasks, key, step)
        parts = {"time/rollout_seconds": lap()}
        batch = pack_rollout(rollout, self.cfg)
        parts["time/pack_seconds"] = lap()
        own_rows = rollout.batch is not None and not rollout.batch_is_global
        put = self.learner.put_batch if own_rows else self.learner.put_global_batch
        # placed and waited for, so the update's time is its own
        batch = jax.block_until_ready(put(batch))
        parts["time/to_device_seconds"] = lap()
        programs = self.learner.program_count
        state, metrics = self.learner.update(state, batch)
        metrics = jax.block_until_ready(metrics)
        parts["time/update_seconds"] = lap()
        parts["time/update_compiled"] = float(self.learner.program_count > programs)
        out = {k: float(v) for k, v in jax.device_get(metrics).items()}
        parts["time/from_device_seconds"] = lap()
        out.update(distributed.weighted_mean(rollout.metrics, rollout.count))
        out.update(parts)
        if "reward_sq" in out:
            out["reward_std"] = float(np.sqrt(max(out.pop("reward_sq")
                                                  - out["reward_mean"] ** 2, 0.0)))
        return state, out
