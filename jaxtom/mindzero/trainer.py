"""MindZero SSRL training on the gridworld: format warm-up, then GRPO on the ELBO reward.

One step: a grain batch of (episode, t) prompts -> one sampler call for prompts x samples ->
parse (train rule) -> eq. 4 from a precomputed [E, T+1, 56] table of cumulative planner
log-likelihoods (one jitted call) -> group advantages -> packed batch -> `jaxtom.rl.Learner`
update. The warm-up reuses the same update with advantage 1 on target tokens, which is exactly
supervised NLL (the on-policy ratio is 1), on label-free random particles.
Writes tensorboard scalars, a tqdm bar, and an orbax checkpoint + tokenizer + config.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxtom.gridworld import EnvParams, generate_episodes
from jaxtom.gridworld.episodes import layout_keys, split_params
from jaxtom.mindzero import data as data_lib
from jaxtom.mindzero.config import MindZeroConfig
from jaxtom.mindzero.observation import HostEpisodes, get_observation
from jaxtom.mindzero.particles import parse_particles, to_arrays
from jaxtom.mindzero.policy import Codec, load_bpe, sample_completions, train_bpe
from jaxtom.mindzero.reward import cumulative_log_likelihoods, elbo_reward
from jaxtom.models import ModelConfig, add_lora, from_pretrained, init_decoder, smollm2_gguf_path
from jaxtom.rl import Learner, StepConfig, group_advantages, pack_sequences
from jaxtom.tokenizer import Tokenizer

_elbo = jax.jit(elbo_reward, static_argnames=("cfg",))


def make_mesh(cfg: MindZeroConfig):
    """The update step's mesh from `cfg.mesh` (None: one device)."""
    if cfg.mesh == (1, 1, 1):
        return None
    from jaxtom import parallel
    return parallel.make_mesh(*cfg.mesh)


def env_params(cfg: MindZeroConfig) -> EnvParams:
    return EnvParams(max_steps=cfg.data.max_steps)


def make_episodes(cfg: MindZeroConfig):
    """(train, eval) episode sets: held-out labels and layouts (`split="labels"`, the paper's
    split) or fresh episodes over all labels (`"episodes"`, for models trained from scratch,
    which cannot know words they never saw)."""
    k_train, k_eval = jax.random.split(jax.random.key(cfg.seed))
    d = cfg.data
    train = generate_episodes(k_train, episode_params(cfg, "train"), d.train_episodes,
                              batch_size=1024)
    test = generate_episodes(k_eval, episode_params(cfg, "test"), d.eval_episodes,
                             batch_size=1024, exclude_layouts=layout_keys(train))
    return train, test


def episode_params(cfg: MindZeroConfig, split: str) -> EnvParams:
    """Environment parameters of the train or test split: held-out labels (`split="labels"`)
    or, with the `figure7` label set, always the 8 colored squares of Figure 7 (brown, pink,
    red, blue, green, yellow, orange, purple)."""
    params = env_params(cfg)
    if cfg.data.split == "labels":
        return split_params(params, split)
    if cfg.data.label_set == "figure7":
        return params.replace(colors=tuple(range(params.num_objects)), shapes=(0,))
    return params


def corpus(cfg: MindZeroConfig, views, rng) -> list[str]:
    """Prompts and well-formed particle completions over all labels, to train the BPE."""
    render = get_observation(cfg.data.observation)
    texts = []
    for view in views:
        for e, t in data_lib.timestep_records(view, stride=3):
            texts.append(render(view, e, t, cfg.data.num_particles))
            texts.append(data_lib.warmup_target(view, e, cfg.data.num_particles, rng))
    return texts


def build_model(cfg: MindZeroConfig, run_dir: Path, views=(), tokenizer_path=None):
    """(model, codec): a tiny decoder over a BPE trained on generated text, or a checkpoint."""
    m = cfg.model
    if m.kind == "tiny":
        path = Path(tokenizer_path or run_dir / "tokenizer.json")
        if tokenizer_path is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tok = train_bpe(corpus(cfg, views, np.random.default_rng(cfg.seed)), m.vocab_size,
                            path)
        else:
            tok = load_bpe(path)
        mcfg = ModelConfig(family="qwen3", vocab_size=tok.vocab_size, hidden_size=m.hidden_size,
                           intermediate_size=m.intermediate_size, num_layers=m.num_layers,
                           num_heads=m.num_heads, num_kv_heads=m.num_kv_heads,
                           head_dim=m.head_dim, qk_norm=True, tie_word_embeddings=True,
                           max_position_embeddings=1024, eos_token_ids=tok.eos_token_ids,
                           param_dtype=cfg.dtype, compute_dtype=cfg.dtype)
        return init_decoder(mcfg, cfg.seed), Codec(tok)
    path = smollm2_gguf_path() if m.path == "smollm2" else Path(m.path)
    model = from_pretrained(path, dtype=cfg.dtype)
    tok = Tokenizer.from_gguf(path) if path.suffix == ".gguf" else Tokenizer.from_file(path)
    if m.lora_rank:
        add_lora(model, rank=m.lora_rank)
    return model, Codec(tok, chat=True)


def step_config(cfg: MindZeroConfig, *, warmup: bool) -> StepConfig:
    r = cfg.rl
    if warmup:
        return StepConfig(learning_rate=cfg.warmup.learning_rate, kl_coef=0.0,
                          total_steps=max(cfg.warmup.steps, 1), warmup_steps=10,
                          weight_decay=0.0, max_grad_norm=1.0, lora=cfg.model.lora_rank > 0)
    return StepConfig(learning_rate=r.learning_rate, weight_decay=r.weight_decay,
                      max_grad_norm=r.max_grad_norm, kl_coef=r.kl_coef, total_steps=r.steps,
                      warmup_steps=r.lr_warmup_steps, lambda_entropy=r.entropy_coef,
                      end_lr_ratio=1.0, micro_batches=r.micro_batches,
                      lora=cfg.model.lora_rank > 0)


def _pack(prompts, completions, advantages, groups, pad_id, row_len=None, decision_ids=None):
    """Prompt + completion rows; with `decision_ids`, the completion tokens among them are the
    decision tokens the entropy bonus acts on (labels and digits, not JSON boilerplate)."""
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions)]
    masks = [[0.0] * len(p) + [1.0] * len(c) for p, c in zip(prompts, completions)]
    decisions = None
    if decision_ids is not None:
        decisions = [[0.0] * len(p) + [float(int(i) in decision_ids) for i in c]
                     for p, c in zip(prompts, completions)]
    longest = max(map(len, seqs))
    row_len = row_len or int(np.ceil(longest / 32) * 32)
    return pack_sequences(seqs, masks, advantages, groups, num_rows=len(seqs), row_len=row_len,
                          pad_id=pad_id, decision_masks=decisions)


def _writer(run_dir: Path):
    from tensorboardX import SummaryWriter
    return SummaryWriter(str(run_dir / "tb"))


def warmup(cfg, model, codec, view, writer, progress=True):
    """Supervised format warm-up on label-free random particles; returns the model."""
    from tqdm import tqdm
    w = cfg.warmup
    learner = Learner(model, step_config(cfg, warmup=True), mesh=make_mesh(cfg))
    state = learner.init_state(model, cfg.seed)
    ds = iter(data_lib.timestep_dataset(view, batch_size=w.batch_size, seed=cfg.seed + 1,
                                        observation=cfg.data.observation,
                                        num_particles=cfg.data.num_particles))
    rng = np.random.default_rng(cfg.seed + 2)
    row_len = max_row_len(cfg, codec, view, cfg.rl.max_new_tokens)
    bar = tqdm(range(w.steps), desc="warm-up", disable=not progress, mininterval=2.0)
    for step in bar:
        batch = next(ds)
        prompts = [codec.prompt_ids(p) for p in batch["prompt"]]
        targets = [codec.completion_ids(data_lib.warmup_target(
                       view, int(e), cfg.data.num_particles, rng, int(t), w.teacher))
                   for e, t in zip(batch["episode"], batch["t"])]
        packed = _pack(prompts, targets, [1.0] * len(prompts), [0] * len(prompts),
                       codec.pad_id, row_len=row_len)
        if step % 25 == 0 or step == w.steps - 1:
            logp = np.asarray(learner.logprobs(state, packed))
            nll = float(-(logp * packed.policy_mask).sum() / packed.policy_mask.sum())
            writer.add_scalar("warmup/nll", nll, step)
            bar.set_postfix(nll=f"{nll:.3f}")
        state, _ = learner.step(state, packed)
    return learner.model(state)


def heldout_monitor(cfg, view: HostEpisodes, num_rows: int = 128):
    """A fixed sample of held-out (episode, t) rows and a function scoring a model on them:
    top-1 goal accuracy and mean log score (queried as the evaluation does) of the true goal (1% uniform mix). Labels are
    read only here, for logging; training never sees them."""
    from jaxtom.eval.metrics import goal_scores
    from jaxtom.gridworld import goal_index
    from jaxtom.mindzero.evaluate import dense
    render = get_observation(cfg.data.observation)
    records = data_lib.timestep_records(view)
    pick = np.random.default_rng(cfg.seed + 11).choice(len(records), min(num_rows, len(records)),
                                                       replace=False)
    rows = [records[i] for i in np.sort(pick)]
    n = cfg.data.num_particles
    true = np.array([int(goal_index(*view.goal[e], 8)) for e, _ in rows])

    def score(model, codec) -> dict:
        prompts = [codec.prompt_ids(render(view, e, t, n)) for e, t in rows]
        texts, _, _ = sample_completions(model, codec, prompts, key=jax.random.key(cfg.seed),
                                         temperature=cfg.eval.temperature,
                                         max_new_tokens=cfg.rl.max_new_tokens)
        beliefs = np.stack([dense(parse_particles(x, view.labels[e], mode="eval",
                                                  num_particles=n), 8)
                            for x, (e, _) in zip(texts, rows)])
        s = goal_scores(beliefs, true, np.full_like(beliefs, 1.0 / beliefs.shape[1]),
                        cfg.eval.score_mix)
        return {"top1": float(np.mean(s["top1"])), "log_score": float(np.mean(s["log_score"]))}
    return score


def max_row_len(cfg, codec, view, max_new_tokens: int, quantum: int = 16) -> int:
    """One packed row length for the whole run (longest prompt + completion budget), so the
    jitted update compiles once."""
    render = get_observation(cfg.data.observation)
    longest = max(len(codec.prompt_ids(render(view, e, t, cfg.data.num_particles)))
                  for e, t in data_lib.timestep_records(view, cfg.data.stride))
    return int(np.ceil((longest + max_new_tokens + 1) / quantum) * quantum)


def train(cfg: MindZeroConfig, progress: bool = True) -> dict:
    """The whole run: data, tokenizer, model, warm-up, SSRL; returns paths and timings."""
    from tqdm import tqdm
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=1))
    t0 = time.perf_counter()
    params = env_params(cfg)
    train_eps, test_eps = make_episodes(cfg)
    view, test_view = HostEpisodes.from_episodes(train_eps), HostEpisodes.from_episodes(test_eps)
    model, codec = build_model(cfg, run_dir, views=(view, test_view))
    writer = _writer(run_dir)
    timings = {"setup_s": time.perf_counter() - t0}
    t1 = time.perf_counter()
    if cfg.warmup.steps:
        model = warmup(cfg, model, codec, view, writer, progress)
        save_model(model, run_dir / "warmup")
    timings["warmup_s"] = time.perf_counter() - t1

    r, n = cfg.rl, cfg.data.num_particles
    table = cumulative_log_likelihoods(train_eps.trajectories, params)  # [E, T+1, G]
    learner = Learner(model, step_config(cfg, warmup=False), mesh=make_mesh(cfg))
    state = learner.init_state(model, cfg.seed)
    ds = iter(data_lib.timestep_dataset(view, batch_size=r.prompts_per_step, seed=cfg.seed,
                                        observation=cfg.data.observation, num_particles=n,
                                        stride=cfg.data.stride))
    key = jax.random.key(cfg.seed + 7)
    row_len = max_row_len(cfg, codec, view, r.max_new_tokens)
    monitor = heldout_monitor(cfg, test_view) if r.monitor_every else None
    (run_dir / "metrics.jsonl").unlink(missing_ok=True)
    t2 = time.perf_counter()
    bar = tqdm(range(r.steps), desc="ssrl", disable=not progress, mininterval=2.0)
    steps_done = 0
    held = {}
    for step in bar:
        if monitor and step % r.monitor_every == 0:
            held = monitor(learner.model(state), codec)
            for k, v in held.items():
                writer.add_scalar(f"heldout/{k}", v, step)
        batch = next(ds)
        G = r.samples_per_prompt
        prompts = [codec.prompt_ids(p) for p in batch["prompt"] for _ in range(G)]
        episode = np.repeat(np.asarray(batch["episode"]), G)
        t = np.repeat(np.asarray(batch["t"]), G)
        key, sub = jax.random.split(key)
        texts, completions, _ = sample_completions(
            learner.model(state), codec, prompts, key=sub, temperature=r.temperature,
            max_new_tokens=r.max_new_tokens)
        parsed = [parse_particles(x, view.labels[e], mode="train", num_particles=n,
                                  duplicates=cfg.reward.duplicates)
                  for x, e in zip(texts, episode)]
        goals, q, ok = to_arrays(parsed, params.num_objects, n)
        reward, terms = _elbo(table[episode, t], goals, q, ok, t, None, cfg.reward)
        adv = np.asarray(group_advantages(reward, G))
        packed = _pack(prompts, completions, adv.tolist(), np.repeat(np.arange(len(t) // G), G),
                       codec.pad_id, row_len=row_len,
                       decision_ids=codec.decision_ids if r.entropy_coef > 0 else None)
        state, metrics = learner.step(state, packed)
        steps_done += 1
        if step % 5 == 0:
            stats = {"reward": float(jnp.mean(reward)), "valid": float(ok.mean()),
                     "likelihood": float(jnp.mean(terms["likelihood"])),
                     "q_entropy": float(jnp.mean(terms["entropy"])),
                     "completion_tokens": float(np.mean([len(c) for c in completions])),
                     # groups whose samples all scored the same teach nothing (collapse)
                     "flat_groups": float(np.mean(np.ptp(np.asarray(reward).reshape(-1, G),
                                                         axis=1) == 0))}
            stats.update({k: float(v) for k, v in metrics.items()})
            for k, v in stats.items():
                writer.add_scalar(f"ssrl/{k}", v, step)
            with open(run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps({"step": step, "time_s": round(time.perf_counter() - t2, 1),
                                    **stats, **{f"heldout_{k}": v for k, v in held.items()}})
                        + "\n")
            bar.set_postfix(reward=f"{stats['reward']:.1f}", valid=f"{stats['valid']:.2f}",
                            heldout_top1=f"{held.get('top1', float('nan')):.2f}")
        if r.max_seconds and time.perf_counter() - t2 > r.max_seconds:
            break
    timings["ssrl_s"] = time.perf_counter() - t2
    timings["ssrl_steps"] = steps_done
    save_model(learner.model(state), run_dir / "checkpoint")
    writer.close()
    timings["total_s"] = time.perf_counter() - t0
    (run_dir / "timings.json").write_text(json.dumps(timings, indent=1))
    return {"run_dir": str(run_dir), "timings": timings, "train": train_eps, "test": test_eps}


def save_model(model, path: Path) -> Path:
    """Orbax checkpoint of the model's parameters (restore with `load_model`)."""
    import orbax.checkpoint as ocp
    path = Path(path).absolute()
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(path, nnx.state(model), force=True)
    ckpt.wait_until_finished()
    return path


def load_model(cfg: MindZeroConfig, checkpoint: str | Path, tokenizer_path=None):
    """(model, codec) from a run's checkpoint directory (tiny: plus its tokenizer.json)."""
    import orbax.checkpoint as ocp
    checkpoint = Path(checkpoint).absolute()
    tok = tokenizer_path or checkpoint.parent / "tokenizer.json"
    model, codec = build_model(cfg, checkpoint.parent, tokenizer_path=tok)
    graphdef, abstract = nnx.split(model)
    restored = ocp.StandardCheckpointer().restore(checkpoint, abstract)
    return nnx.merge(graphdef, restored), codec
