"""MindZero SSRL on the gridworld as two phases of the one trainer (`jaxtom.rl.Trainer`).

Phase 1, the format warm-up, is a supervised rollout: label-free teacher particles as
completions with advantage 1 (on-policy, ratio 1: exactly the NLL gradient). Phase 2, SSRL,
is a particle rollout: `group_size` completions per (episode, t) prompt, parsed (train rule),
scored by eq. 4 from a precomputed [E, T+1, 56] table of cumulative planner log-likelihoods
(one jitted call), group advantages. Each phase checkpoints under its own folder of the run
directory, so killing a run and rerunning the same command continues where it stopped and
ends with the parameters of an uninterrupted run. The final and warm-up parameters are also
saved on their own (`checkpoint/`, `warmup/`) for evaluation.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from jaxtom import storage
from jaxtom.gridworld import EnvParams, generate_episodes
from jaxtom.gridworld.episodes import layout_keys, split_params
from jaxtom.mindzero import data as data_lib
from jaxtom.mindzero.observation import HostEpisodes, get_observation
from jaxtom.mindzero.particles import parse_particles, to_arrays
from jaxtom.mindzero.policy import Codec, load_bpe, train_bpe
from jaxtom.mindzero.reward import cumulative_log_likelihoods, elbo_reward
from jaxtom.models import add_lora, from_pretrained, init_decoder
from jaxtom.rl import StepConfig, group_advantages
from jaxtom.rl.distributed import generate_rows
from jaxtom.rl.trainer import Rollout, Trainer, completion_rows, explore_kwargs, sample_rows
from jaxtom.tokenizer import Tokenizer

_elbo = jax.jit(elbo_reward, static_argnames=("cfg",))


def make_mesh(config):
    """The update step's mesh from `config.mesh`."""
    from jaxtom import parallel
    return parallel.run_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)


def env_params(config) -> EnvParams:
    return EnvParams(max_steps=config.mindzero.data.max_steps)


def make_episodes(config):
    """(train, eval) episode sets: held-out labels and layouts (`split="labels"`, the paper's
    split) or fresh episodes over all labels (`"episodes"`, for models trained from scratch,
    which cannot know words they never saw)."""
    k_train, k_eval = jax.random.split(jax.random.key(config.trainer.seed))
    d = config.mindzero.data
    train = generate_episodes(k_train, episode_params(config, "train"), d.train_episodes,
                              batch_size=1024)
    test = generate_episodes(k_eval, episode_params(config, "test"), d.eval_episodes,
                             batch_size=1024, exclude_layouts=layout_keys(train))
    return train, test


def validation_episodes(config, train, test):
    """`data.val_episodes` episodes for the monitor and checkpoint choice (None when 0): drawn
    as the eval split is, from their own key, on layouts neither train nor eval uses, so
    choosing a model on them reads nothing the evaluation scores."""
    d = config.mindzero.data
    if not d.val_episodes:
        return None
    key = jax.random.fold_in(jax.random.key(config.trainer.seed), 2)  # apart from the split
    return generate_episodes(key, episode_params(config, "test"), d.val_episodes,
                             batch_size=1024, exclude_layouts=layout_keys(train)
                             | layout_keys(test))


def episode_params(config, split: str) -> EnvParams:
    """Environment parameters of the train or test split: held-out labels (`split="labels"`)
    or, with the `figure7` label set, always the 8 colored squares of Figure 7 (brown, pink,
    red, blue, green, yellow, orange, purple)."""
    params = env_params(config)
    d = config.mindzero.data
    if d.split == "labels":
        return split_params(params, split)
    if d.label_set == "figure7":
        return params.replace(colors=tuple(range(params.num_objects)), shapes=(0,))
    return params


def corpus(config, views, rng) -> list[str]:
    """Prompts and well-formed particle completions over all labels, to train the BPE."""
    d = config.mindzero.data
    render = get_observation(d.observation)
    texts = []
    for view in views:
        for e, t in data_lib.timestep_records(view, stride=3):
            texts.append(render(view, e, t, d.num_particles))
            texts.append(data_lib.warmup_target(view, e, d.num_particles, rng))
    return texts


def build_model(config, run_dir: Path, views=(), tokenizer_path=None, mesh=None):
    """(model, codec): a tiny decoder over a BPE trained on generated text (`model.path`
    ""), or a checkpoint (HF directory, .gguf file, or "smollm2"); with `mesh` (a training
    run's) its parameters are created or read straight into their shards there."""
    from jaxtom.config import resolve_model_path
    m, seed = config.model, config.trainer.seed + config.model.seed
    if not m.path:
        path = storage.path(tokenizer_path or storage.path(run_dir) / "tokenizer.json")
        if tokenizer_path is None and not path.exists():
            tok = train_bpe(corpus(config, views, np.random.default_rng(config.trainer.seed)),
                            m.vocab_size)
            if jax.process_index() == 0:  # written whole: readers never see half
                storage.save_tokenizer(path, tok.backend)
        else:
            tok = load_bpe(path)
        mcfg = m.random_model_config(vocab_size=tok.vocab_size, eos_token_ids=tok.eos_token_ids,
                                     tie_word_embeddings=True, max_position_embeddings=1024)
        return init_decoder(mcfg, seed, mesh=mesh), Codec(tok)
    path = storage.path(resolve_model_path(m.path))
    model = from_pretrained(path, dtype=m.param_dtype, compute_dtype=m.compute_dtype, mesh=mesh)
    tok = Tokenizer.from_gguf(path) if path.suffix == ".gguf" else Tokenizer.from_file(path)
    if m.lora_rank:
        add_lora(model, rank=m.lora_rank, alpha=m.lora_alpha or None)
    return model, Codec(tok, chat=True)


def warmup_step_config(config) -> StepConfig:
    """The warm-up's optimiser: supervised (no KL, no weight decay), the SSRL step otherwise."""
    w = config.mindzero.warmup
    return dataclasses.replace(
        config.step, learning_rate=w.learning_rate, kl_coef=0.0, weight_decay=0.0,
        total_steps=max(w.steps, 1), warmup_steps=min(10, w.steps), lambda_entropy=0.0,
        end_lr_ratio=0.0, reference="none")


def warmup_trainer_config(config):
    w = config.mindzero.warmup
    return dataclasses.replace(
        config.trainer, workdir=str(storage.path(config.trainer.workdir) / "warmup_train"),
        total_steps=w.steps, prompts_per_step=w.batch_size, eval_every=0,
        share_prompts=False,  # one target per prompt: nothing to share
        checkpoint_every=max(1, min(config.trainer.checkpoint_every, w.steps)),
        seed=config.trainer.seed + 1)


def max_row_len(config, codec, view, completion: int | None = None, quantum: int = 16) -> int:
    """One packed row length for the whole run (longest prompt + completion budget, default
    `trainer.max_new_tokens`), so the jitted update compiles once."""
    d = config.mindzero.data
    render = get_observation(d.observation)
    longest = max(len(codec.prompt_ids(render(view, e, t, d.num_particles)))
                  for e, t in data_lib.timestep_records(view, d.stride))
    budget = config.trainer.max_new_tokens if completion is None else completion
    return int(np.ceil((longest + budget + 1) / quantum) * quantum)


def longest_teacher_target(config, codec, view, samples: int = 256) -> int:
    """A bound on the warm-up's target length: the longest of `samples` teacher targets
    plus a quarter (probabilities and labels vary in token count)."""
    d, w = config.mindzero.data, config.mindzero.warmup
    rng = np.random.default_rng(config.trainer.seed)
    records = data_lib.timestep_records(view)
    pick = rng.choice(len(records), min(samples, len(records)), replace=False)
    longest = max(len(codec.completion_ids(data_lib.warmup_target(
        view, e, d.num_particles, rng, t, w.teacher))) for e, t in (records[i] for i in pick))
    return longest + longest // 4 + 1


def task_records(view: HostEpisodes, stride: int) -> list[dict]:
    """Unlabelled (episode, t) prompts: nothing about the goal is attached."""
    return [{"episode": e, "t": t} for e, t in data_lib.timestep_records(view, stride)]


class _Prompts:
    """Renders and encodes (episode, t) prompts, cached (they are revisited every epoch)."""

    def __init__(self, config, codec: Codec, view: HostEpisodes):
        self.render = get_observation(config.mindzero.data.observation)
        self.n, self.codec, self.view = config.mindzero.data.num_particles, codec, view
        self.cache: dict[tuple[int, int], list[int]] = {}

    def __call__(self, e: int, t: int) -> list[int]:
        if (e, t) not in self.cache:
            self.cache[(e, t)] = self.codec.prompt_ids(self.render(self.view, e, t, self.n))
        return self.cache[(e, t)]


class WarmupRollout:
    """Teacher particles as supervised completions (advantage 1, one sequence per prompt).
    A record's target is drawn from `default_rng([seed, step, row])`: the same on any
    number of processes and after a resume."""

    def __init__(self, config, codec: Codec, view: HostEpisodes):
        self.config, self.codec, self.view = config, codec, view
        self.prompts = _Prompts(config, codec, view)

    def __call__(self, model, tasks, key, step) -> Rollout:
        d, w = self.config.mindzero.data, self.config.mindzero.warmup
        return teacher_rollout(tasks, step, self.config.trainer.seed, self.codec, self.prompts,
                               lambda e, t, rng: data_lib.warmup_target(
                                   self.view, e, d.num_particles, rng, t, w.teacher,
                                   w.descending))


def teacher_rollout(tasks, step: int, seed: int, codec: Codec, prompt, target) -> Rollout:
    """A warm-up batch: `prompt(e, t)` ids with the teacher's `target(e, t, rng)` text as a
    supervised completion (advantage 1), rng = `default_rng([seed, step, row])`."""
    prompts, targets = [], []
    for task in tasks:
        e, t = int(task["episode"]), int(task["t"])
        rng = np.random.default_rng([seed, step, int(task["row"])])
        prompts.append(prompt(e, t))
        targets.append(codec.completion_ids(target(e, t, rng)))
    seqs, masks = completion_rows(prompts, targets)
    return Rollout(seqs, masks, [1.0] * len(seqs), [int(t["row"]) for t in tasks],
                   count=len(seqs),
                   metrics={"target_tokens": float(np.mean([len(x) for x in targets]))})


class ParticleRollout:
    """SSRL: `group_size` particle completions per prompt, rewarded by eq. 4."""

    def __init__(self, config, codec: Codec, view: HostEpisodes, table):
        self.config, self.codec, self.view, self.table = config, codec, view, table
        self.prompts = _Prompts(config, codec, view)
        self.decision_ids = codec.decision_ids if config.step.lambda_entropy > 0 else None

    def __call__(self, model, tasks, key, step) -> Rollout:
        c, d = self.config.trainer, self.config.mindzero.data
        G, n = c.group_size, d.num_particles
        prompts = [self.prompts(int(task["episode"]), int(task["t"]))
                   for task in tasks for _ in range(G)]
        episode = np.repeat([int(task["episode"]) for task in tasks], G)
        t = np.repeat([int(task["t"]) for task in tasks], G)
        completions = self.generate(model, prompts, tasks, key)
        texts = [self.codec.decode(s) for s in completions]
        parsed = [parse_particles(x, self.view.labels[e], mode="train", num_particles=n,
                                  duplicates=self.config.mindzero.reward.duplicates)
                  for x, e in zip(texts, episode)]
        goals, q, ok = to_arrays(parsed, env_params(self.config).num_objects, n)
        reward, terms = _elbo(self.table[episode, t], goals, q, ok, t, None,
                              self.config.mindzero.reward)
        reward = np.asarray(reward)
        adv = np.asarray(group_advantages(reward, G, scale=self.config.trainer.advantage_scale,
                                           std_floor=self.config.trainer.advantage_std_floor))
        seqs, masks = completion_rows(prompts, completions)
        decisions = None
        if self.decision_ids is not None:
            decisions = [[0.0] * len(p) + [float(int(i) in self.decision_ids) for i in s]
                         for p, s in zip(prompts, completions)]
        groups = [int(task["row"]) for task in tasks for _ in range(G)]
        return Rollout(seqs, masks, adv.tolist(), groups, decision_masks=decisions,
                       count=len(seqs), prompt_lens=[len(p) for p in prompts], metrics={
                           "reward_mean": float(reward.mean()),
                           "reward_sq": float(np.mean(reward ** 2)),
                           "valid": float(np.mean(ok)),
                           "likelihood": float(np.mean(terms["likelihood"])),
                           "q_entropy": float(np.mean(terms["entropy"])),
                           "completion_tokens": float(np.mean([len(s) for s in completions])),
                           # groups whose samples all scored the same teach nothing (collapse)
                           "flat_groups": float(np.mean(np.ptp(reward.reshape(-1, G),
                                                               axis=1) == 0))})

    def explore(self) -> dict:
        """The sampler's exploration arguments (`trainer.explore_temperature`: the digit
        after a probability's "0."). Only with two or more hypotheses: a single one is
        written at p 1.0, so there is no split to explore (and its tokenizer may have no
        "0." token at all)."""
        if self.config.mindzero.data.num_particles < 2:
            return {}
        return explore_kwargs(self.config.trainer, *self.codec.probability_markers)

    def generate(self, model, prompts, tasks, key) -> list[list[int]]:
        """Sampled completions of `prompts` (`group_size` rows per task, in task order),
        explored as `explore()` says."""
        c = self.config.trainer
        return generate_rows(model, prompts, sample_rows(tasks, c.group_size), key=key,
                             max_new_tokens=c.max_new_tokens, temperature=c.temperature,
                             top_p=c.top_p, stop=list(self.codec.eos_ids),
                             pad_id=self.codec.pad_id, rows_per_call=c.rollout_rows,
                             **self.explore())


def heldout_monitor(config, view: HostEpisodes, codec: Codec, num_rows: int = 128):
    """An eval hook scoring the model on a fixed sample of held-out (episode, t): top-1 goal
    accuracy and mean log score of the true goal (queried as the evaluation does, 1% uniform
    mix), and how many distinct completions it gives (1 = it ignores its observation). Labels
    are read only here, for logging; training never sees them."""
    from jaxtom.mindzero.policy import sample_completions
    d, e_cfg = config.mindzero.data, config.mindzero.eval
    render = get_observation(d.observation)
    rows, true = monitor_rows(config, view, num_rows)
    n = d.num_particles
    prompts = [codec.prompt_ids(render(view, e, t, n)) for e, t in rows]

    def score(step, model) -> dict:
        texts, _, _ = sample_completions(model, codec, prompts,
                                         key=jax.random.key(config.trainer.seed),
                                         temperature=e_cfg.temperature,
                                         max_new_tokens=config.trainer.max_new_tokens)
        return monitor_scores(texts, rows, true, view, n, e_cfg.score_mix)
    return score


def monitor_rows(config, view: HostEpisodes, num_rows: int):
    """The held-out monitor's fixed sample of (episode, t) and their true goal indices."""
    from jaxtom.gridworld import goal_index
    records = data_lib.timestep_records(view)
    pick = np.random.default_rng(config.trainer.seed + 11).choice(
        len(records), min(num_rows, len(records)), replace=False)
    rows = [records[i] for i in np.sort(pick)]
    return rows, np.array([int(goal_index(*view.goal[e], 8)) for e, _ in rows])


def monitor_scores(texts, rows, true, view: HostEpisodes, num_particles: int,
                   score_mix: float) -> dict:
    """Top-1, mean log score of the true goal and distinct completions of the monitor's
    completions (malformed ones score as the evaluation scores them), and `lead_first`: the
    share whose first hypothesis names the observation's lead (`approach_order`'s first
    object) as object1, the slot a model that reads its observation copies."""
    from jaxtom.eval.metrics import goal_scores
    from jaxtom.mindzero.evaluate import dense
    from jaxtom.mindzero.observation import approach_order
    parsed = [parse_particles(x, view.labels[e], mode="eval", num_particles=num_particles)
              for x, (e, _) in zip(texts, rows)]
    beliefs = np.stack([dense(p, 8) for p in parsed])
    s = goal_scores(beliefs, true, np.full_like(beliefs, 1.0 / beliefs.shape[1]), score_mix)
    lead = [bool(p.ok) and p.pairs[0][0] == approach_order(view, e, t)[0]
            for p, (e, t) in zip(parsed, rows)]
    return {"top1": float(np.mean(s["top1"])), "log_score": float(np.mean(s["log_score"])),
            "distinct_completions": float(len(set(texts))), "lead_first": float(np.mean(lead))}


class WarmupCollapsed(RuntimeError):
    """The warm-up ended input-independent; SSRL from it would only move a constant."""


def check_warmup(scores: dict, min_distinct: int, min_lead: float = 0.0,
                 label: str = "warm-up") -> dict:
    """The warm-up model's held-out monitor scores, printed; raises `WarmupCollapsed` when its
    greedy completions number fewer than `min_distinct` distinct strings, or when fewer than
    `min_lead` of them name the observation's lead first (it writes the format without
    reading its observation)."""
    lead = scores.get("lead_first")
    print(f"{label}, held-out monitor: top-1 {scores['top1']:.3f}, log score "
          f"{scores['log_score']:.2f}, {scores['distinct_completions']:.0f} distinct completions"
          + ("" if lead is None else f", lead named first {lead:.2f}"))
    if scores["distinct_completions"] < min_distinct:
        raise WarmupCollapsed(
            f"the warm-up model gives {scores['distinct_completions']:.0f} distinct completions "
            f"on the held-out monitor's prompts (expected >= {min_distinct}): it ignores its "
            "observation. Train it longer (mindzero.warmup.steps) or at another "
            "mindzero.warmup.learning_rate, or disable the check with "
            "mindzero.warmup.min_distinct=0.")
    if min_lead and (lead is None or lead < min_lead):
        raise WarmupCollapsed(
            f"the warm-up model names the observation's lead first in {lead} of the held-out "
            f"monitor's answers (expected >= {min_lead}): it writes the format without copying "
            "from its observation. Train it longer (mindzero.warmup.steps), at another "
            "mindzero.warmup.learning_rate or from another initialisation "
            "(mindzero.warmup.retries, model.seed), or disable the check with "
            "mindzero.warmup.min_lead=0.")
    return scores


class EarlyWarmupCheck:
    """A warm-up eval hook: at step `warmup.check_at` the held-out monitor's checks
    (`check_warmup`) run on the model so far; a failing attempt is marked abandoned in its
    directory (with the scores) and stopped, so a rerun skips it the same way."""
    MARKER = "abandoned.json"

    def __init__(self, monitor, spec, workdir: Path):
        self.monitor, self.spec, self.workdir = monitor, spec, workdir

    def __call__(self, step: int, model) -> dict:
        if step != self.spec.check_at:
            return {}
        scores = self.monitor(step, model)
        try:
            return check_warmup(scores, self.spec.min_distinct, self.spec.min_lead,
                                label=f"warm-up step {step}")
        except WarmupCollapsed as failed:
            if jax.process_index() == 0:
                storage.write_json(storage.path(self.workdir) / self.MARKER,
                                   {"step": step, "scores": scores, "reason": str(failed)},
                                   indent=1)
            raise

    @classmethod
    def raise_if_abandoned(cls, workdir) -> None:
        marker = storage.path(workdir) / cls.MARKER
        if marker.exists():
            record = json.loads(marker.read_text())
            raise WarmupCollapsed(f"warm-up attempt in {workdir} was abandoned at step "
                                  f"{record['step']}: {record['reason']}")


class BestModel:
    """An SSRL eval hook that keeps the model of the best validation monitor log score, the
    warm-up's (step 0) included. RL on the ELBO can walk off a good policy: at lr 6e-4 seed
    0 of the CPU default rose from -4.4 to -3.2 by step 100 and fell to -6.3 by step 200
    (benchmarks/README.md). Only with validation episodes (`data.val_episodes`): choosing on
    the eval episodes would score the choice on what chose it. The record (`best.json`) and
    the model (`best_<step>`) live in the run directory, so a resumed run chooses from the
    same history."""

    def __init__(self, monitor, run_dir, start_model, start_scores: dict):
        self.monitor, self.run_dir, self.start_model = monitor, storage.path(run_dir), start_model
        self.path = self.run_dir / "best.json"
        if self.path.exists():
            self.record = json.loads(self.path.read_text())
        else:
            self._write({"step": 0, "log_score": float(start_scores["log_score"])})

    def _write(self, record: dict) -> None:
        self.record = record
        if jax.process_index() == 0:
            storage.write_json(self.path, record)

    def __call__(self, step: int, model) -> dict:
        scores = self.monitor(step, model)
        if scores["log_score"] > self.record["log_score"]:  # ties keep the earlier step
            old = self.record["step"]
            save_model(model, self.run_dir / f"best_{step}")
            self._write({"step": step, "log_score": float(scores["log_score"])})
            if old and jax.process_index() == 0:
                old_dir = self.run_dir / f"best_{old}"
                if old_dir.exists():
                    old_dir.rmtree()
        return {**scores, "kept_step": self.record["step"]}

    def chosen(self, last_model):
        """The kept model (`last_model` only gives its structure, unless it is the kept)."""
        step = self.record["step"]
        if step == 0:
            return self.start_model
        return restore_params(last_model, self.run_dir / f"best_{step}")


def warm_up(config, model, codec: Codec, view: HostEpisodes, run_dir: Path, monitor, mesh):
    """The goal task's format warm-up (`checked_warm_up` on the text teacher's rollout)."""
    wcfg = dataclasses.replace(warmup_trainer_config(config), row_len=max_row_len(
        config, codec, view, max(config.trainer.max_new_tokens,
                                 longest_teacher_target(config, codec, view))))
    return checked_warm_up(config, model, run_dir, monitor, mesh, tasks=task_records(view, 1),
                           rollout=WarmupRollout(config, codec, view), trainer_config=wcfg,
                           rebuild=lambda cfg: build_model(cfg, run_dir, mesh=mesh)[0])


def checked_warm_up(config, model, run_dir: Path, monitor, mesh, *, tasks, rollout,
                    trainer_config, rebuild):
    """The format warm-up of every MindZero task that checks one (goals, images, household):
    `rollout` on `tasks` under `trainer_config`, checked on the held-out `monitor` when
    `warmup.min_distinct`, `warmup.min_lead` or `trainer.eval_every` ask for it; returns
    (model, monitor scores or None). A warm-up that fails its check starts again from a
    fresh initialisation (`rebuild(config)` with model seed + k, under `warmup_train_k`) up
    to `warmup.retries` times, then the run stops; with `warmup.check_at` an attempt is also
    checked at that step and abandoned there if it fails (`EarlyWarmupCheck`). Every
    attempt is step-based and resumable, so a rerun takes the same path."""
    w, wcfg = config.mindzero.warmup, trainer_config
    checked = bool(config.trainer.eval_every or w.min_distinct or w.min_lead)
    early = bool(0 < w.check_at < w.steps and (w.min_distinct or w.min_lead))
    scores = None
    for attempt in range(w.retries + 1):
        if attempt:
            print(f"warm-up: retry {attempt} of {w.retries} from init seed +{attempt}")
            model = rebuild(dataclasses.replace(config, model=dataclasses.replace(
                config.model, seed=config.model.seed + attempt)))
        cfg = wcfg if not attempt else dataclasses.replace(
            wcfg, workdir=f"{wcfg.workdir}_{attempt}")
        hooks = []
        if early:
            cfg = dataclasses.replace(cfg, eval_every=w.check_at)
            hooks = [EarlyWarmupCheck(monitor, w, storage.path(cfg.workdir))]
        try:
            EarlyWarmupCheck.raise_if_abandoned(cfg.workdir)
            warm = Trainer(model, tasks, rollout, warmup_step_config(config), cfg, mesh=mesh,
                           eval_hooks=hooks, desc="warm-up")
            model = warm.learner.model(warm.run())
            if not checked:
                break
            scores = check_warmup(monitor(0, model), w.min_distinct, w.min_lead)
            break
        except WarmupCollapsed:
            if attempt == w.retries:
                raise
    save_model(model, run_dir / "warmup")
    return model, scores


def train(config, progress: bool = True) -> dict:
    """The whole run: data, tokenizer, model, warm-up, SSRL; returns paths and timings.
    Rerunning it on a run directory resumes (a finished phase is not repeated). Image
    observations train a Qwen3-VL policy (`jaxtom.mindzero.vl_train`)."""
    if config.mindzero.data.observation == "image":
        from jaxtom.mindzero.vl_train import train_vl
        return train_vl(config, progress)
    run_dir = storage.run_dir(config.trainer.workdir)
    t0 = time.perf_counter()
    if jax.process_index() == 0:
        storage.write_json(run_dir / "config.json", dataclasses.asdict(config), indent=1)
    params = env_params(config)
    train_eps, test_eps = make_episodes(config)
    view, test_view = HostEpisodes.from_episodes(train_eps), HostEpisodes.from_episodes(test_eps)
    val_eps = validation_episodes(config, train_eps, test_eps)
    mesh = make_mesh(config)
    model, codec = build_model(config, run_dir, views=(view, test_view), mesh=mesh)
    config = dataclasses.replace(config, trainer=dataclasses.replace(
        config.trainer, row_len=max_row_len(config, codec, view), pad_id=codec.pad_id,
        progress=progress and config.trainer.progress))
    timings = {"setup_s": time.perf_counter() - t0}
    t1 = time.perf_counter()
    mz = config.mindzero
    monitor = heldout_monitor(config, test_view if val_eps is None else
                              HostEpisodes.from_episodes(val_eps), codec)
    scores = None
    if mz.warmup.steps:
        model, scores = warm_up(config, model, codec, view, run_dir, monitor, mesh)
        if scores is not None:
            timings["warmup_monitor"] = scores
    timings["warmup_s"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    best = None
    if val_eps is not None:
        best = BestModel(monitor, run_dir, model, scores or monitor(0, model))
    table = np.asarray(cumulative_log_likelihoods(train_eps.trajectories, params))  # [E,T+1,G]
    state = run_ssrl(model, task_records(view, mz.data.stride),
                     ParticleRollout(config, codec, view, table), config, run_dir,
                     monitor if best is None else best, timings, started=t2, run_started=t0,
                     mesh=mesh, best=best)
    return {"run_dir": str(run_dir), "timings": timings, "train": train_eps, "test": test_eps,
            "state": state}


def run_ssrl(model, tasks, rollout, config, run_dir: Path, monitor, timings: dict, *,
             started: float, run_started: float, mesh=None, best: BestModel | None = None):
    """The SSRL phase every MindZero run ends with (goal particles, QA, image prompts): the
    one trainer under `run_dir/ssrl` (the held-out `monitor` as its eval hook when
    `trainer.eval_every`), the final model saved to `run_dir/checkpoint`, and the run's
    `timings` (plus ssrl_s from `started`, total_s from `run_started`) written beside it;
    with `best` (the monitor hook that also keeps the best model) its kept model is saved
    instead of the last. Returns the final TrainState."""
    ssrl = Trainer(model, tasks, rollout, config.step,
                   dataclasses.replace(config.trainer, workdir=str(run_dir / "ssrl")),
                   mesh=mesh, eval_hooks=[monitor] if config.trainer.eval_every else [],
                   desc="ssrl")
    state = ssrl.run()
    timings["ssrl_s"] = time.perf_counter() - started
    timings["ssrl_steps"] = int(state.step)
    final = ssrl.learner.model(state)
    if best is not None:
        final = best.chosen(final)
        timings["kept_step"], timings["kept_monitor_log_score"] = (
            best.record["step"], best.record["log_score"])
    save_model(final, run_dir / "checkpoint")
    timings["total_s"] = time.perf_counter() - run_started
    if jax.process_index() == 0:
        storage.write_json(storage.path(run_dir) / "timings.json", timings, indent=1)
    return state


def save_model(model, path):
    """Orbax checkpoint of the model's parameters (restore with `load_model`); local or
    `gs://...`."""
    import orbax.checkpoint as ocp
    path = storage.absolute(path)
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(path, nnx.state(model), force=True)
    ckpt.wait_until_finished()
    return path


def load_model(config, checkpoint: str | Path, tokenizer_path=None):
    """(model, codec) from a run's checkpoint directory (tiny: plus its tokenizer.json)."""
    checkpoint = storage.absolute(checkpoint)
    tok = tokenizer_path or checkpoint.parent / "tokenizer.json"
    model, codec = build_model(config, checkpoint.parent, tokenizer_path=tok)
    return restore_params(model, checkpoint), codec


def restore_params(model, checkpoint: Path):
    """`model` with the parameters saved by `save_model` at `checkpoint`."""
    import orbax.checkpoint as ocp
    graphdef, abstract = nnx.split(model)
    restored = ocp.StandardCheckpointer().restore(storage.absolute(checkpoint), abstract)
    return nnx.merge(graphdef, restored)
