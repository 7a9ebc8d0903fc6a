"""MindZero's goal task on the gridworld: its episodes, policy and rollouts, run by the one
driver (`jaxtom.mindzero.driver.train`, through `prepare`) as two phases of the one trainer.

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

import time
from pathlib import Path

import jax
import numpy as np

from jaxtom import parallel, storage
from jaxtom.config import resolve_model_path
from jaxtom.gridworld import EnvParams, generate_episodes
from jaxtom.gridworld.episodes import layout_keys, split_params
from jaxtom.mindzero import data as data_lib
from jaxtom.mindzero.data import PromptCache, max_row_len, task_records
from jaxtom.mindzero.monitor import heldout_monitor
from jaxtom.mindzero.observation import HostEpisodes, get_observation
from jaxtom.mindzero.particles import parse_particles, to_arrays
from jaxtom.mindzero.policy import Codec, load_bpe, train_bpe
from jaxtom.mindzero.reward import cumulative_log_likelihoods, elbo_reward
from jaxtom.mindzero.task import Prepared
from jaxtom.mindzero.warmup import WarmupRollout, longest_teacher_target
from jaxtom.models import add_lora, from_pretrained, init_decoder
from jaxtom.models.orbax_io import restore_params
from jaxtom.rl import group_advantages
from jaxtom.rl.distributed import generate_rows
from jaxtom.rl.trainer import Rollout, compact_kwargs, completion_rows, explore_kwargs, sample_rows
from jaxtom.tokenizer import Tokenizer

_elbo = jax.jit(elbo_reward, static_argnames=("cfg",))


def make_mesh(config):
    """The update step's mesh from `config.mesh`."""
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


class ParticleRollout:
    """SSRL: `group_size` particle completions per prompt, rewarded by eq. 4."""

    def __init__(self, config, codec: Codec, view: HostEpisodes, table):
        self.config, self.codec, self.view, self.table = config, codec, view, table
        self.prompts = PromptCache(config, codec, view)
        self.decision_ids = codec.decision_ids if config.step.lambda_entropy > 0 else None

    def __call__(self, model, tasks, key, step) -> Rollout:
        c, d = self.config.trainer, self.config.mindzero.data
        G, n = c.group_size, d.num_particles
        prompts = [self.prompts(int(task["episode"]), int(task["t"]))
                   for task in tasks for _ in range(G)]
        episode = np.repeat([int(task["episode"]) for task in tasks], G)
        t = np.repeat([int(task["t"]) for task in tasks], G)
        began = time.perf_counter()
        completions = self.generate(model, prompts, tasks, key)
        sampled = time.perf_counter()
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
                                                               axis=1) == 0)),
                           "time/sample_seconds": sampled - began,
                           "time/reward_seconds": time.perf_counter() - sampled})

    def explore(self) -> dict:
        """The sampler's exploration arguments (`trainer.explore_temperature`: the digit
        after a probability's "0."). Only with two or more hypotheses: a single one is
        written at p 1.0, so there is no split to explore (and its tokenizer may have no
        "0." token at all)."""
        if self.config.mindzero.data.num_particles < 2:
            return compact_kwargs(self.config.trainer)
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


def prepare(config, run_dir: Path, mesh):
    """The goal task over text observations for the one driver (`driver.train`): episodes,
    tokenizer, model; the text teacher's warm-up (checked, retried from a fresh
    initialisation); validation episodes for the monitor and the kept model when
    `data.val_episodes`; particle SSRL on eq. 4 from the planner's likelihood table."""
    train_eps, test_eps = make_episodes(config)
    view, test_view = HostEpisodes.from_episodes(train_eps), HostEpisodes.from_episodes(test_eps)
    val_eps = validation_episodes(config, train_eps, test_eps)
    model, codec = build_model(config, run_dir, views=(view, test_view), mesh=mesh)
    monitor_view = test_view if val_eps is None else HostEpisodes.from_episodes(val_eps)

    def ssrl_rollout(config, model):
        table = np.asarray(cumulative_log_likelihoods(train_eps.trajectories,
                                                      env_params(config)))  # [E, T+1, G]
        return ParticleRollout(config, codec, view, table)

    return Prepared(
        model=model, codec=codec,
        row_len=lambda completion: max_row_len(config, codec, view, completion),
        monitor=lambda config: heldout_monitor(config, monitor_view, codec),
        warmup_tasks=task_records(view, 1),
        warmup_rollout=lambda config, wcfg: WarmupRollout(config, codec, view),
        ssrl_tasks=task_records(view, config.mindzero.data.stride), ssrl_rollout=ssrl_rollout,
        teacher_budget=longest_teacher_target(config, codec, view) if
        config.mindzero.warmup.steps else 0,
        rebuild=lambda cfg: build_model(cfg, run_dir, mesh=mesh)[0],
        keep_best=val_eps is not None and config.mindzero.data.keep == "best",
        result={"train": train_eps, "test": test_eps})


def load_model(config, checkpoint: str | Path, tokenizer_path=None):
    """(model, codec) from a run's checkpoint directory (tiny: plus its tokenizer.json)."""
    checkpoint = storage.absolute(checkpoint)
    tok = tokenizer_path or checkpoint.parent / "tokenizer.json"
    model, codec = build_model(config, checkpoint.parent, tokenizer_path=tok)
    return restore_params(model, checkpoint), codec
